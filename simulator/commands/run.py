"""`servesim run`: prepare everything, simulate each scheduler, print a table, write results."""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import click

from simulator.engine.progress import progress_bar
from simulator.results.bench_fields import EPOCH_DATE, BenchSetup, detailed_lists, now_date, traffic_of
from simulator.results.files import ResultFolder
from simulator.runner import Prepared, PreparedRun, RunOutput, prepare, simulate
from simulator.scenario import ScenarioError, load_scenario

TABLE_COLUMNS = (  # (header, summary key, format)
    ("scheduler", "scheduler", "{}"), ("done", "completed", "{}"),
    ("req/s", "request_throughput", "{:.2f}"), ("out tok/s", "output_throughput", "{:.0f}"),
    ("TTFT mean", "mean_ttft_ms", "{:.1f}"), ("TTFT p99", "p99_ttft_ms", "{:.1f}"),
    ("TPOT mean", "mean_tpot_ms", "{:.2f}"), ("TPOT p99", "p99_tpot_ms", "{:.2f}"),
    ("E2E mean", "mean_e2el_ms", "{:.0f}"), ("preempt", "num_preemptions", "{}"),
    ("KV peak", "peak_kv_usage", "{:.2f}"), ("steps", "num_steps", "{}"),
)


@dataclass(frozen=True)
class ResultOptions:
    """What a run's result folders hold besides the tables' rows."""
    file_format: str = "csv"       # requests and steps: csv or parquet
    save_detailed: bool = False    # vLLM's --save-detailed: the per-request lists in summary.json
    date_now: bool = False         # the wall-clock date in summary.json (else EPOCH_DATE: same bytes)


def run_scenario_file(path: Path, out_dir: Path | None, overrides, plots: bool = True,
                      schedulers: tuple[str, ...] = (), file_format: str = "csv",
                      max_memory_gb: float | None = None, save_detailed: bool = False,
                      date_now: bool = False) -> list:
    """The whole of `servesim run`: the file's scenario, validated and prepared (every impossible
    setup fails before any output), then ``run_prepared``. ``schedulers``: labels to run (default:
    all of the file's, in file order)."""
    prepared = prepare(load_scenario(path, overrides), schedulers, max_memory_gb)
    return run_prepared(prepared, out_dir, plots, ResultOptions(file_format, save_detailed, date_now))


def run_prepared(prepared: Prepared, out_dir: Path | None, plots: bool = True,
                 options: ResultOptions = ResultOptions()) -> list:
    """Simulate each prepared scheduler, writing its results as it goes, and print the table
    (and the overview plot)."""
    scenario = prepared.scenario
    out_dir = out_dir or Path("results") / scenario.name
    engine = scenario.engine
    stages = f" x {engine.pipeline_parallel_size} stages" if engine.pipeline_parallel_size > 1 else ""
    click.echo(f"{scenario.name}: {len(prepared.trace)} requests, {prepared.model.name} on "
               f"{prepared.hardware.name} x{engine.tensor_parallel_size}{stages}, "
               f"cost model {scenario.cost_model.get('kind')}, seed {scenario.seed}")
    outputs = list(simulate_runs(prepared, out_dir, options))
    click.echo(format_table([o.summary for o in outputs]))
    if plots:
        from simulator.plots.run_plots import plot_run
        for png in plot_run(out_dir, [run_series(o) for o in outputs]):
            click.echo(f"plot: {png}")
    click.echo(f"results: {out_dir}/<scheduler>/{{requests,steps}}.{options.file_format}, summary.json")
    return outputs


def simulate_runs(prepared: Prepared, out_dir: Path | None,
                  options: ResultOptions = ResultOptions()) -> Iterator[RunOutput]:
    """Each prepared scheduler in turn, its summary completed with vLLM's setup fields (and
    lists), written to ``out_dir/<label>`` as it goes (nothing written when ``out_dir`` is None)."""
    if options.save_detailed and not prepared.scenario.metrics.record_itl_gaps:
        raise ScenarioError("--save-detailed: needs metrics.record_itl_gaps: true (vLLM's itls "
                            "list every request's inter-token gaps)")
    for run in prepared.runs:
        folder = nullcontext() if out_dir is None else ResultFolder(out_dir / run.label,
                                                                    options.file_format)
        with progress_bar(len(prepared.trace), run.label) as bar, folder as files:
            output = simulate(prepared, run, files=files, progress=bar)
            add_bench_fields(output, prepared, run, options)
            if files is not None:
                files.finish(output.summary)
        yield output


def add_bench_fields(output: RunOutput, prepared: Prepared, run: PreparedRun,
                     options: ResultOptions) -> None:
    """The rest of what ``vllm bench serve --save-result`` saves (results/bench_fields.py), into
    the run's summary."""
    rate, burstiness = traffic_of(prepared.scenario.workload.arrival)
    setup = BenchSetup(run.label, prepared.model.name, rate, burstiness,
                       now_date() if options.date_now else EPOCH_DATE)
    output.summary.update(setup.fields())
    if options.save_detailed:
        output.summary.update(detailed_lists(output.requests))


def run_series(output):
    """The plots' input (simulator/plots/run_series.py) from a run's tables."""
    from simulator.plots.run_series import run_series_from_columns
    from simulator.results.files import request_file_columns
    return run_series_from_columns(output.label, request_file_columns(output.requests.arrays()),
                                   output.steps.to_columns(), output.summary.get("replicas", ()))


def format_table(summaries: list[dict]) -> str:
    rows = [[h for h, _, _ in TABLE_COLUMNS]]
    for s in summaries:
        rows.append([_fmt(fmt, s.get(key)) for _, key, fmt in TABLE_COLUMNS])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def _fmt(fmt: str, value) -> str:
    if value is None:
        return "-"
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return str(value)
