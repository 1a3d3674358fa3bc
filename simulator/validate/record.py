"""What a measured run recorded about its engine, and where each value was read.

A record is a JSON object in one of the shapes runs are saved in; the first place that holds a
value wins, most trusted first:

1. ``resolved_config.<section>.<field>``: vLLM's ``VllmConfig`` as the engine ran it, defaults
   filled in and ``num_gpu_blocks`` profiled (``cache_config``, ``parallel_config``,
   ``model_config``, ``scheduler_config``: the field names of vLLM 0.11-0.19's config classes);
2. ``kv_cache.<field>``: LLMServingSim's copy of the cache_config facts it needs;
3. ``engine_kwargs.<arg>``: the engine arguments asked for (vLLM's ``AsyncEngineArgs`` names);
4. ``<arg>`` at the top level: a flat JSON of vLLM engine arguments (``--engine-args FILE``).

The shape followed is LLMServingSim's bench runner (casys-kaist/LLMServingSim, commit 4a23e9f,
``bench/core/runner.py`` ``_resolved_config``/``_kv_cache_facts`` and ``recorder.write_meta``),
which walks the booted engine's ``VllmConfig``; a value it could not serialise is a ``"<type>"``
tag, and a tag or a null counts as not recorded. vLLM's front end sums ``num_gpu_blocks`` over
its data-parallel engines (``vllm/v1/engine/utils.py`` ``wait_for_engine_startup``: "Sum values
from all engines in DP case"), so a count read from the resolved config or ``kv_cache`` is split
over ``data_parallel_size``; ``num_gpu_blocks_override`` is per engine.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

# knob -> (section, field) of vLLM's resolved VllmConfig
_RESOLVED = {
    "num_gpu_blocks": ("cache_config", "num_gpu_blocks"),
    "block_size": ("cache_config", "block_size"),
    "gpu_memory_utilization": ("cache_config", "gpu_memory_utilization"),
    "enable_prefix_caching": ("cache_config", "enable_prefix_caching"),
    "kv_cache_dtype": ("cache_config", "cache_dtype"),
    "tensor_parallel_size": ("parallel_config", "tensor_parallel_size"),
    "data_parallel_size": ("parallel_config", "data_parallel_size"),
    "pipeline_parallel_size": ("parallel_config", "pipeline_parallel_size"),
    "enable_expert_parallel": ("parallel_config", "enable_expert_parallel"),
    "model": ("model_config", "model"),
    "dtype": ("model_config", "dtype"),
    "quantization": ("model_config", "quantization"),
    "max_model_len": ("model_config", "max_model_len"),
    "max_num_seqs": ("scheduler_config", "max_num_seqs"),
    "max_num_batched_tokens": ("scheduler_config", "max_num_batched_tokens"),
    "enable_chunked_prefill": ("scheduler_config", "enable_chunked_prefill"),
    "async_scheduling": ("scheduler_config", "async_scheduling"),
}
_KV_CACHE = ("num_gpu_blocks", "block_size", "gpu_memory_utilization", "enable_prefix_caching")
# Engine-argument spellings where they differ from the knob's name.
_ARGUMENTS = {"num_gpu_blocks": ("num_gpu_blocks_override", "num_gpu_blocks"),
              "kv_cache_dtype": ("kv_cache_dtype", "cache_dtype")}
_SUMMED_OVER_DP = {("resolved_config", "cache_config", "num_gpu_blocks"), ("kv_cache", "num_gpu_blocks")}
# Facts about the run that are not engine knobs.
_FACTS = {"vllm_version": [("vllm_version",)], "device": [("engine_kwargs", "device"), ("device",)],
          "device_name": [("hardware", "device_name"), ("device_name",)]}


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def _fraction(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 1
    return float(value) if ok else None


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    if not isinstance(value, str) or not value or value.startswith("<"):
        return None
    return value.removeprefix("torch.")   # a resolved dtype is recorded as repr(torch.bfloat16)


_KINDS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "num_gpu_blocks": (_count, "a positive integer"), "block_size": (_count, "a positive integer"),
    "tensor_parallel_size": (_count, "a positive integer"), "data_parallel_size": (_count, "a positive integer"),
    "pipeline_parallel_size": (_count, "a positive integer"),
    "max_model_len": (_count, "a positive integer"), "max_num_seqs": (_count, "a positive integer"),
    "max_num_batched_tokens": (_count, "a positive integer"),
    "gpu_memory_utilization": (_fraction, "a number in (0, 1]"),
    "enable_prefix_caching": (_flag, "true or false"), "enable_chunked_prefill": (_flag, "true or false"),
    "async_scheduling": (_flag, "true or false"), "enable_expert_parallel": (_flag, "true or false"),
    "model": (_text, "a model name or path"), "dtype": (_text, "a dtype name"),
    "kv_cache_dtype": (_text, "a dtype name"), "quantization": (_text, "a quantization method name"),
}


@dataclass(frozen=True, eq=False)
class EngineRecord:
    """The knobs a record holds (vLLM's names; ``num_gpu_blocks`` per engine), each with the
    field it was read from, e.g. ``meta.json resolved_config.cache_config.num_gpu_blocks``."""
    values: dict[str, Any]
    sources: dict[str, str]

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)


def read_engine_record(doc: dict, origin: str) -> EngineRecord:
    """Every knob and fact ``doc`` records; ``origin`` names the file in the sources."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name, (parse, allowed) in _KINDS.items():
        for path in _places(name):
            raw = _at(doc, path)
            if raw is None or (isinstance(raw, str) and raw.startswith("<")):
                continue   # not recorded (or not serialisable when it was)
            value = parse(raw)
            if value is None:
                raise ValueError(f"{origin} {'.'.join(path)}: {raw!r} is not {allowed}")
            values[name], sources[name] = value, f"{origin} {'.'.join(path)}"
            break
    for name, paths in _FACTS.items():
        path = next((p for p in paths if _at(doc, p) not in (None, "")), None)
        if path is not None:
            values[name], sources[name] = _at(doc, path), f"{origin} {'.'.join(path)}"
    _split_blocks_over_engines(values, sources)
    return EngineRecord(values, sources)


def _places(name: str):
    if name in _RESOLVED:
        yield ("resolved_config", *_RESOLVED[name])
    if name in _KV_CACHE:
        yield ("kv_cache", name)
    for argument in _ARGUMENTS.get(name, (name,)):
        yield ("engine_kwargs", argument)
        yield (argument,)


def _at(doc: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)
    return doc


def _split_blocks_over_engines(values: dict, sources: dict) -> None:
    """The front end's summed block count -> one engine's share (engines profile their own GPU,
    so a sum that does not split evenly gives each the floor)."""
    engines = values.get("data_parallel_size", 1)
    where = sources.get("num_gpu_blocks", "")
    if engines == 1 or not any(where.endswith(".".join(p)) for p in _SUMMED_OVER_DP):
        return
    total = values["num_gpu_blocks"]
    values["num_gpu_blocks"] = max(total // engines, 2)
    uneven = f", {total % engines} left over" if total % engines else ""
    sources["num_gpu_blocks"] = (f"{where}: {total} summed by vLLM's front end over {engines} "
                                 f"data-parallel engines{uneven}")


@dataclass(frozen=True)
class Setting:
    """One engine knob of the rebuilt scenario and where its value came from."""
    name: str
    value: Any
    how: str      # recorded | given | derived
    where: str    # the record's field, the option, or why this default

    def note(self) -> str:
        value = str(self.value).lower() if isinstance(self.value, bool) else self.value
        if isinstance(value, dict):   # an inline hardware spec
            value = value.get("name", "inline")
        return f"{self.name} {value}: {self.how} ({self.where})"


def choose(record: EngineRecord, name: str, given: Any = None, option: str = "",
           default: Any = None, why: str = "") -> Setting:
    """An option the user gave, else the record's value, else ``default`` (derived, ``why``)."""
    if given is not None:
        return Setting(name, given, "given", option)
    if name in record.sources:
        return Setting(name, record.values[name], "recorded", record.sources[name])
    return Setting(name, default, "derived", f"not recorded: {why}")
