"""`servesim plot RESULT_DIR` and `servesim timeline SCENARIO_FILE`."""
from __future__ import annotations

from pathlib import Path

import click

from simulator.commands.common import fail, scenario_arguments, scheduler_option

BIG_TIMELINE_REQUESTS = 200


@click.command()
@click.argument("result_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--svg", is_flag=True, help="Also write each plot as SVG (default: PNG only).")
def plot(result_dir: Path, svg: bool) -> None:
    """Draw every plot the files in RESULT_DIR allow (sweep curves, run overview, latency CDFs,
    engine state, batch timeline)."""
    from simulator.plots.result_dir import plot_result_dir
    try:
        paths = plot_result_dir(result_dir, ("png", "svg") if svg else ("png",))
    except ValueError as exc:
        fail(str(exc))
    if not paths:
        fail(f"{result_dir}: nothing to plot (no sweep.csv, no <scheduler>/requests.csv, "
             f"no <scheduler>/timeline.csv)")
    for path in paths:
        click.echo(f"plot: {path}")


@click.command()
@scenario_arguments
@scheduler_option
@click.option("--gif", is_flag=True, help="Also write an animated GIF.")
def timeline(scenario_file: Path, out_dir: Path | None, overrides: tuple[str, ...],
             schedulers: tuple[str, ...], gif: bool) -> None:
    """Simulate SCENARIO_FILE recording every step's batch slots; draw them per scheduler."""
    from simulator.plots.timeline import TIMELINE_CSV, record_timeline, write_timeline_csv
    from simulator.plots.timeline_plot import plot_batch_timelines
    from simulator.engine.progress import NoProgressError, progress_bar
    from simulator.runner import prepare
    from simulator.scenario import ScenarioError, load_scenario
    try:
        prepared = prepare(load_scenario(scenario_file, overrides), schedulers)
        if len(prepared.trace) > BIG_TIMELINE_REQUESTS:
            click.echo(f"note: {len(prepared.trace)} requests make a dense picture; try "
                       f"--set workload.num_requests=32", err=True)
        timelines = []
        with progress_bar(len(prepared.runs), "timeline", "scheduler") as bar:
            for run in prepared.runs:
                timelines.append(record_timeline(prepared, run))
                bar.advance()
    except (ScenarioError, NoProgressError) as exc:
        fail(str(exc))
    out_dir = out_dir or Path("results") / prepared.scenario.name
    for t in timelines:
        click.echo(f"timeline: {write_timeline_csv(t, out_dir / t.label / TIMELINE_CSV)}")
    for path in plot_batch_timelines(timelines, out_dir / "batch_timeline", prepared.scenario.name,
                                     gif=gif):
        click.echo(f"plot: {path}")
