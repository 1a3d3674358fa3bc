"""Physics cost model files: one GPU and engine mode's coefficients, what they were fitted on, and
their leave-one-model-out error; and the checks that warn when a scenario leaves that ground.

    {"format": ..., "form": "physics", "name", "hardware", "mode", "model": null,
     "coefficients": {TERM: value}, "gemm_balance", "gemm_tile_tokens", "attention_query_tile",
     "launches": {"other", "per_norm", "mixed", "source"},
     "fitted_on": {"gpus", "models", "tensor_parallel_sizes", "modes", "sources", "model_ranges"},
     "fitted_range": FittedRange, "leave_one_model_out": {model: errors per family},
     "unmeasured_terms": [TERM, ...], "filled_terms": {TERM: how it is priced unmeasured}, ...}
"""
from __future__ import annotations

import warnings

from cost_models.fitted_range import FittedRange
from cost_models.hardware import HardwareSpec
from cost_models.model_spec import ModelSpec, load_model

# The config fields whose fitted span a model is checked against (ModelSpec names).
MODEL_FIELDS = ("num_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_kv_heads",
                "vocab_size")


def model_ranges(specs: list[ModelSpec]) -> dict[str, list[int]]:
    """[min, max] of each MODEL_FIELDS value over the fitted models."""
    return {f: [min(getattr(s, f) for s in specs), max(getattr(s, f) for s in specs)] for f in MODEL_FIELDS}


def outside_fit(data: dict, spec: ModelSpec, hardware: HardwareSpec, tp: int) -> str | None:
    """Every way a scenario leaves what the file was fitted on, each naming its field, or None."""
    fitted = data["fitted_on"]
    problems = []
    if hardware.name not in fitted["gpus"]:
        problems.append(f"hardware: {hardware.name!r} is not among the fitted GPUs ({', '.join(fitted['gpus'])})")
    if tp not in fitted["tensor_parallel_sizes"]:
        problems.append(f"engine.tensor_parallel_size: {tp} is not among the fitted "
                        f"{fitted['tensor_parallel_sizes']} (communication is the roofline's all-reduce)")
    for name, (lo, hi) in fitted["model_ranges"].items():
        value = getattr(spec, name)
        if not lo <= value <= hi:
            problems.append(f"model.{name}: {value} is outside the fitted models' {lo}..{hi}")
    if spec.mlp_kind != "swiglu":
        problems.append("model: only SwiGLU models were fitted")
    if spec.is_moe and not any(load_model(m).is_moe for m in fitted["models"]):
        problems.append("model: only dense models were fitted (the experts are priced as the dense GEMMs)")
    return "; ".join(problems) or None


def load_physics(data: dict, spec: ModelSpec, hardware: HardwareSpec, tp: int,
                 step_overhead_s: float | None = None):
    """A PhysicsCostModel for ``spec`` from a parsed physics file; warns once where the scenario
    leaves the fitted ground (the batch shapes warn on their own, at the first one outside)."""
    from cost_models.physics import PhysicsCostModel
    coefficients = {"mixed_decode_attention": 0.0, "mixed_decode_waves": 0.0,   # files before the terms
                    **data["coefficients"]}
    if step_overhead_s is not None:
        coefficients["step_overhead"] = step_overhead_s
    problem = outside_fit(data, spec, hardware, tp)
    if problem:
        warnings.warn(f"cost model {data['name']!r}: {problem}; the time is extrapolated",
                      RuntimeWarning, stacklevel=3)
    filled = data.get("filled_terms") or {}
    if filled:
        warnings.warn(f"cost model {data['name']!r}: {', '.join(filled)} not measured by its sources, "
                      f"priced by rule (filled_terms): {'; '.join(f'{t}: {h}' for t, h in filled.items())}",
                      RuntimeWarning, stacklevel=3)
    launches = data["launches"]
    return PhysicsCostModel(spec, hardware, coefficients, float(data["gemm_balance"]), tp,
                            FittedRange.from_json(data["fitted_range"]), data["name"],
                            (int(launches["other"]), int(launches["per_norm"]), int(launches.get("mixed", 0))),
                            int(data.get("gemm_tile_tokens", 1)), decode_skew_at(data, tp),
                            data.get("attention_query_tile", 1))


def decode_skew_at(data: dict, tp: int) -> float:
    """The file's measured alpha of unequal decode contexts at ``tp``, or at the nearest TP degree
    measured (the lower of two as near); 0 where none was measured."""
    by_tp = {int(k): float(v) for k, v in (data.get("decode_skew") or {}).get("alpha_by_tp", {}).items()}
    if not by_tp:
        return 0.0
    return by_tp[min(by_tp, key=lambda measured: (abs(measured - tp), measured))]
