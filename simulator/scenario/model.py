"""Scenario files: strict YAML validated before anything runs (design §7). Reading a file (YAML,
``--set`` overrides) is simulator/scenario/file.py's; this module validates the mapping.

Every user mistake becomes one ``ScenarioError`` line naming the field path, the value and what is
allowed. ``servesim schema`` prints the JSON Schema of the same model so editors can check files.

``Scenario`` is a frozen dataclass. Pydantic validates a file through a model made from its fields
(``_scenario_model``), and the dataclass is built from the model's values; the same model gives the
JSON Schema.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, create_model

from cost_models import user_paths
from cost_models.options import (Bool, Constraint, NonNegativeInt, PositiveFloat,
                                 PositiveInt, UnitInterval, options_config)
from cost_models.precision import DTYPES, KV_CACHE_DTYPES, QUANTIZATIONS
from simulator.scenario.errors import ScenarioError  # noqa: F401 (its home for callers)
from simulator.scenario.field_names import NOT_MODELLED, unknown_field_hint
from simulator.scenario.file import read_raw_scenario
from simulator.scenario.pools import DisaggregationOptions, GpuBlocks
from simulator.engine.routing import DEFAULT_LOAD_BOUND, router_names
from simulator.policies.registry import get_preset, preset_names
from simulator.policies.speculative import SpeculativeOptions
from simulator.workload.generate import WorkloadSpec

# A name becomes a folder under the result directory: no separators, no "." or ".." tricks, and
# well within a file system's 255 bytes per name.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
MAX_REPLICAS = 1024
MAX_BLOCK_SIZE = 1 << 16
Percentile = Annotated[float, Constraint(strict=True, gt=0, le=100)]
RouterName = Literal[router_names()]   # the registered routers (simulator/engine/routing.py)


@options_config
@dataclass(frozen=True)
class EngineOptions:
    tensor_parallel_size: PositiveInt = 1
    # Stages of the layers, a batch in flight per stage (docs/pipeline-parallel-semantics.md).
    pipeline_parallel_size: PositiveInt = 1
    gpu_memory_utilization: UnitInterval = 0.92       # vLLM V1 default (semantics §8)
    # vLLM uses 16 (1 to 128 for attention; hybrid models' larger pages reach a few thousand);
    # the decode cohort keeps a counter per token of a block.
    block_size: Annotated[int, Constraint(
        strict=True, ge=1, le=MAX_BLOCK_SIZE,
        description="at most 65536: the decode cohort keeps a counter per token of a block")] = 16
    num_gpu_blocks: GpuBlocks | None = None            # like num_gpu_blocks_override
    max_model_len: PositiveInt | None = None           # default: the model's context length
    # Each replica is a scheduler, a KV pool and a serve process, and every router but round_robin
    # scans them all per arrival: past a thousand, simulate one replica at its share of the load.
    num_replicas: Annotated[int, Constraint(
        strict=True, ge=1, le=MAX_REPLICAS,
        description="at most 1024: each replica is a scheduler, a KV pool and a process")] = 1
    router: RouterName = "round_robin"
    # prefix_affinity's bound: unfinished requests above the least loaded replica's. Other
    # routers ignore it, so a sweep over engine.router can keep one value.
    router_load_bound: NonNegativeInt = DEFAULT_LOAD_BOUND
    # `vllm serve` and the `LLM` class have different default budgets (trap 11).
    entrypoint: Literal["serve", "llm"] = "serve"
    # vLLM's speculative_config (docs/speculative-decoding-semantics.md); None: off.
    speculative: SpeculativeOptions | None = None
    # vLLM's --dtype, --quantization and --kv-cache-dtype (cost_models/precision.py): the bytes of
    # a weight and a KV element in memory and in every cost term; no quantization: the config's.
    dtype: Literal[DTYPES] = "auto"
    quantization: Literal[QUANTIZATIONS] | None = None
    kv_cache_dtype: Literal[KV_CACHE_DTYPES] = "auto"
    # vLLM's --enable-expert-parallel: an MoE model's experts whole on the tensor-parallel ranks
    # (docs/expert-parallel-semantics.md); no effect at tensor_parallel_size 1, as in vLLM.
    enable_expert_parallel: Bool = False


@options_config
@dataclass(frozen=True)
class GoodputSLOs:
    ttft_ms: PositiveFloat | None = None
    tpot_ms: PositiveFloat | None = None
    e2el_ms: PositiveFloat | None = None

    def as_dict(self) -> dict[str, float]:
        return {k.removesuffix("_ms"): v for k, v in vars(self).items() if v is not None}


@options_config
@dataclass(frozen=True)
class MetricsOptions:
    percentiles: tuple[Percentile, ...] = (90.0, 95.0, 99.0)
    goodput: GoodputSLOs | None = None
    record_itl_gaps: Bool = True        # exact ITL percentiles; memory grows with tokens


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """A whole scenario file, validated (``servesim schema`` prints its JSON Schema)."""

    name: Annotated[str, Constraint(pattern=NAME_PATTERN)]
    description: str = ""
    seed: NonNegativeInt = 0            # numpy seeds are non-negative
    model: str
    hardware: str | dict[str, Any] = "h100-sxm"
    cost_model: dict[str, Any] = field(default_factory=lambda: {"kind": "roofline"})
    engine: EngineOptions = EngineOptions()
    workload: WorkloadSpec
    schedulers: Annotated[list[dict[str, Any]], Constraint(min_length=1)]
    metrics: MetricsOptions = MetricsOptions()
    # Prefill/decode pools instead of engine.num_replicas co-located replicas (scenario/pools.py).
    disaggregation: DisaggregationOptions | None = None
    # `servesim sweep` only (`servesim run` ignores both and runs the file as written): dotted
    # field paths to lists of values, crossed; and how many seeds (seed, seed+1, ...) per point.
    # simulator/scenario/sweep_plan.py checks every path and value before any run.
    sweep: dict[str, list[Any]] | None = None
    num_seeds: PositiveInt = 1

    def scheduler_options(self) -> list[Any]:
        """Each entry validated against its preset's Options dataclass; labels must be unique."""
        options = [_scheduler_options(i, entry) for i, entry in enumerate(self.schedulers)]
        labels = [o.label for o in options]
        for i, label in enumerate(labels):
            if labels.index(label) != i:
                raise ScenarioError(f"schedulers[{i}].name: {label!r} is used twice; give each "
                                    f"scheduler a unique name")
        return options


