"""`servesim report RESULT_DIR`: one self-contained HTML page of the folder's results."""
from __future__ import annotations

from pathlib import Path

import click

from simulator.commands.common import fail


@click.command()
@click.argument("result_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("-o", "--out", "out_file", type=click.Path(dir_okay=False, path_type=Path),
              help="The page to write (default: RESULT_DIR/report.html).")
def report(result_dir: Path, out_file: Path | None) -> None:
    """Write one HTML page (no network needed to open it) with RESULT_DIR's curves, latency
    CDFs, engine series and an animated static-vs-continuous batch timeline."""
    from simulator.report.page import write_report
    try:
        path = write_report(result_dir, out_file)
    except ValueError as exc:
        fail(str(exc))
    except OSError as exc:   # a folder that cannot be read, or an output that cannot be written
        fail(f"{exc.filename or result_dir}: {exc.strerror or exc}")
    click.echo(f"report: {path}")
