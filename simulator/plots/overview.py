"""``run_overview.png``, the one figure `servesim run` draws: latency CDFs (TTFT, TPOT, E2E) and
the engine state over time (running and waiting requests, KV usage), one line per scheduler.

The rules of axes.py hold: exactly equal curves are one line named for all of them, a latency
axis is logarithmic only over a decade, a panel with nothing to show (no TPOT, a queue that was
always empty) is left out, and where the schedulers' queue peaks differ tenfold the count axis is
logarithmic (symlog, so 0 stays) and says so. A run of several replicas (or P/D pools) draws
each replica's engine state, a line each in colours after the schedulers'. It is kept cheap to
draw: decimated lines (decimate.py), one legend at a fixed place, fixed margins instead of a
layout pass, no minor ticks.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from simulator.results.decimate import envelope
from simulator.plots.axes import (default_colors, draw_group_kwargs, grid_axes, has_data,
                                  identical_groups, legend_entries, set_scale)
from simulator.plots.cdfs import draw_cdfs, shown_panels
from simulator.plots.figures import new_figure, save_figure
from simulator.plots.run_series import RunSeries, engine_state_series

RUN_OVERVIEW = "run_overview"
CDF_PANELS = (("ttft_ms", "TTFT (ms)"), ("tpot_ms", "TPOT (ms)"), ("e2el_ms", "end-to-end latency (ms)"))
STATE_PANELS = (("num_running", "running requests", True),   # (field, label, a count)
                ("num_waiting", "waiting requests", True), ("kv_usage", "KV cache usage (0-1)", False))
LEGEND_COLUMNS = 6
DPI = 110   # save_figure's: text is laid out once, at the dpi it is saved at
WIDTH_IN, ROW_IN, TOP_IN, LEGEND_ROW_IN, BOTTOM_IN = 14.0, 3.4, 0.6, 0.25, 0.6


def plot_run_overview(series: Sequence[RunSeries], base: Path, title: str,
                      formats: tuple[str, ...] = ("png",)) -> list[Path]:
    return save_figure(overview_figure(series, title), base, formats)


def shown_state_panels(series: Sequence[RunSeries]) -> list[tuple]:
    """Engine-state panels with something to show: runs with steps, and a non-zero value."""
    return [p for p in STATE_PANELS
            if has_data((getattr(s, p[0]) for s in series), zero_is_nothing=True)]


def overview_figure(series: Sequence[RunSeries], title: str):
    state_series = engine_state_series(series)
    cdfs, states = shown_panels(series, CDF_PANELS), shown_state_panels(state_series)
    colors = default_colors(len(series))
    split = any(len(s.step_replica) for s in series)
    state_colors = (default_colors(len(series) + len(state_series))[len(series):] if split
                    else colors)
    fig = new_figure(figsize=(WIDTH_IN, ROW_IN * 2), dpi=DPI)
    rows = grid_axes(fig, [len(cdfs), len(states)])
    cdf_axes = rows[0] if cdfs else []
    state_axes = rows[-1] if states else []
    for ax, (field, xlabel) in zip(cdf_axes, cdfs):
        set_scale(ax, "x", draw_cdfs(ax, series, field, colors, linewidth=1.2))
        ax.set(xlabel=xlabel, ylabel="fraction of requests", ylim=(0, 1.02))
    for ax, (field, ylabel, count) in zip(state_axes, states):
        peaks = _draw_state(ax, state_series, field, state_colors)
        log = set_scale(ax, "y", peaks, counts=True) if count else False
        ax.set(xlabel="time (s)", ylabel=f"{ylabel} (log scale)" if log else ylabel)
    for ax in [*cdf_axes, *state_axes]:
        ax.grid(alpha=0.3)
    fig.suptitle(f"{title}: latency and engine state per scheduler")
    legend_rows = _legend(fig, [*cdf_axes, *state_axes],
                          [s.label for s in [*series, *(state_series if split else ())]])
    top_in = TOP_IN + LEGEND_ROW_IN * legend_rows
    height = top_in + ROW_IN * len(rows) + BOTTOM_IN
    fig.set_size_inches(WIDTH_IN, height)
    fig.subplots_adjust(left=0.06, right=0.98, bottom=BOTTOM_IN / height, wspace=0.25,
                        hspace=0.3, top=1 - top_in / height)
    return fig


def _draw_state(ax, series: Sequence[RunSeries], field: str, colors) -> list[float]:
    """One step line per group of runs with exactly the same steps; returns each group's peak."""
    index = [i for i, s in enumerate(series) if len(s.step_end_s)]
    data = [(series[i].step_end_s, getattr(series[i], field)) for i in index]
    peaks = []
    for group in identical_groups([series[i].label for i in index], data):
        t, y = data[group.index]
        ax.step(*envelope(t, y), where="post", linewidth=0.8,
                **draw_group_kwargs(group, [colors[i] for i in index]))
        peaks.append(float(np.max(y)))
    return peaks


def _legend(fig, axes, labels: list[str]) -> int:
    """One legend at the top, every scheduler in run order, then any identical groups; returns
    its number of rows."""
    entries = legend_entries(axes)
    order = [k for k in labels if k in entries] + [k for k in entries if k not in labels]
    ncol = max(1, min(len(order), LEGEND_COLUMNS))
    fig.legend([entries[k] for k in order], order, loc="upper center", ncol=ncol, fontsize=9,
               frameon=False, bbox_to_anchor=(0.5, 1.0), bbox_transform=_top_transform(fig))
    return max(1, -(-len(order) // ncol))


def _top_transform(fig):
    """Figure fractions, then moved down by inches: the legend stays under the title whatever
    the figure's final height."""
    from matplotlib.transforms import ScaledTranslation
    return fig.transFigure + ScaledTranslation(0, -(TOP_IN - 0.2), fig.dpi_scale_trans)
