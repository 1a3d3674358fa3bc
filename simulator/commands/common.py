"""What every `servesim` command shares: the user-error exit and the scenario arguments."""
from __future__ import annotations

import sys
from pathlib import Path

import click

EXIT_USER_ERROR = 2


def fail(message: str) -> None:
    """One line on stderr and exit 2: a user mistake never shows a traceback."""
    click.echo(f"error: {message}", err=True)
    sys.exit(EXIT_USER_ERROR)


def scenario_arguments(command):
    """SCENARIO_FILE, -o/--out and --set, as `run`, `sweep` and `timeline` take them."""
    command = click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                           help="Override a field, e.g. --set workload.arrival.rate=8 "
                                "(repeatable).")(command)
    command = click.option("-o", "--out", "out_dir",
                           type=click.Path(file_okay=False, path_type=Path),
                           help="Result folder (default: results/<scenario name>).")(command)
    return click.argument("scenario_file", type=click.Path(dir_okay=False, path_type=Path))(command)


def scheduler_option(command):
    """--scheduler NAME (repeatable): only these schedulers of the file, as `run` and `timeline`
    take it (runner.select_schedulers refuses an unknown name in one line)."""
    return click.option("--scheduler", "schedulers", multiple=True, metavar="NAME",
                        help="Only this scheduler of the file (its name or preset; repeatable; "
                             "default: all).")(command)


def max_memory_option(command):
    """--max-memory-gb: the memory a run may take, checked before it starts (default: what this
    machine has available)."""
    return click.option("--max-memory-gb", type=click.FloatRange(min=0, min_open=True),
                        metavar="GB", help="Refuse a run estimated to need more than this many "
                                           "GB (default: the memory available).")(command)
