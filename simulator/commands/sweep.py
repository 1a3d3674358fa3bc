"""`servesim sweep`: run a scenario's sweep block into one resumable sweep.csv, then plot it."""
from __future__ import annotations

from pathlib import Path

import click

from simulator.commands.common import fail, max_memory_option, scenario_arguments
from simulator.sweep.backends import BACKENDS


def backend_options(command):
    """--workers, --backend and --address, shared by `sweep` and `compare`."""
    command = click.option("--address", default=None, metavar="ADDR",
                           help="Ray cluster to join ('auto' or ray://host:port); default: start "
                                "a local Ray instance.")(command)
    command = click.option("--backend", type=click.Choice(BACKENDS), default="local",
                           show_default=True, help="Where runs execute.")(command)
    return click.option("--workers", type=click.IntRange(min=1), default=None,
                        help="Parallel runs (default: the number of CPUs; 1 runs in-process).")(command)


@click.command()
@scenario_arguments
@backend_options
@click.option("--restart", is_flag=True, help="Discard the rows already in sweep.csv and rerun all.")
@click.option("--no-plots", is_flag=True, help="Skip the plots.")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@max_memory_option
def sweep(scenario_file: Path, out_dir: Path | None, overrides: tuple[str, ...], workers: int | None,
          backend: str, address: str | None, restart: bool, no_plots: bool, no_progress: bool,
          max_memory_gb: float | None) -> None:
    """Run every (scheduler x sweep point x seed) of SCENARIO_FILE into sweep.csv.

    Runs already in sweep.csv are skipped, so an interrupted sweep resumes where it stopped.
    """
    from simulator.scenario import ScenarioError
    from simulator.sweep.backends import BackendError
    from simulator.sweep.execute import run_sweep
    from simulator.scenario.sweep_plan import load_plan
    from simulator.sweep.table import SweepFileError
    try:
        plan = load_plan(scenario_file, overrides)
        out_dir = out_dir or Path("results") / plan.name
        outcome = run_sweep(plan, out_dir, backend=backend, workers=workers, address=address,
                            restart=restart, progress=not no_progress, log=click.echo,
                            max_memory_gb=max_memory_gb)
    except (ScenarioError, BackendError, SweepFileError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        fail("interrupted; the finished runs are in sweep.csv: run the same command to resume")
    if outcome.num_errors:
        click.echo(f"warning: {outcome.num_errors} runs could not finish; see the error column",
                   err=True)
    click.echo(f"results: {outcome.csv_path}")
    if no_plots:
        return
    from simulator.plots.result_dir import plot_sweep_csv, sweep_plots_up_to_date
    if outcome.num_ran == 0 and sweep_plots_up_to_date(out_dir):
        click.echo("plots: up to date")
        return
    for path in plot_sweep_csv(out_dir):
        click.echo(f"plot: {path}")
