"""Shipped cost model files (``*.json`` beside this file) and the loader for any cost model file.

A file is ``{"format": "servesim-cost-model/1", "form": "parametric" | "tables" | "physics", ...}``, written by
``servesim fit`` (cost_models/fit/model_file.py); README.md here lists the shipped ones.
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from cost_models import user_paths
from cost_models.base import StepCostModel
from cost_models.hardware import load_hardware
from cost_models.fitted_range import FittedRange
from cost_models.model_spec import load_model

if TYPE_CHECKING:
    from cost_models.parametric import ParametricCostModel
    from cost_models.profiled import Table1D, TableCostModel

PROFILES_DIR = Path(__file__).resolve().parent
FORMAT = "servesim-cost-model/1"


def profile_names() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.json"))


def physics_profile_names() -> list[str]:
    return [n for n in profile_names() if n.startswith("physics-")]


def profile_path(name: str) -> Path:
    path = PROFILES_DIR / f"{name}.json"
    if not user_paths.is_file(path):
        raise ValueError(f"cost_model.profile: {name!r} is not a shipped profile ({', '.join(profile_names())})")
    return path


def read_model_file(path: Path) -> dict:
    path = Path(path)
    if not user_paths.is_file(path):
        raise ValueError(f"cost_model.path: {str(path)!r} is not a file")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"cost_model.path: {str(path)!r} is not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"cost_model.path: {str(path)!r} is not a servesim cost model file (format {FORMAT})")
    return data


def load_cost_model(data: dict, tensor_parallel_size: int = 1, step_overhead_s: float | None = None) -> StepCostModel:
    """A step-cost model from a parsed model file, for one tensor-parallel degree."""
    if data["form"] == "parametric":
        return _parametric(data, tensor_parallel_size, step_overhead_s)
    if data["form"] == "tables":
        return _tables(data, tensor_parallel_size, step_overhead_s)
    raise ValueError(f"cost model file {data.get('name')!r}: form {data['form']!r} is not parametric or tables")


def _parametric(data: dict, tp: int, step_overhead_s: float | None) -> ParametricCostModel:
    from cost_models.parametric import ParametricCostModel  # here: a table model's run needs none
    if tp != data.get("tensor_parallel_size", 1):
        raise ValueError(f"engine.tensor_parallel_size: {tp} differs from the {data['tensor_parallel_size']} "
                         f"that cost model {data['name']!r} was measured at")
    coefficients = dict(data["coefficients"])
    if step_overhead_s is not None:
        coefficients["step_overhead_s"] = step_overhead_s
    return ParametricCostModel(coefficients, float(data["knee_tokens"]),
                               FittedRange.from_json(data["fitted_range"]), data["name"])


def _tables(data: dict, tp: int, step_overhead_s: float | None) -> TableCostModel:
    from cost_models.profiled import RooflineAttention, Table1D, TableCostModel  # likewise
    section = data["tensor_parallel"].get(str(tp))
    if section is None:
        raise ValueError(f"engine.tensor_parallel_size: {tp} is not profiled in cost model {data['name']!r} "
                         f"(profiled: {', '.join(sorted(data['tensor_parallel']))})")
    attention = section["attention"]
    roofline = None
    if attention["kind"] == "roofline" or section.get("sequence") is None:
        from cost_models.roofline import RooflineCostModel
        roofline = RooflineAttention(RooflineCostModel(load_model(data["model"]), load_hardware(data["hardware"]), tp))
    overhead = data["step_overhead"]["seconds"] if step_overhead_s is None else step_overhead_s
    if not isinstance(overhead, (int, float)) or overhead < 0:
        raise ValueError(f"cost_model.step_overhead_s: {overhead!r} is not a non-negative number of seconds")

    def table(name: str, x_name: str) -> Table1D | None:
        entry = section.get(name)
        return Table1D(entry[x_name], entry["seconds"]) if entry else None
    grid = None
    if attention["kind"] == "grid":
        from cost_models.attention_grid import AttentionGrid   # here: a roofline profile needs none
        grid = AttentionGrid.from_json(attention, _decode_skew(data, tp))
    allreduce, bytes_per_token = _allreduce(data, section, tp, table("allreduce", "bytes"))
    moe = _expert_table(data, section, tp)
    return TableCostModel(
        num_layers=int(data["num_layers"]), layer=table("layer", "tokens"), whole_model=table("whole_model", "tokens"),
        sequence=table("sequence", "sequences"),
        attention=grid or roofline,
        step_overhead_s=float(overhead), allreduce=allreduce, allreduce_bytes_per_token=bytes_per_token, moe=moe,
        fitted_range=FittedRange.from_json(section["fitted_range"]), name=data["name"])


def _allreduce(data: dict, section: dict, tp: int, measured):
    """One all-reduce against bytes, and the bytes per token: the profile's measured table where it
    has one (Vidur's network/ files), else at tp > 1 the ring formula over the profiled GPU's link.

    LLMServingSim's tp2 tables hold no communication: they were measured on one GPU with the
    shard's shapes (meta.yaml: tensor_parallel_size 1, hf_overrides halving heads and MLP width).
    """
    if measured is not None or tp == 1:
        return measured, float(section.get("allreduce_bytes_per_token", 0.0))
    from cost_models.interconnect import RingAllReduce
    spec = load_model(data["model"])
    return RingAllReduce(tp, load_hardware(data["hardware"])), float(spec.hidden_size * spec.dtype_bytes)


def _expert_table(data: dict, section: dict, tp: int):
    """An MoE model's measured expert layer (moe.csv), read at the expected distinct experts; a
    section of an MoE model without one is refused, since its experts would cost nothing."""
    if section.get("moe"):
        from cost_models.moe import ExpertTable
        return ExpertTable.from_json(section["moe"])
    model = data.get("model")
    try:
        is_moe = bool(model) and load_model(model).is_moe
    except ValueError:
        is_moe = False
    if is_moe:
        timed = ", ".join(t for t, s in data["tensor_parallel"].items() if s.get("moe")) or "none"
        raise ValueError(f"engine.tensor_parallel_size: cost model {data['name']!r} has no expert timings "
                         f"at tp {tp} (timed at tp: {timed}); its MoE layers would cost nothing")
    return None


def _decode_skew(data: dict, tp: int) -> float:
    """alpha of the unequal-context decode term (cost_models/profiled.py), as the importer read it
    from the profile's own measurements; 0 where the profile has none."""
    skew = data.get("importer_notes", {}).get("decode_skew") or {}
    return float(skew.get("alpha_by_tp", {}).get(str(tp), 0.0))


def _check_precision(model, data: dict) -> None:
    """A fitted file's times were measured at 16-bit weights and KV: another format is refused,
    since no term of the file could price it."""
    if model is None:
        return
    for field, value, measured in (("quantization", model.quantization, "none"),
                                   ("kv_cache_dtype", model.kv_cache_dtype, "auto")):
        if value != measured:
            raise ValueError(f"engine.{field}: {value!r} but cost model {data['name']!r} was measured "
                             f"with {measured!r}; use kind roofline for another number format")


def build_profiled(options: dict, model, hardware, tensor_parallel_size: int,
                   kind: str = "profiled") -> StepCostModel:
    """The ``profiled`` kind of a scenario's cost_model: ``{profile: NAME}`` or ``{path: FILE.json}``;
    kind ``physics`` is the same with a physics file only."""
    if ("profile" in options) == ("path" in options):
        raise ValueError(f"cost_model: kind {kind!r} needs exactly one of profile (a shipped name) or path")
    path = profile_path(options["profile"]) if "profile" in options else Path(options["path"])
    data = read_model_file(path)
    if kind == "physics" and data["form"] != "physics":
        field = "profile" if "profile" in options else "path"
        raise ValueError(f"cost_model.{field}: {options[field]!r} is a {data['form']} file, not physics "
                         f"(physics files: {', '.join(physics_profile_names())})")
    overhead = options.get("step_overhead_s")
    if data["form"] == "physics":
        from cost_models.physics_file import load_physics   # a model's config prices it
        return load_physics(data, model, hardware, tensor_parallel_size, _overhead(overhead))
    if model is not None and data.get("model") and getattr(model, "name", None) != data["model"]:
        warnings.warn(f"cost model {data['name']!r} was measured on model {data['model']!r}, "
                      f"the scenario runs {model.name!r}", RuntimeWarning, stacklevel=2)
    _check_precision(model, data)
    if getattr(model, "expert_parallel", False) and tensor_parallel_size > 1:
        raise ValueError(f"engine.enable_expert_parallel: kernel tables ({data['name']!r}) time the experts as "
                         f"measured, split over the ranks; price expert parallelism with cost_model.kind "
                         f"physics or roofline")
    return load_cost_model(data, tensor_parallel_size, _overhead(overhead))


def _overhead(overhead):
    if overhead is not None and (isinstance(overhead, bool) or not isinstance(overhead, (int, float)) or overhead < 0):
        raise ValueError(f"cost_model.step_overhead_s: {overhead!r} is not a non-negative number of seconds")
    return overhead
