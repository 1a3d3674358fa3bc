"""The plots `servesim run` draws: ``run_overview.png`` only; `servesim plot DIR` draws the rest
from the written files (result_dir.py).

``RunPlots`` is started before the first run. Where a helper process may be forked
(``parallel_write.can_fork``), a child imports matplotlib and lays out the figure while the
schedulers simulate, adds each run as it is handed over, and saves the figure once told the runs
are done; elsewhere the figure is drawn in this process at the end. Either way the file is the same.
"""
from __future__ import annotations

from functools import partial
from pathlib import Path

from simulator.parallel_write import Helper, Inbox, can_fork
from simulator.plots.overview import RUN_OVERVIEW, OverviewDrawing
from simulator.plots.figures import save_figure
from simulator.plots.run_series import RunSeries

_DONE = None   # what the parent sends once every run has been handed over


class RunPlots:
    """``add`` each run's ``RunSeries`` in run order, then ``finish`` (the written paths). Used as
    a context manager, so that leaving on an error ends the child."""

    def __init__(self, out_dir: Path, fork: bool | None = None):
        out_dir = Path(out_dir)
        self.base, self.title = out_dir / RUN_OVERVIEW, out_dir.name
        self._series: list[RunSeries] = []
        use_child = can_fork() if fork is None else fork
        self._helper = Helper(partial(_draw_in_child, self.base, self.title)) if use_child else None

    def add(self, series: RunSeries) -> None:
        if self._helper is None:
            self._series.append(series)
        else:   # spilled: the parent never waits for a child still importing matplotlib
            self._helper.send(series, spill=True)

    def finish(self) -> list[Path]:
        if self._helper is None:
            return _draw(OverviewDrawing(self.title), self._series, self.base)
        helper, self._helper = self._helper, None
        helper.send(_DONE)
        helper.wait()   # raises the child's own exception if it failed
        return [self.base.with_name(f"{self.base.name}.png")]

    def kill(self) -> None:
        if self._helper is not None:
            self._helper.kill()
            self._helper = None

    def __enter__(self) -> "RunPlots":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.kill()   # after finish there is nothing left to end


def plot_run(out_dir: Path, series: list[RunSeries]) -> list[Path]:
    """``out_dir/run_overview.png`` from each scheduler's ``RunSeries``, in run order, here."""
    with RunPlots(out_dir, fork=False) as plots:
        for s in series:
            plots.add(s)
        return plots.finish()


def _draw_in_child(base: Path, title: str, inbox: Inbox) -> None:
    drawing = OverviewDrawing(title)
    while (series := inbox.receive()) is not _DONE:
        drawing.add(series)   # while the next run simulates
    save_figure(drawing.finish(), base, ("png",))


def _draw(drawing: OverviewDrawing, series: list[RunSeries], base: Path) -> list[Path]:
    for s in series:
        drawing.add(s)
    return save_figure(drawing.finish(), base, ("png",))
