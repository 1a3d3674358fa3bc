"""`servesim run`: prepare everything, simulate each scheduler, print a table, write results."""
from __future__ import annotations

import contextlib
from pathlib import Path

import click
import numpy as np

from simulator.output import MIN_STREAMED_REQUESTS, ResultWriter
from simulator.runner import Prepared, prepare, simulate
from simulator.scenario import load_scenario

TABLE_COLUMNS = (  # (header, summary key, format)
    ("scheduler", "scheduler", "{}"), ("done", "completed", "{}"),
    ("req/s", "request_throughput", "{:.2f}"), ("out tok/s", "output_throughput", "{:.0f}"),
    ("TTFT mean", "mean_ttft_ms", "{:.1f}"), ("TTFT p99", "p99_ttft_ms", "{:.1f}"),
    ("TPOT mean", "mean_tpot_ms", "{:.2f}"), ("TPOT p99", "p99_tpot_ms", "{:.2f}"),
    ("E2E mean", "mean_e2el_ms", "{:.0f}"), ("preempt", "num_preemptions", "{}"),
    ("KV peak", "peak_kv_usage", "{:.2f}"), ("steps", "num_steps", "{}"),
)


def run_scenario_file(path: Path, out_dir: Path | None, overrides, plots: bool = True,
                      schedulers: tuple[str, ...] = ()) -> list:
    """``prepare_scenario_file`` then ``run_prepared``: the whole of `servesim run`."""
    return run_prepared(prepare_scenario_file(path, overrides, schedulers), out_dir, plots)


def prepare_scenario_file(path: Path, overrides, schedulers: tuple[str, ...] = ()) -> Prepared:
    """The file's scenario, validated and prepared (every impossible setup fails here, before
    any output). ``schedulers``: labels to run (default: all of the file's, in file order)."""
    return prepare(load_scenario(path, overrides), schedulers)


def run_prepared(prepared: Prepared, out_dir: Path | None, plots: bool = True) -> list:
    """Simulate each prepared scheduler, writing its results as it goes, and print the table
    (and the plots)."""
    scenario = prepared.scenario
    out_dir = out_dir or Path("results") / scenario.name
    click.echo(f"{scenario.name}: {len(prepared.trace)} requests, {prepared.model.name} on "
               f"{prepared.hardware.name} x{scenario.engine.tensor_parallel_size}, "
               f"cost model {scenario.cost_model.get('kind')}, seed {scenario.seed}")
    outputs = []
    with _run_plots(out_dir, plots) as drawing:
        for run in prepared.runs:
            # A forked helper writes the files as the run goes: forked before a run of many
            # requests, else once the step log proves long (output.MIN_STREAMED_REQUESTS).
            few = len(prepared.trace) < MIN_STREAMED_REQUESTS
            with ResultWriter(out_dir / run.label, stream=True, fork_when_long=few) as writer:
                output = simulate(prepared, run, writer=writer)
                writer.finish(output.result.requests, output.summary)
            outputs.append(output)
            if drawing is not None:
                drawing.add(run_series(output))
        click.echo(format_table([o.summary for o in outputs]))
        if drawing is not None:
            for png in drawing.finish():
                click.echo(f"plot: {png}")
    click.echo(f"results: {out_dir}/<scheduler>/{{requests.csv,steps.csv,summary.json}}")
    return outputs


def _run_plots(out_dir: Path, plots: bool):
    """The run's overview figure, started before the first run (simulator/plots/run_plots.py),
    or a stand-in when there are no plots."""
    if not plots:
        return contextlib.nullcontext()
    from simulator.plots.run_plots import RunPlots
    return RunPlots(out_dir)


# -- adapter: today's RunOutput -> the plots' RunSeries. Rewire it to the columnar request and
# step tables when they replace Request objects and StepLog; nothing else reads them for plots.
def run_series(output):
    """``output``'s latencies (requests.csv's ttft_ms/tpot_ms/e2el_ms) and step columns."""
    from simulator.metrics.summary import latencies_s
    from simulator.plots.run_series import run_series_from_columns
    rows = [t for t in map(latencies_s, output.result.requests) if t is not None]
    ttft, tpot, e2el = (np.array([np.nan if v is None else v * 1000 for v in col], dtype=np.float64)
                        for col in (zip(*rows) if rows else ((), (), ())))
    return run_series_from_columns(output.label, {"ttft_ms": ttft, "tpot_ms": tpot, "e2el_ms": e2el},
                                   output.result.step_log.to_columns())
# -- end of adapter


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
