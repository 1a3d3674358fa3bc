"""The `servesim` command. User mistakes print one line and exit 2; no traceback."""
from __future__ import annotations

import atexit
import os
import sys
from pathlib import Path

import click

from simulator.commands.common import (EXIT_USER_ERROR, fail, max_memory_option,  # noqa: F401 (tests import EXIT_USER_ERROR here)
                                       scenario_arguments, scheduler_option)


class LazyGroup(click.Group):
    """Commands that live in other modules are imported only when run: start-up time counts
    when a simulation is used in loops, and `run` needs no plotting, fitting or torch."""

    LAZY = {
        "calibrate": "calibration.cli:calibrate",
        "fit": "cost_models.cli:fit_command",
        "profiles": "cost_models.cli:profiles_command",
        "validate": "simulator.commands.validate:validate",
        "sweep": "simulator.commands.sweep:sweep",
        "compare": "simulator.commands.compare:compare",
        "plot": "simulator.commands.plot:plot",
        "timeline": "simulator.commands.plot:timeline",
        "report": "simulator.commands.report:report",
    }

    def list_commands(self, ctx):
        return sorted({*super().list_commands(ctx), *self.LAZY})

    def get_command(self, ctx, name):
        if name in self.LAZY and name not in self.commands:
            import importlib
            module, _, attr = self.LAZY[name].partition(":")
            self.add_command(getattr(importlib.import_module(module), attr), name)
        return super().get_command(ctx, name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="servesim")
def main() -> None:
    """servesim: simulate LLM serving schedulers on your traffic."""


@main.command()
@scenario_arguments
@scheduler_option
@click.option("--no-plots", is_flag=True, help="Skip the overview plot.")
@click.option("--format", "file_format", type=click.Choice(["csv", "parquet"]), default="csv",
              show_default=True, help="Format of requests and steps (parquet for large runs).")
@max_memory_option
@click.option("--save-detailed", is_flag=True,
              help="Add vllm bench serve's per-request lists (ttfts, itls, ...) to summary.json.")
@click.option("--date-now", is_flag=True,
              help="Write the wall-clock date in summary.json (default 19700101-000000: same bytes).")
def run(scenario_file: Path, out_dir: Path | None, overrides: tuple[str, ...],
        schedulers: tuple[str, ...], no_plots: bool, file_format: str,
        max_memory_gb: float | None, save_detailed: bool, date_now: bool) -> None:
    """Run every scheduler of SCENARIO_FILE (or those --scheduler names) on the same workload
    and write results."""
    # Before numpy loads: OpenBLAS would start a thread per core for a simulation that does no
    # BLAS work. An explicit OPENBLAS_NUM_THREADS wins.
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from simulator.engine.progress import NoProgressError
    from simulator.commands.run import run_scenario_file
    from simulator.scenario import ScenarioError
    try:
        run_scenario_file(scenario_file, out_dir, overrides, plots=not no_plots,
                          schedulers=schedulers, file_format=file_format,
                          max_memory_gb=max_memory_gb, save_detailed=save_detailed,
                          date_now=date_now)
    except (ScenarioError, NoProgressError) as exc:
        fail(str(exc))


@main.command()
def schema() -> None:
    """Print the JSON Schema of scenario files."""
    import json

    from simulator.scenario import json_schema
    click.echo(json.dumps(json_schema(), indent=2))


@main.command()
def models() -> None:
    """List the built-in model presets."""
    from cost_models.model_spec import PRESETS
    click.echo(f"{'name':<16}{'params':>9}{'layers':>8}{'hidden':>8}{'heads':>7}{'kv':>5}{'context':>9}")
    for m in PRESETS.values():
        click.echo(f"{m.name:<16}{m.num_params / 1e9:>8.2f}B{m.num_layers:>8}{m.hidden_size:>8}"
                   f"{m.num_attention_heads:>7}{m.num_kv_heads:>5}{m.max_model_len:>9}")


@main.command()
def hardware() -> None:
    """List the hardware presets (datasheet figures)."""
    from cost_models.hardware import list_hardware
    click.echo(f"{'name':<16}{'memory GiB':>11}{'HBM GB/s':>10}{'BF16 TFLOP/s':>14}{'link GB/s':>16}  source")
    for h in list_hardware():
        link = f"{h.link} {h.interconnect_bandwidth_Bps / 1e9:.0f}"
        click.echo(f"{h.name:<16}{h.memory_bytes / 2**30:>11.0f}{h.memory_bandwidth_Bps / 1e9:>10.0f}"
                   f"{h.bf16_flops / 1e12:>14.0f}{link:>16}  {h.source[:60]}")


@main.command()
def schedulers() -> None:
    """List the scheduler presets."""
    from simulator.policies.registry import get_preset, preset_names
    for name in preset_names():
        p = get_preset(name)
        click.echo(f"{name:<20}{p.cls.family:<16}{p.description.strip().splitlines()[0]}")


def entry() -> None:
    """The `servesim` console script: ``main``, then the shortest way out of the process.

    When a command has ended (its files closed, its output flushed), Python's teardown would
    only free, object by object, memory that the OS takes back at once. Exit handlers still run:
    ``_leave`` is registered before any other, so it runs after all of them. An uncaught
    exception leaves the usual way."""
    atexit.register(_leave)
    try:
        main()
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            _exit_status.append(exc.code or 0)
        raise


_exit_status: list[int] = []   # set by entry() once main has exited with a status
def _leave() -> None:
    if not _exit_status:
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):   # a closed or broken pipe: Python's own exit reports it
        return
    os._exit(_exit_status[-1])


if __name__ == "__main__":
    entry()
