"""Latency CDFs per scheduler: TTFT, TPOT and end-to-end latency, from each run's RunSeries.

A panel is drawn only where some run has values (no TPOT panel when no request produced more
than one token); schedulers with exactly the same latencies share one line (axes.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from simulator.results.decimate import cdf_points
from simulator.plots.axes import (default_colors, draw_group_kwargs, grid_axes, has_data,
                                  identical_groups, set_scale)
from simulator.plots.figures import FORMATS, SLO_LABEL_PREFIX, SLO_STYLE, new_figure, save_figure
from simulator.plots.run_series import RunSeries

PANELS = (("ttft_ms", "TTFT (ms)", "ttft"), ("tpot_ms", "TPOT (ms)", "tpot"),
          ("e2el_ms", "end-to-end latency (ms)", "e2el"))
PANEL_WIDTH_IN, HEIGHT_IN = 5.0, 4.5


def plot_latency_cdfs(series: Sequence[RunSeries], base: Path, title: str,
                      slos_ms: dict[str, float] | None = None,
                      formats: tuple[str, ...] = FORMATS) -> list[Path]:
    return save_figure(latency_cdfs_figure(series, title, slos_ms), base, formats)


def shown_panels(series: Sequence[RunSeries], panels=PANELS) -> list[tuple]:
    """The latency panels some run has values for."""
    return [p for p in panels if has_data(getattr(s, p[0]) for s in series)]


def latency_cdfs_figure(series: Sequence[RunSeries], title: str,
                        slos_ms: dict[str, float] | None = None):
    panels = shown_panels(series)
    fig = new_figure(figsize=(PANEL_WIDTH_IN * max(1, len(panels)), HEIGHT_IN))
    rows = grid_axes(fig, [len(panels)])
    colors = default_colors(len(series))
    for ax, (field, xlabel, slo_name) in zip(rows[0] if rows else [], panels):
        values = draw_cdfs(ax, series, field, colors)
        slo = (slos_ms or {}).get(slo_name)
        if slo is not None:
            ax.axvline(slo, label=f"{SLO_LABEL_PREFIX} {slo_name.upper()} {slo:g} ms", **SLO_STYLE)
        set_scale(ax, "x", values)
        ax.set(xlabel=xlabel, ylabel="fraction of requests", title=f"{xlabel.split(' (')[0]} CDF")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{title}: latency CDFs per scheduler" if panels else
                 f"{title}: no finished request has a latency to show")
    fig.tight_layout()
    return fig


def draw_cdfs(ax, series: Sequence[RunSeries], field: str, colors: Sequence[str],
              linewidth: float = 1.5) -> np.ndarray:
    """One CDF line per group of runs with exactly the same values of ``field``; returns every
    value drawn (for the axis scale)."""
    index = [i for i, s in enumerate(series) if len(getattr(s, field))]
    sorted_values = [np.sort(getattr(series[i], field)) for i in index]   # equal sorted: equal CDF
    labels = [series[i].label for i in index]
    for group in identical_groups(labels, [(v,) for v in sorted_values]):
        style = draw_group_kwargs(group, [colors[i] for i in index])
        ax.plot(*cdf_points(sorted_values[group.index]), linewidth=linewidth, **style)
    return np.concatenate(sorted_values) if sorted_values else np.zeros(0)
