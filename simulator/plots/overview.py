"""``run_overview.png``, the one figure `servesim run` draws: latency CDFs (TTFT, TPOT, E2E) and
the engine state over time (running and waiting requests, KV usage), one line per scheduler.

It is kept cheap to draw: decimated lines (decimate.py), one legend for the whole figure at a
fixed place, fixed margins instead of a layout pass, no minor ticks and no mathtext labels.
``OverviewDrawing`` takes the runs one at a time, so the figure can be built while later runs
are still simulating (run_plots.py).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from simulator.results.decimate import cdf_points, envelope
from simulator.plots.figures import new_figure, save_figure
from simulator.plots.run_series import RunSeries

RUN_OVERVIEW = "run_overview"
CDF_PANELS = (("ttft_ms", "TTFT (ms)"), ("tpot_ms", "TPOT (ms)"), ("e2el_ms", "end-to-end latency (ms)"))
STATE_PANELS = (("num_running", "running requests"), ("num_waiting", "waiting requests"),
                ("kv_usage", "KV cache usage (0-1)"))
LEGEND_COLUMNS = 6
DPI = 110   # save_figure's: text is laid out once, at the dpi it is saved at


def plot_run_overview(series: Sequence[RunSeries], base: Path, title: str,
                      formats: tuple[str, ...] = ("png",)) -> list[Path]:
    return save_figure(overview_figure(series, title), base, formats)


def overview_figure(series: Sequence[RunSeries], title: str):
    drawing = OverviewDrawing(title)
    for s in series:
        drawing.add(s)
    return drawing.finish()


class OverviewDrawing:
    """The overview figure, built up one run at a time: ``add`` each run, then ``finish``."""

    def __init__(self, title: str):
        self.fig = new_figure(figsize=(14, 7.5), dpi=DPI)
        self.axes = self.fig.subplots(2, 3)
        self.fig.suptitle(f"{title}: latency and engine state per scheduler")
        for ax, (_, xlabel) in zip(self.axes[0], CDF_PANELS):
            ax.set(xlabel=xlabel, ylabel="fraction of requests", ylim=(0, 1.02))
        for ax, (_, ylabel) in zip(self.axes[1], STATE_PANELS):
            ax.set(xlabel="time (s)", ylabel=ylabel)
        for ax in self.axes.flat:
            ax.grid(alpha=0.3)
        self.labels: list[str] = []
        self._latency_range = {field: (math.inf, -math.inf) for field, _ in CDF_PANELS}

    def add(self, s: RunSeries) -> None:
        color = f"C{len(self.labels)}"
        self.labels.append(s.label)
        for ax, (field, _) in zip(self.axes[0], CDF_PANELS):
            values = getattr(s, field)
            if len(values):
                ax.plot(*cdf_points(values), color=color, linewidth=1.2)
            positive = values[values > 0]   # what a log axis can show
            if len(positive):
                lo, hi = self._latency_range[field]
                self._latency_range[field] = min(lo, positive.min()), max(hi, positive.max())
        if len(s.step_end_s):
            for ax, (field, _) in zip(self.axes[1], STATE_PANELS):
                ax.step(*envelope(s.step_end_s, getattr(s, field)), where="post", color=color,
                        linewidth=0.8)

    def finish(self):
        """The figure, with its latency axes scaled and the legend placed."""
        for ax, (field, _) in zip(self.axes[0], CDF_PANELS):
            _latency_axis(ax, *self._latency_range[field])
        handles = [self.axes[0][0].plot([], [], color=f"C{i}", label=label)[0]
                   for i, label in enumerate(self.labels)]
        ncol = max(1, min(len(self.labels), LEGEND_COLUMNS))
        self.fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.955),
                        ncol=ncol, fontsize=9, frameon=False)
        legend_rows = max(1, -(-len(self.labels) // ncol))
        self.fig.subplots_adjust(left=0.06, right=0.98, bottom=0.08, wspace=0.25, hspace=0.3,
                                 top=0.89 - 0.03 * (legend_rows - 1))
        return self.fig


def _latency_axis(ax, lo: float, hi: float) -> None:
    """Log scale when the latencies span more than a factor of 10 (static batching's TTFT is
    seconds where continuous batching's is milliseconds), with plain 1-2-5 style labels."""
    if not (lo > 0 and hi > 10 * lo):
        return
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator
    decades = math.log10(hi / lo)
    subs = (1.0, 2.0, 5.0) if decades <= 1.5 else (1.0, 3.0) if decades <= 3 else (1.0,)
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(subs=subs))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_locator(NullLocator())