@functools.lru_cache(maxsize=None)
def _scenario_model() -> type[BaseModel]:
    """The pydantic model of ``Scenario``'s fields: it validates files and gives the JSON Schema."""
    hints = typing.get_type_hints(Scenario, include_extras=True)
    fields = {}
    for f in dataclasses.fields(Scenario):
        if f.default_factory is not dataclasses.MISSING:
            fields[f.name] = (hints[f.name], Field(default_factory=f.default_factory))
        else:
            fields[f.name] = (hints[f.name], ... if f.default is dataclasses.MISSING else f.default)
    return create_model("Scenario", __config__=ConfigDict(extra="forbid", frozen=True), **fields)


def _build_scenario(raw: dict) -> Scenario:
    try:
        model = _scenario_model().model_validate(raw)
    except ValidationError as exc:
        raise ScenarioError(format_validation_error(exc, raw=raw, root=Scenario)) from None
    except ValueError as exc:
        raise ScenarioError(str(exc).split("\n")[0]) from None
    return Scenario(**{f.name: getattr(model, f.name) for f in dataclasses.fields(Scenario)})


@functools.lru_cache(maxsize=None)
def _options_adapter(options_cls: type) -> TypeAdapter:
    """One validator per options class: building one costs far more than using it, and sweeps
    validate the same classes many times."""
    return TypeAdapter(options_cls)


def _validate_options(options_cls: type, entry: dict[str, Any], index: int) -> Any:
    try:
        return _options_adapter(options_cls).validate_python(entry)
    except ValidationError as exc:
        raise ScenarioError(format_validation_error(exc, f"schedulers[{index}]", entry,
                                                    root=options_cls)) from None


def _scheduler_options(index: int, entry: dict[str, Any]):
    entry = dict(entry)
    preset = entry.get("preset", entry.get("kind"))
    if not isinstance(preset, str):
        problem = "required field is missing" if preset is None else f"{preset!r} is not allowed"
        raise ScenarioError(f"schedulers[{index}].preset: {problem}; one of "
                            f"{', '.join(preset_names())} or package.module:Class")
    entry.pop("kind", None)
    entry["preset"] = preset
    try:
        found = get_preset(preset)
    except ValueError as exc:
        raise ScenarioError(f"schedulers[{index}].{str(exc).removeprefix('schedulers.')}") from None
    cls = found.cls
    if not isinstance(getattr(cls, "Options", None), type):
        raise ScenarioError(f"schedulers[{index}].preset: {preset!r} is not a scheduler class (it "
                            f"needs an Options dataclass; see simulator/policies/base.py)")
    entry = {**found.defaults, **entry}   # the preset's own defaults (e.g. Sarathi's 512 budget)
    options = _validate_options(cls.Options, entry, index)
    name = getattr(options, "name", None)
    if name is not None and not re.fullmatch(NAME_PATTERN, name):
        raise ScenarioError(f"schedulers[{index}].name: {name!r} is not allowed: it names the result "
                            f"folder, so letters, digits, '.', '_' and '-' only, starting with a "
                            f"letter or digit, at most 128 characters")
    return options


def _loc(prefix: str, loc: tuple, raw: Any) -> str:
    """The user's field path: pydantic's union-tag and type entries are not keys of the input."""
    parts = [prefix] if prefix else []
    node = raw
    for item in loc:
        if isinstance(item, int) and isinstance(node, list):
            parts[-1:] = [f"{parts[-1] if parts else ''}[{item}]"]
            node = node[item] if item < len(node) else None
        elif isinstance(node, dict) and item in node:
            parts.append(str(item))
            node = node[item]
        elif node is None or isinstance(node, dict) and not _is_internal(item, node):
            parts.append(str(item))  # a missing or unknown key: still the user's name
            node = None
    return ".".join(parts) or "scenario"


