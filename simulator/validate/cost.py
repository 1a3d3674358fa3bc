"""The step-cost model a validation runs with: a shipped profile, a model file, the roofline, or a
parametric fit made on the spot from the measured server's own iteration log.

The fit minimises error in seconds (``loss="time"``, cost_models/fit/parametric_fit.py): the run's
latencies are sums of its step times, so each shape is priced at its mean, and a rare long prefill
weighs by its duration rather than as one row among thousands of decodes.

``step_overhead`` overrides the per-step overhead where the kind has one. ``auto`` is for models
fitted from an iteration log: ``elapsed_ms`` there excludes ``schedule()`` and output processing,
so the model's own intercept is raised by the per-step time the engine spent but the log did not
time (``iteration_log.unlogged_step_time_s``).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from cost_models.factory import COST_MODEL_BUILDERS
from cost_models.fit.model_file import write_json
from cost_models.fit.run import FitRequest, run_fit
from cost_models.profiles import profile_names, profile_path, read_model_file
from cost_models.roofline import RooflineCostModel
from simulator.validate.engine_settings import block_size_setting
from simulator.validate.iteration_log import unlogged_step_time_s
from simulator.validate.measured import MeasuredRun

FIT_FILE, RUN_STEPS_FILE = "fitted_cost_model.json", "iterations_run.csv"


@dataclass
class CostChoice:
    block: dict                          # the scenario's cost_model section
    description: str
    model: str | None = None             # what the model file was measured on (defaults)
    hardware: str | None = None
    notes: list[str] = field(default_factory=list)


def choose_cost_model(name: str, measured: MeasuredRun, out_dir: Path, model: str,
                      step_overhead: str | None = None, fit_scope: str = "run",
                      num_gpu_blocks: int | None = None) -> CostChoice:
    """``name``: a shipped profile, a cost model file, ``roofline`` or ``fit``; ``num_gpu_blocks``: the
    KV cache size given for the run (the fit reads decode contexts off the log's KV usage with it)."""
    if name == "roofline":
        choice = CostChoice({"kind": "roofline"}, "roofline (datasheet peaks x the efficiencies and overheads "
                                                  "fitted in cost_models/catalog/roofline_defaults.json)")
        data = None
    else:
        data, choice = _fitted(measured, out_dir, model, fit_scope, num_gpu_blocks) if name == "fit" \
            else _file(name)
    if step_overhead is not None:
        _set_overhead(choice, data, step_overhead, measured)
    return choice


def _file(name: str) -> tuple[dict, CostChoice]:
    path = Path(name)
    if name.endswith(".json") or path.is_file():
        data = read_model_file(path)
        block = {"kind": "profiled", "path": str(path.resolve())}
    else:
        if name not in profile_names():
            raise ValueError(f"--cost-model: {name!r} is not a shipped profile ({', '.join(profile_names())}), "
                             f"a cost model file, 'roofline' or 'fit'")
        data = read_model_file(profile_path(name))
        block = {"kind": "profiled", "profile": name}
    return data, CostChoice(block, f"{data['name']} ({data['form']}, {data.get('mode')}, measured on "
                                   f"{data.get('hardware')})", data.get("model"), data.get("hardware"))


def _fitted(measured: MeasuredRun, out_dir: Path, model: str, scope: str,
            num_gpu_blocks: int | None) -> tuple[dict, CostChoice]:
    steps = measured.steps
    if steps is None:
        raise ValueError("--cost-model fit: needs --iteration-log (the measured server's per-step log)")
    # The same KV size the simulation gets: usage % x capacity is each decode's context in the fit.
    blocks = num_gpu_blocks or measured.engine_args.get("num_gpu_blocks")
    if blocks is None:
        raise ValueError("--cost-model fit: reads decode contexts off the log's KV usage, which needs the KV "
                         "cache size; the engine arguments record no num_gpu_blocks: pass --num-gpu-blocks")
    kv_tokens = int(blocks) * int(block_size_setting(measured).value)
    notes = []
    source = steps.write_csv(out_dir / RUN_STEPS_FILE) if scope == "run" else steps.path
    request = FitRequest(source=source, from_vllm_log=True, model=model, name=f"fit-{measured.name}",
                         kv_capacity_tokens=kv_tokens, loss="time")
    if scope == "run":   # the run's own requests: each step's shape replayed from their lengths
        request = replace(request, request_lengths=tuple(zip(measured.num_prompt_tokens.tolist(),
                                                             measured.num_output_tokens.tolist())))
    try:
        outcome = _fit_replayed(request, notes)
    except ValueError as exc:
        if scope != "run" or "distinct batch shapes" not in str(exc):
            raise
        notes.append(f"the run's own {len(steps)} steps have too few distinct shapes to fit "
                     f"({str(exc).rsplit(': ', 1)[-1]}): fitted on the whole log {steps.path} instead")
        source = steps.path
        outcome = run_fit(replace(request, source=source, request_lengths=None))
    path = out_dir / FIT_FILE
    write_json(path, outcome.data)
    errors = outcome.data["holdout"]["errors"]["all"]
    what = "this run's steps" if source != steps.path else "the whole iteration log"
    choice = CostChoice({"kind": "profiled", "path": str(path.resolve())},
                        f"parametric fit in seconds of {what} ({source}), held-out MAPE "
                        f"{errors['mape_pct']:.1f}%, total time {errors['total_error_pct']:+.1f}%, "
                        f"written to {path}", model, None, notes)
    return outcome.data, choice


def _fit_replayed(request: FitRequest, notes: list[str]):
    """run_fit on the replayed shapes; where the log cannot be replayed from the requests (a
    preempted request resumed), on the KV-usage estimates, saying so."""
    try:
        return run_fit(request)
    except ValueError as exc:
        if request.request_lengths is None or "distinct batch shapes" in str(exc):
            raise
        notes.append(f"the log's steps could not be replayed from the requests ({exc}): decode "
                     f"contexts estimated from KV usage")
        return run_fit(replace(request, request_lengths=None))


def _set_overhead(choice: CostChoice, data: dict | None, value: str, measured: MeasuredRun) -> None:
    kind = choice.block["kind"]
    if "step_overhead_s" not in COST_MODEL_BUILDERS[kind].options:
        raise ValueError(f"--step-overhead-ms: cost model kind {kind!r} has no per-step overhead")
    base_s = _own_overhead_s(data)
    if value == "auto":
        overhead_s = base_s + _unlogged_s(data, measured)
        choice.notes.append(f"step overhead auto: the model's {base_s * 1e3:.2f} ms + "
                            f"{(overhead_s - base_s) * 1e3:.2f} ms per step that the iteration log does "
                            f"not time (time the engine held requests minus logged step times, per step)")
    else:
        overhead_s = ms_option_s("--step-overhead-ms", value)
        choice.notes.append(f"step overhead {overhead_s * 1e3:.2f} ms (the model's own: {base_s * 1e3:.2f} ms)")
    choice.block["step_overhead_s"] = overhead_s


def ms_option_s(option: str, value: str) -> float:
    """An ``MS|auto`` option given as a number: seconds, >= 0."""
    try:
        seconds = float(value) / 1e3
    except ValueError:
        raise ValueError(f"{option}: {value!r} is not a number of ms or 'auto'") from None
    if not seconds >= 0:
        raise ValueError(f"{option}: {value!r} must be >= 0")
    return seconds


def _own_overhead_s(data: dict | None) -> float:
    if data is None:
        return RooflineCostModel.__dataclass_fields__["step_overhead_s"].default
    if data["form"] == "parametric":
        return float(data["coefficients"]["step_overhead_s"])
    if data["form"] == "physics":
        return float(data["coefficients"]["step_overhead"])
    return float(data["step_overhead"]["seconds"])


def _unlogged_s(data: dict | None, measured: MeasuredRun) -> float:
    if data is None or data.get("mode") != "vllm":
        raise ValueError("--step-overhead-ms: 'auto' is only for a cost model fitted from a vLLM "
                         "iteration log (--cost-model fit, or a 'vllm'-mode file)")
    if measured.steps is None:
        raise ValueError("--step-overhead-ms: 'auto' needs a bench file and --iteration-log")
    return max(unlogged_step_time_s(measured.steps, measured.arrival_s, measured.e2el_s), 0.0)
