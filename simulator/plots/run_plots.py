"""The plot `servesim run` draws: ``run_overview.png`` only; `servesim plot DIR` draws the rest
from the written files (result_dir.py)."""
from __future__ import annotations

from pathlib import Path

from simulator.plots.overview import RUN_OVERVIEW, plot_run_overview
from simulator.plots.run_series import RunSeries


def plot_run(out_dir: Path, series: list[RunSeries]) -> list[Path]:
    """``out_dir/run_overview.png`` from each scheduler's ``RunSeries``, in run order."""
    out_dir = Path(out_dir)
    return plot_run_overview(series, out_dir / RUN_OVERVIEW, out_dir.name)
