"""``servesim validate`` without the command line: load, rebuild, simulate, compare, write.

Output folder: ``trace.jsonl`` and ``scenario.yaml`` (``servesim run OUT/scenario.yaml`` reruns the
simulation), ``simulated/`` (requests.csv, steps.csv, summary.json), ``validation.json`` (the table
and every choice made), ``latency_cdfs.png``, ``engine_series.png``; with ``--cost-model fit`` also
``fitted_cost_model.json`` and ``iterations_run.csv`` (the steps it was fitted on).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from simulator.results.atomic import atomic_write
from simulator.results.files import ResultFolder, summary_json
from simulator.results.timeseries import EngineSeries
from simulator.runner import RunOutput, prepare, simulate
from simulator.scenario import validate_scenario
from simulator.scenario.file import apply_overrides
from simulator.validate.client_time import MIN_IDLE_REQUESTS, client_round_trip
from simulator.validate.compare import Row, RunLatencies, compare
from simulator.validate.cost import CostChoice, choose_cost_model, ms_option_s
from simulator.validate.engine_settings import hardware_setting, resolve_model, resolved
from simulator.validate.iteration_log import unlogged_step_time_s
from simulator.validate.measured import MeasuredRun, load_measured, with_prompts
from simulator.validate.rebuild import (TRACE_FILE, RebuildOptions, arrivals_note, rebuild_scenario,
                                        resolve_arrivals, write_trace)
from simulator.validate.record import read_engine_record

VALIDATION_JSON, SCENARIO_YAML, SIMULATED_DIR = "validation.json", "scenario.yaml", "simulated"
ENGINE_NOTE = ("engine arguments (recorded: read from the run's record; given: an option; derived: not "
               "recorded, so servesim's choice):")


@dataclass(frozen=True)
class ValidateRequest:
    run: Path                            # a run folder or a bench JSON file
    cost_model: str                      # profile name, model file, 'roofline' or 'fit'
    out_dir: Path
    iteration_log: Path | None = None
    engine_args: dict | None = None      # a bench file's: a JSON of vLLM arguments, or a meta.json
    engine_args_origin: str = "--engine-args"   # how the notes name where engine_args were read
    prompts: Path | None = None          # JSONL of prompt token ids (measured.with_prompts)
    model: str | None = None
    hardware: str | None = None
    num_gpu_blocks: int | None = None
    gpu_memory_utilization: float | None = None
    async_scheduling: str = "auto"
    step_overhead_ms: str | None = None  # a number of ms or 'auto'
    client_overhead_ms: str | None = None  # a number of ms or 'auto' (client_time.py)
    arrivals: str = "auto"                # replay | closed-loop | auto (rebuild.resolve_arrivals)
    fit_scope: str = "run"
    overrides: tuple[str, ...] = ()
    plots: bool = True


@dataclass
class Validation:
    measured: MeasuredRun
    cost: CostChoice
    scenario: dict
    output: RunOutput
    rows: list[Row]
    notes: list[str]
    files: list[Path] = field(default_factory=list)
    client_s: float = 0.0                # added to every simulated TTFT and E2E


def run_validation(request: ValidateRequest) -> Validation:
    out_dir = request.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    engine = None if request.engine_args is None else read_engine_record(request.engine_args,
                                                                            request.engine_args_origin)
    measured = load_measured(request.run, request.iteration_log, engine)
    if request.prompts is not None:
        measured = with_prompts(measured, request.prompts)
    model = resolve_model(measured, request.model)
    cost = choose_cost_model(request.cost_model, measured, out_dir, model.value, request.step_overhead_ms,
                             request.fit_scope, request.num_gpu_blocks)
    arrivals = resolve_arrivals(measured, request.arrivals)
    hardware = hardware_setting(measured, request.hardware, cost.hardware)
    options = RebuildOptions(cost.block, hardware.value, model.value, request.num_gpu_blocks,
                             request.gpu_memory_utilization, request.async_scheduling, arrivals)
    # The scenario is rebuilt (and refused, if it must be) before the trace is written.
    raw, settings = rebuild_scenario(measured, options, (out_dir / TRACE_FILE).resolve())
    write_trace(measured, out_dir / TRACE_FILE, arrivals)
    raw = apply_overrides(raw, request.overrides)
    prepared = prepare(validate_scenario(raw))
    with ResultFolder(out_dir / SIMULATED_DIR) as files:
        output = simulate(prepared, prepared.runs[0], files=files)
        files.finish(output.summary)
    client_s, client_notes = client_overhead_s(request.client_overhead_ms, measured)
    settings = [model, hardware] + resolved(settings, raw, output.num_gpu_blocks, prepared.runs[0].options)
    notes = list(measured.notes) + [measured.prompts_note, arrivals_note(measured, arrivals), ENGINE_NOTE] \
        + [f"  {s.note()}" for s in settings] + cost.notes + _unlogged_note(measured) + client_notes
    simulated = RunLatencies.of_table(output.requests).plus_client_s(client_s)
    rows = compare(RunLatencies.of_measured(measured), simulated)
    validation = Validation(measured, cost, raw, output, rows, notes, client_s=client_s)
    _write(validation, out_dir, request.plots)
    return validation


def _unlogged_note(measured: MeasuredRun) -> list[str]:
    if measured.steps is None:
        return []
    unlogged_s = unlogged_step_time_s(measured.steps, measured.arrival_s, measured.e2el_s)
    mean_ms = float(measured.steps.elapsed_s.mean() * 1e3)
    return [f"iteration log: logged step time {mean_ms:.2f} ms on average; the engine spent {unlogged_s * 1e3:.2f} ms "
            f"more per step (schedule(), output processing: not in elapsed_ms)"]


def client_overhead_s(value: str | None, measured: MeasuredRun) -> tuple[float, list[str]]:
    """The client round trip added to simulated TTFT and E2E: given in ms, or measured (``auto``)."""
    if value is None:
        return 0.0, []
    if value != "auto":
        client_s = ms_option_s("--client-overhead-ms", value)
        return client_s, [f"client round trip {client_s * 1e3:.2f} ms added to simulated TTFT and E2E (given)"]
    if measured.steps is None:
        raise ValueError("--client-overhead-ms: 'auto' needs a bench file and --iteration-log")
    trip = client_round_trip(measured, unlogged_step_time_s(measured.steps, measured.arrival_s, measured.e2el_s))
    if trip is None:
        return 0.0, ["client round trip auto: not measurable here (no request found the engine idle and was "
                     "prefilled alone, or preemptions break the request-to-step mapping): 0 ms added"]
    if trip.num_requests < MIN_IDLE_REQUESTS:
        return 0.0, [f"client round trip auto: only {trip.num_requests} request(s) found the engine idle, "
                     f"fewer than the {MIN_IDLE_REQUESTS} an estimate needs: 0 ms added (give it with "
                     f"--client-overhead-ms MS, e.g. measured on a run of this server at concurrency 1)"]
    return max(trip.seconds, 0.0), [
        f"client round trip auto: {trip.seconds * 1e3:.2f} ms (sd {trip.sd_s * 1e3:.2f} ms over "
        f"{trip.num_requests} requests that found the engine idle: TTFT - prefill step - unlogged step "
        f"time) added to simulated TTFT and E2E (HTTP, tokenisation, streaming; not TPOT)"]


def _write(v: Validation, out_dir: Path, plots: bool) -> None:
    v.files.append(out_dir / SIMULATED_DIR)
    scenario = dict(v.scenario, workload={**v.scenario["workload"],
                                          "arrival": {"kind": "trace", "path": TRACE_FILE}})
    atomic_write(out_dir / SCENARIO_YAML, lambda f: yaml.safe_dump(scenario, f, sort_keys=False))
    atomic_write(out_dir / VALIDATION_JSON, lambda f: f.write(summary_json(_report(v))))
    v.files += [out_dir / SCENARIO_YAML, out_dir / VALIDATION_JSON]
    if plots:
        from simulator.validate.plots import plot_engine_series, plot_latency_cdfs
        title = v.measured.name
        simulated = RunLatencies.of_table(v.output.requests).plus_client_s(v.client_s)
        measured = RunLatencies.of_measured(v.measured)
        v.files += plot_latency_cdfs(measured, simulated, out_dir / "latency_cdfs", title)
        v.files += plot_engine_series(v.measured.series, EngineSeries.from_columns(v.output.steps.to_columns()),
                                      out_dir / "engine_series", title)


def _report(v: Validation) -> dict:
    m = v.measured
    return {"run": {"name": m.name, "source": m.source, "num_requests": len(m),
                    "engine_args": m.engine_args, "engine_sources": m.engine_sources,
                    "max_concurrency": m.max_concurrency,
                    "request_rate": m.request_rate},
            "cost_model": {"description": v.cost.description, **v.cost.block},
            "client_round_trip_s": v.client_s,
            "scenario": v.scenario, "notes": v.notes,
            "table": [row.to_json() for row in v.rows],
            "simulated_summary": v.output.summary}
