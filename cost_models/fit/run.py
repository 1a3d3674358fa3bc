"""``fit``: any supported timings source -> a cost model file, its held-out error and a parity plot.

Sources, told apart by what the path holds:
- an LLMServingSim profile folder (meta.yaml + tpN/) -> a tables model;
- a Vidur ``mlp.csv`` (all-reduce times from ``--all-reduce``) -> a tables model, roofline attention;
- our harness's ``timings.csv`` (or its folder) or the H200 ``steps.csv`` -> a parametric model;
- vLLM's iteration log (raw or parsed CSV), with ``from_vllm_log`` -> a parametric model.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cost_models.fit import model_file
from cost_models.fit.parametric_fit import fit_parametric
from cost_models.fit.report import errors, family_errors, format_errors, parity_plot
from cost_models.fit.table_fit import fit_tables
from cost_models.hardware import load_hardware
from cost_models.importers import read_llmservingsim, read_step_timings, read_vidur, read_vllm_log
from cost_models.model_spec import load_model
from cost_models.profiles import load_cost_model
from cost_models.roofline import RooflineCostModel


@dataclass(frozen=True)
class FitRequest:
    source: Path
    from_vllm_log: bool = False
    model: str | None = None        # which model's rows (timings with several); the preset for tables
    mode: str | None = None         # eager | cuda_graph (timings with several)
    hardware: str = ""              # a hardware preset name, recorded and used for the roofline check
    holdout_every: int = 5
    name: str | None = None
    all_reduce: Path | None = None  # Vidur network all_reduce.csv
    step_overhead_s: float = model_file.DEFAULT_KERNEL_STEP_OVERHEAD_S  # tables models only
    kv_capacity_tokens: int | None = None  # vLLM log: KV capacity, for the decode-context estimate
    loss: str = "relative"          # parametric fits: relative | time (parametric_fit's docstring)
    request_lengths: tuple | None = None  # vLLM log: (prompt, output) of each request, to replay shapes


@dataclass
class FitOutcome:
    data: dict
    report: str
    plot: tuple = field(default=())  # (predicted_s, measured_s, families, held_out, title)


def run_fit(request: FitRequest) -> FitOutcome:
    source = Path(request.source)
    if request.from_vllm_log:
        kwargs = {"kv_capacity_tokens": request.kv_capacity_tokens} if request.kv_capacity_tokens else {}
        if request.request_lengths is not None:
            kwargs["request_lengths"] = list(request.request_lengths)
        timings = read_vllm_log(source, hardware=request.hardware, model=request.model or "", **kwargs)
        return _parametric(request, timings)
    if (source / "meta.yaml").is_file() or (source.name.startswith("tp") and (source.parent / "meta.yaml").is_file()):
        return _tables(request, read_llmservingsim(source))
    if source.name == "mlp.csv":
        return _tables(request, read_vidur(source, request.all_reduce))
    return _parametric(request, read_step_timings(source, request.model, request.mode, request.hardware))


def _parametric(request: FitRequest, timings) -> FitOutcome:
    name = request.name or f"{timings.hardware or 'device'}-{timings.model or 'model'}-{timings.mode}"
    fit = fit_parametric(timings, request.holdout_every, name, request.loss)
    roof = _roofline_errors(timings.model, timings.hardware, timings.shapes, timings.time_s, timings.families)
    data = model_file.parametric_json(fit, timings, name, request.holdout_every, roof, request.loss)
    report = [f"{name}: parametric fit ({request.loss} error) of {len(timings.shapes)} shapes from "
              f"{', '.join(timings.source.files)}",
              format_errors(f"held-out error (every {request.holdout_every}th shape)", fit.holdout_errors)]
    if roof:
        report.append(format_errors("roofline (datasheet figures, default efficiencies) on every shape", roof))
    plot = (fit.predicted_s, timings.time_s, timings.families, fit.held_out, name)
    return FitOutcome(data, "\n".join(report), plot)


def _tables(request: FitRequest, tables_list) -> FitOutcome:
    first = tables_list[0]
    model_name = request.model or first.model
    spec = load_model(model_name)
    hardware = request.hardware or first.hardware
    name = request.name or f"{hardware}-{model_name}"
    routing = (spec.num_experts, spec.num_experts_per_tok) if spec.is_moe else None
    lines = [f"{name}: tables from {first.source.description.rsplit(', tp', 1)[0]}"]
    if routing:   # an MoE degree without expert timings would price its experts at nothing
        untimed = [t.tensor_parallel_size for t in tables_list if t.moe is None]
        tables_list = [t for t in tables_list if t.moe is not None]
        if not tables_list:
            raise ValueError(f"{spec.name} is an MoE model but the profile has no moe.csv at any tp")
        lines += [f"tp {tp}: left out, no moe.csv (expert timings) at this degree" for tp in untimed]
    fits = [(t, fit_tables(t, request.holdout_every, routing)) for t in tables_list]
    for t, f in fits:
        lines.append(f"tp {t.tensor_parallel_size}: held-out error (every {request.holdout_every}th grid point)")
        for component, e in f.holdout_errors.items():
            lines.append(format_errors(f"  {component}", e if "all" in e else {"all": e}))
    data = model_file.tables_json([(t, f, None) for t, f in fits], name, spec.num_layers, request.holdout_every,
                                  request.step_overhead_s, model_file.KERNEL_OVERHEAD_SOURCE,
                                  spec.hidden_size, spec.dtype_bytes)
    data["model"], data["hardware"] = spec.name, hardware
    for t, _ in fits:
        roof = _roofline_vs_tables(data, spec.name, hardware, t.tensor_parallel_size)
        data["tensor_parallel"][str(t.tensor_parallel_size)]["roofline_vs_profile"] = roof
        if roof:
            lines.append(format_errors(f"tp {t.tensor_parallel_size}: roofline vs this profile's kernel sum "
                                       f"(no overhead on either side)", roof))
    points = fits[0][1].attention_holdout
    plot = (points[0], points[1], points[2], np.ones(len(points[0]), bool), f"{name} attention (held out)") \
        if points else ()
    return FitOutcome(data, "\n".join(lines), plot)


def _roofline(model: str, hardware: str, tp: int = 1, overhead_s: float | None = None):
    try:
        spec, hw = load_model(model), load_hardware(hardware)
    except ValueError:
        return None
    kwargs = {} if overhead_s is None else {"step_overhead_s": overhead_s}
    return RooflineCostModel(spec, hw, tp, **kwargs)


def _roofline_errors(model: str, hardware: str, shapes, time_s, families) -> dict | None:
    roofline = _roofline(model, hardware)
    if roofline is None:
        return None
    predicted = np.array([roofline.step_time_s(s) for s in shapes])
    return family_errors(predicted, np.asarray(time_s), families, np.ones(len(shapes), bool))


def _roofline_vs_tables(data: dict, model: str, hardware: str, tp: int) -> dict | None:
    roofline = _roofline(model, hardware, tp, overhead_s=0.0)
    if roofline is None:
        return None
    profile = load_cost_model(data, tp, step_overhead_s=0.0)
    shapes = model_file.comparison_shapes()
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 256 decodes may pass a profile's range; both sides extrapolate
        measured = np.array([profile.step_time_s(s) for s in shapes])
    predicted = np.array([roofline.step_time_s(s) for s in shapes])
    return family_errors(predicted, measured, [s.kind for s in shapes], np.ones(len(shapes), bool))


def write_outputs(outcome: FitOutcome, out: Path | None, plot: Path | None) -> None:
    if out is not None:
        model_file.write_json(out, outcome.data)
    if plot is not None and outcome.plot:
        parity_plot(plot, *outcome.plot)


__all__ = ["FitRequest", "FitOutcome", "run_fit", "write_outputs", "errors"]