def _is_internal(item: Any, node: dict) -> bool:
    return (not isinstance(item, str) or item == node.get("kind")
            or item.startswith(("function-", "tagged-union")) or "[" in item
            or item in {"str", "int", "float", "bool", "list", "dict"})


def format_validation_error(exc: ValidationError, prefix: str = "", raw: Any = None,
                            root: type | None = None) -> str:
    """One line for the first error; ``root``, the dataclass validated, lets an unknown field's
    refusal list the valid ones."""
    err = exc.errors()[0]
    msg = err["msg"].removeprefix("Value error, ")
    where = _loc(prefix, err["loc"], raw)
    if err["type"] == "value_error" and ":" in msg.split(" ")[0]:
        # Our own __post_init__ message names the field and value; "ClassName.field" becomes the
        # field's path in the file.
        head, _, rest = msg.split("\n")[0].partition(".")
        return f"{where}.{rest}" if head[:1].isupper() and head.isidentifier() else msg.split("\n")[0]
    if err["type"] in ("missing", "missing_argument"):
        return f"{where}: required field is missing"
    if err["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
        if err["loc"] and err["loc"][-1] in NOT_MODELLED:
            return f"{where}: {NOT_MODELLED[err['loc'][-1]]}"
        hint = unknown_field_hint(root, err["loc"]) if root is not None else ""
        return f"{where}: unknown field (not allowed here; check the spelling){hint}"
    if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
        # Name the tag field itself (workload.arrival.kind), not the whole block.
        ctx = err["ctx"]
        where = f"{where}.{ctx['discriminator'].strip(repr(''))}"
        if err["type"] == "union_tag_not_found":
            return f"{where}: required field is missing"
        return f"{where}: {ctx['tag']!r} is not allowed; must be one of {ctx['expected_tags']}"
    value = err.get("input")
    shown = repr(value) if not isinstance(value, (dict, list)) or len(repr(value)) < 60 else type(value).__name__
    return f"{where}: {shown} is not allowed: {msg}".split("\n")[0]


def load_scenario(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Scenario:
    path = Path(path)
    return validate_scenario(read_raw_scenario(path, overrides), base_dir=path.parent)


def validate_scenario(raw: dict, base_dir: Path | None = None) -> Scenario:
    raw = _resolve_paths(raw, base_dir) if base_dir else raw
    scenario = _build_scenario(raw)
    scenario.scheduler_options()
    _check_files(scenario)
    _check_speculative(scenario)
    if scenario.sweep is not None or scenario.num_seeds != 1:
        from simulator.scenario.sweep_plan import check_sweep  # late: it imports this module
        check_sweep(raw, base_dir)
    return scenario


def _check_files(scenario: Scenario) -> None:
    """A missing trace or lengths file is a typo in the scenario: say which field names it."""
    workload = scenario.workload
    for where in ("arrival", "prompt_len", "output_len"):
        path = getattr(getattr(workload, where), "path", None)
        if isinstance(path, str) and not user_paths.is_file(path):
            raise ScenarioError(f"workload.{where}.path: file {path!r} does not exist (a relative "
                                f"path is looked up next to the scenario file)")


def _check_speculative(scenario: Scenario) -> None:
    """ITL pools the gaps between chunks, and a verify step emits several tokens in one chunk:
    the per-request sums cannot count them, so speculation needs the gaps kept."""
    if scenario.engine.speculative is not None and not scenario.metrics.record_itl_gaps:
        raise ScenarioError("metrics.record_itl_gaps: false is not allowed with engine.speculative "
                            "(ITL pools chunk gaps, which only kept gaps count); must be true")


def _resolve_paths(raw: dict, base_dir: Path) -> dict:
    """File paths inside a scenario are relative to the scenario file."""
    raw = copy.deepcopy(raw)
    workload = raw.get("workload")
    if isinstance(workload, dict):
        for key in ("arrival", "prompt_len", "output_len"):
            block = workload.get(key)
            if isinstance(block, dict) and isinstance(block.get("path"), str):
                block["path"] = _rel(block["path"], base_dir)
    if isinstance(raw.get("model"), str) and raw["model"].endswith(".json"):
        raw["model"] = _rel(raw["model"], base_dir)
    cost = raw.get("cost_model")
    if isinstance(cost, dict) and isinstance(cost.get("path"), str):
        cost["path"] = _rel(cost["path"], base_dir)
    return raw


def _rel(value: str, base_dir: Path) -> str:
    p = Path(value)
    if p.is_absolute() or user_paths.exists(p):
        return value
    return str(base_dir / p) if user_paths.exists(base_dir / p) else value


def json_schema() -> dict:
    """pydantic's schema of Scenario, with the catalogs' names (presets, models, GPUs, cost-model
    kinds) enumerated where pydantic sees free strings."""
    from simulator.scenario.schema_enums import with_enumerations
    return with_enumerations(_scenario_model().model_json_schema())
