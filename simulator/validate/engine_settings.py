"""The rebuilt scenario's model, hardware, engine and scheduler, each knob from the run's record
(record.py) where it holds one, an option where the user gave one, else derived, with a note
saying which.

Data parallelism: ``data_parallel_size`` N becomes N engine replicas. vLLM's front end sends
each request to the engine with the lowest ``4 x waiting + running`` (``DPLBAsyncMPClient``,
counts refreshed every 100 ms); the closest router servesim has is ``least_loaded`` (fewest
unfinished requests, exact counts), which is what the replicas use.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Literal

from cost_models import user_paths
from cost_models.hardware import hardware_aliases
from cost_models.model_spec import ModelSpec, load_model
from cost_models.precision import DTYPE_BYTES, DTYPES, KV_CACHE_DTYPES
from simulator.scenario.model import EngineOptions
from simulator.validate.measured import MeasuredRun
from simulator.validate.record import EngineRecord, Setting, choose

# Async scheduling became vLLM's default with PR #27614 (late 2025, semantics §1.6). The release
# boundary is our assumption, not checked against release notes: the first release after it.
_ASYNC_DEFAULT_SINCE = (0, 12)
DP_ROUTER = "least_loaded"


@dataclass(frozen=True)
class RebuildOptions:
    cost_model: dict
    hardware: str | dict
    model: str
    num_gpu_blocks: int | None = None
    gpu_memory_utilization: float | None = None
    async_scheduling: Literal["on", "off", "auto"] = "auto"
    arrivals: Literal["replay", "closed-loop"] = "replay"


def record_of(measured: MeasuredRun) -> EngineRecord:
    return EngineRecord(measured.engine_args, measured.engine_sources)


def resolve_model(measured: MeasuredRun, given: str | None) -> Setting:
    """``--model``, else the recorded model: a local config path as it is, a name as its preset
    (``meta-llama/Llama-3.1-8B``, ``Qwen/Qwen3-30B-A3B-Instruct-2507``: model_spec's table)."""
    record = record_of(measured)
    if given:
        load_model(given)
        return Setting("model", given, "given", "--model")
    recorded = str(record.get("model") or "")
    if not recorded:
        raise ValueError("--model: the run does not record its model; pass --model NAME or a config.json path")
    try:
        spec = load_model(recorded)
    except ValueError:
        raise ValueError(f"--model: the run's model {recorded!r} is not a preset (servesim models) and no "
                         f"config.json is at that path; pass --model NAME or a config.json path") from None
    local = user_paths.is_dir(recorded) or user_paths.is_file(recorded)
    value, how = (recorded, "its config.json") if local else (spec.name, f"preset {spec.name}")
    return Setting("model", value, "recorded", f"{record.sources['model']} {recorded!r}, {how}")


def resolve_hardware(measured: MeasuredRun, given: str | None, from_cost_model: str | None) -> str | dict:
    return hardware_setting(measured, given, from_cost_model).value


def hardware_setting(measured: MeasuredRun, given: str | None, from_cost_model: str | None) -> Setting:
    """``--hardware``; a CPU run's placeholder; the run's recorded GPU; the folder's; the cost model's."""
    args, sources = measured.engine_args, measured.engine_sources
    if given:
        return Setting("hardware", given, "given", "--hardware")
    if args.get("device") == "cpu":
        return Setting("hardware", CPU_HARDWARE, "derived", "a CPU engine: blocks are given, no GPU to size")
    named = _preset_named_in(str(args.get("device_name") or ""))
    if named and "device_name" in sources:
        return Setting("hardware", named, "recorded", f"{sources['device_name']} {args['device_name']!r}")
    if named:
        return Setting("hardware", named, "derived",
                       f"not recorded: the run folder's name {args['device_name']!r}")
    if from_cost_model:
        return Setting("hardware", from_cost_model, "derived",
                       "not recorded: the GPU the cost model was measured on")
    raise ValueError("--hardware: the run does not name a known GPU and the cost model does not either; "
                     "pass --hardware NAME (servesim hardware)")


# A CPU engine has no GPU to size: blocks are given, so only the placeholder's existence matters.
CPU_HARDWARE = {"name": "cpu", "memory_gib": 16, "memory_bandwidth_GBps": 20, "bf16_tflops": 1}


def _preset_named_in(device_name: str) -> str | None:
    """The preset whose longest alias appears in a device name ("NVIDIA RTX PRO 6000 Blackwell ...")."""
    squeezed = _squeezed(device_name)
    hits = [(len(_squeezed(alias)), preset) for alias, preset in hardware_aliases().items()
            if squeezed and _squeezed(alias) in squeezed]
    return max(hits)[1] if hits else None


def _squeezed(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())   # RTXPRO6000 and rtx-pro-6000 alike


def engine_section(measured: MeasuredRun, options: RebuildOptions) -> tuple[dict, list[Setting]]:
    """The scenario's ``engine`` block and its knobs (a derived count is None until ``resolved``)."""
    record = record_of(measured)
    model = load_model(options.model)
    pp = _pipeline_parallel(record)
    tp = choose(record, "tensor_parallel_size", default=1, why="vLLM's default")
    dp = choose(record, "data_parallel_size", default=1, why="vLLM's default, one engine")
    ep = choose(record, "enable_expert_parallel", default=False, why="vLLM's default")
    block = block_size_setting(measured)
    default_util = EngineOptions.__dataclass_fields__["gpu_memory_utilization"].default
    util = choose(record, "gpu_memory_utilization", options.gpu_memory_utilization, "--gpu-memory-utilization",
                  default=default_util, why="servesim's default, vLLM V1's; 0.90 in older releases")
    blocks = choose(record, "num_gpu_blocks", options.num_gpu_blocks, "--num-gpu-blocks")
    max_len = choose(record, "max_model_len", default=model.max_model_len, why="the model's context length")
    engine: dict[str, Any] = {"tensor_parallel_size": tp.value, "block_size": block.value,
                              "gpu_memory_utilization": util.value, "num_replicas": dp.value}
    if dp.value > 1:
        engine["router"] = DP_ROUTER
    if pp.value != 1:
        engine["pipeline_parallel_size"] = pp.value
    if ep.value:
        engine["enable_expert_parallel"] = True
    if max_len.how != "derived":
        engine["max_model_len"] = max_len.value
    if blocks.how != "derived":
        engine["num_gpu_blocks"] = blocks.value
    fitted = options.cost_model.get("kind") == "profiled"
    kv = _kv_cache_dtype(record, blocks.how != "derived", fitted)
    if kv.value != "auto" and not fitted:
        engine["kv_cache_dtype"] = kv.value
    dtype = _dtype(record, model, fitted)
    if _other_width(dtype.value, model):
        engine["dtype"] = dtype.value
    quantization = _quantization(record, model)
    if quantization.value is not None:
        engine["quantization"] = quantization.value
    recorded_ep = [ep] if ep.how != "derived" else []
    return engine, [tp, pp, _replicas_note(dp), *recorded_ep, block, blocks, util, max_len, dtype, kv, quantization]


def _pipeline_parallel(record) -> Setting:
    """The run's pipeline stages: the engine block carries them, the scheduler's async default
    follows them (rule P3)."""
    return choose(record, "pipeline_parallel_size", default=1, why="vLLM's default")


def block_size_setting(measured: MeasuredRun) -> Setting:
    cpu = measured.engine_args.get("device") == "cpu"
    return choose(record_of(measured), "block_size", default=128 if cpu else 16,
                  why=f"vLLM's default on {'CPU' if cpu else 'GPU'}")


def _replicas_note(dp: Setting) -> Setting:
    if dp.value == 1:
        return dp
    where = (f"{dp.where}; simulated as {dp.value} engine replicas, each request to the one with the fewest "
             f"unfinished requests, as vLLM's DP load balancer (it scores 4 x waiting + running)")
    return Setting(dp.name, dp.value, dp.how, where)


def _other_width(dtype, model: ModelSpec) -> bool:
    """Whether a vLLM dtype name is a width other than the model's own (``auto`` is not)."""
    width = DTYPE_BYTES.get(str(dtype).lower())
    return width is not None and width != model.dtype_bytes


def _dtype(record: EngineRecord, model: ModelSpec, fitted: bool) -> Setting:
    """The recorded dtype: the width of activations, unquantized weights and an ``auto`` KV cache
    (engine.dtype). A fitted cost model was measured at the model's own width, so there another
    width is refused."""
    dtype = choose(record, "dtype", default="auto", why="vLLM's default, the model's own")
    width = DTYPE_BYTES.get(str(dtype.value).lower())
    if dtype.value != "auto" and width is None:
        raise ValueError(f"dtype: {dtype.value!r} ({dtype.where}) is not modelled; "
                         f"allowed: {', '.join(DTYPES)}")
    if _other_width(dtype.value, model):
        if fitted:
            raise ValueError(f"dtype: the run recorded {dtype.value} ({width}-byte weights and KV) but {model.name} "
                             f"is sized at {model.dtype_bytes} bytes, as the fitted cost model was measured; "
                             f"pass --model a config.json with torch_dtype {dtype.value}")
        return Setting(dtype.name, str(dtype.value).lower(), dtype.how,
                       f"{dtype.where}; simulated at {width} bytes (engine.dtype), {model.name}'s own "
                       f"is {model.dtype_bytes}")
    where = f"{dtype.where}; {model.name} at {model.dtype_bytes} bytes"
    return Setting(dtype.name, dtype.value, dtype.how, where)


# vLLM --quantization methods whose weight format the method alone fixes (cost_models/precision.py).
_FORMAT_OF_METHOD = {"fp8": "fp8", "fbgemm_fp8": "fp8", "modelopt": "fp8"}


def _quantization(record: EngineRecord, model: ModelSpec) -> Setting:
    """The recorded quantization method as a weight format: fixed by the method (fp8), else read
    from the model's config.json quantization_config (GPTQ, AWQ: their bits)."""
    q = choose(record, "quantization", default=None, why="the model config's quantization_config, or none")
    if q.value is None:
        return q
    if q.value in _FORMAT_OF_METHOD:
        return Setting(q.name, _FORMAT_OF_METHOD[q.value], q.how, f"{q.where} {q.value!r}")
    if model.quantization == "none":
        raise ValueError(f"quantization: {q.value!r} ({q.where}) needs the model's config.json with its "
                         f"quantization_config for the weight format; pass --model a config.json path "
                         f"(formats fixed by the method: {', '.join(_FORMAT_OF_METHOD)})")
    return Setting(q.name, None, q.how, f"{q.where} {q.value!r}; {model.quantization} weights, "
                   f"from {model.name}'s quantization_config")


def _kv_cache_dtype(record: EngineRecord, blocks_known: bool, measured_tables: bool) -> Setting:
    """The recorded KV dtype, which sizes the KV blocks and their reads (cost_models/precision.py).

    A fitted cost model was measured with a 16-bit cache and cannot price another: there the
    dtype is only noted, which needs the block count known.
    """
    kv = choose(record, "kv_cache_dtype", default="auto", why="vLLM's default, the model's dtype")
    if kv.value == "auto":
        return kv
    if kv.value not in KV_CACHE_DTYPES:
        raise ValueError(f"kv_cache_dtype: {kv.value!r} ({kv.where}) is not modelled; "
                         f"allowed: {', '.join(KV_CACHE_DTYPES)}")
    if not measured_tables:
        return kv
    if not blocks_known:
        raise ValueError(f"kv_cache_dtype: {kv.value} ({kv.where}) is not modelled by a fitted cost model "
                         f"when KV blocks are derived from GPU memory; pass --num-gpu-blocks")
    return Setting(kv.name, kv.value, kv.how, f"{kv.where}; not modelled by the fitted cost model, "
                   f"the block count is known")


def scheduler_section(measured: MeasuredRun, options: RebuildOptions, name: str) -> tuple[dict, list[Setting]]:
    """The ``vllm_v1`` scheduler entry and its knobs (a derived budget is None until ``resolved``)."""
    record = record_of(measured)
    settings = [choose(record, "max_num_seqs", why="vLLM's GPU-dependent default"),
                choose(record, "max_num_batched_tokens", why="vLLM's GPU-dependent default"),
                choose(record, "enable_chunked_prefill", default=True, why="vLLM V1's default"),
                choose(record, "enable_prefix_caching", default=True, why="vLLM V1's default")]
    scheduler: dict[str, Any] = {"preset": "vllm_v1", "name": name}
    for s in settings:
        if s.value is not None:
            scheduler[s.name] = s.value
    pp = _pipeline_parallel(record).value
    value, how, where = resolve_async_scheduling(options.async_scheduling, measured.engine_args,
                                                 measured.engine_sources, pp)
    if value is not None:
        scheduler["async_scheduling"] = value
    return scheduler, settings + [Setting("async_scheduling", "unset" if value is None else value, how, where)]


def resolved(settings: list[Setting], scenario: dict, num_gpu_blocks: int, options: Any) -> list[Setting]:
    """What the prepared run uses: ``scenario`` after ``--set``, its KV blocks and its scheduler's
    options. A derived count is filled in; a value ``--set`` changed is marked so."""
    final = {**scenario["engine"], **scenario["schedulers"][0], "num_gpu_blocks": num_gpu_blocks,
             "max_num_seqs": options.max_num_seqs, "max_num_batched_tokens": options.max_num_batched_tokens}
    out = []
    for s in settings:
        value = final.get(_SCENARIO_KEYS.get(s.name, s.name), s.value)
        if s.value is None:
            where = _blocks_why(final["gpu_memory_utilization"]) if s.name == "num_gpu_blocks" else s.where
            s = replace(s, value=value, where=where)
        elif value != s.value:
            s = Setting(s.name, value, "given", f"--set, over {s.how} {_shown(s.value)}")
        out.append(s)
    return out


_SCENARIO_KEYS = {"data_parallel_size": "num_replicas"}   # knob -> its key in the scenario


def _blocks_why(utilization: float) -> str:
    return f"not recorded: from GPU memory at gpu_memory_utilization {utilization}, per engine"


def _shown(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def resolve_async_scheduling(mode: str, engine: dict[str, Any], sources: dict[str, str] | None = None,
                             pipeline_parallel_size: int = 1) -> tuple[bool | None, str, str]:
    """(value, how, where): ``auto`` follows what the recorded vLLM would have done."""
    if mode in ("on", "off"):
        return mode == "on", "given", "--async-scheduling"
    if pipeline_parallel_size > 1:   # docs/pipeline-parallel-semantics.md, rule P3
        return False, "derived", "vLLM's V1 model runner turns it off under pipeline parallelism"
    if engine.get("async_scheduling") is not None:
        where = (sources or {}).get("async_scheduling", "engine args")
        return bool(engine["async_scheduling"]), "recorded", where
    if engine.get("device") == "cpu":
        return False, "derived", "not recorded: vLLM forces it off on CPU"
    version = _version(engine.get("vllm_version"))
    if version is None:
        return None, "derived", "not recorded and the vLLM version unknown: the scheduler's default"
    return version >= _ASYNC_DEFAULT_SINCE, "derived", f"not recorded: vLLM {engine['vllm_version']}'s default"


def _version(text: Any) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", str(text or ""))
    return (int(match.group(1)), int(match.group(2))) if match else None
