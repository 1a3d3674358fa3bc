"""Engine state over time per scheduler: KV usage, running requests, state slots used (hybrid
models' runs only), waiting requests and preemptions so far (steps.csv columns, as a Prometheus
scrape of vLLM would show them), steps that preempted marked with an x on the KV panel.

Each quantity is one panel shared by all schedulers, unless it is a count whose peaks differ
tenfold between schedulers (``spans_decade`` of the peaks: a queue peaking at 5,000 beside one
peaking at 3): then it takes one row per scheduler, each on its own y-scale, and the label says
so. A quantity that is zero throughout (no preemptions, a queue always empty) has no panel, and a
scheduler whose count is zero throughout has no row (the panel's title names it); exactly equal
series are one line named for all of them (axes.py). A run of several replicas (or P/D pools)
draws each replica's own series, a line each (run_series.engine_state_series).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from simulator.results.decimate import envelope, thin_events
from simulator.plots.axes import (CurveGroup, default_colors, draw_group_kwargs, has_data,
                                  identical_groups, legend_entries, set_scale,
                                  spans_decade)
from simulator.plots.figures import FORMATS, new_figure, save_figure
from simulator.plots.run_series import RunSeries, engine_state_series

WIDTH_IN, SHARED_ROW_IN, OWN_ROW_IN, TOP_IN, BOTTOM_IN = 12.0, 2.4, 1.15, 0.7, 0.55
LEGEND_COLUMNS = 6


@dataclass(frozen=True)
class Panel:
    field: str        # a RunSeries array, or PREEMPTED (the running total of num_preemptions)
    label: str
    short: str        # the y label of a row of its own
    count: bool       # a count: one row per scheduler where the peaks differ tenfold


PREEMPTED = "preempted_so_far"
PANELS = (Panel("kv_usage", "KV cache usage (0-1)", "KV usage", False),
          Panel("num_running", "running requests", "running", True),
          Panel("num_state_slots", "state slots used (hybrid models)", "state slots", True),
          Panel("num_waiting", "waiting requests", "waiting", True),
          Panel(PREEMPTED, "preemptions so far", "preempted", True))


@dataclass(frozen=True)
class Row:
    """One axes: a panel's groups of schedulers (all of them, or one on its own scale)."""
    panel: Panel
    groups: tuple[CurveGroup, ...]
    own_scale: bool = False
    title: str = ""


def plot_engine_timeseries(series: Sequence[RunSeries], base: Path, title: str,
                           formats: tuple[str, ...] = FORMATS) -> list[Path]:
    return save_figure(engine_timeseries_figure(series, title), base, formats)


def panel_values(s: RunSeries, panel: Panel) -> np.ndarray:
    if panel.field == PREEMPTED:
        return np.cumsum(s.num_preemptions)
    values = getattr(s, panel.field)
    # A series only hybrid runs have: zero elsewhere, so a run without it draws nothing there.
    return values if len(values) == len(s.step_end_s) else np.zeros(len(s.step_end_s))


def layout_rows(series: Sequence[RunSeries], member: str = "scheduler") -> list[Row]:
    """The rows the figure draws, top to bottom (see the module's docstring for the rules);
    ``member``: what one line is, for the titles (a scheduler, or a replica)."""
    rows: list[Row] = []
    for panel in PANELS:
        values = [panel_values(s, panel) for s in series]
        if not has_data(values, zero_is_nothing=True):
            continue   # nothing happened: no panel
        marks = [s.num_preemptions if panel.field == "kv_usage" else () for s in series]
        groups = identical_groups([s.label for s in series],
                                  [(s.step_end_s, v, m) for s, v, m in zip(series, values, marks)])
        peaks = [float(np.max(values[g.index])) for g in groups]
        if not (panel.count and spans_decade(peaks)):
            rows.append(Row(panel, tuple(groups)))
            continue
        zero = [g.label for g, p in zip(groups, peaks) if p == 0]
        positive = [p for p in peaks if p > 0]
        title = (f"{panel.label}: one row per {member}, each on its own y-scale (peaks "
                 f"{min(positive):g} to {max(positive):g})"
                 + (f"; always 0: {', '.join(zero)}" if zero else ""))
        own = [g for g, p in zip(groups, peaks) if p > 0]
        rows += [Row(panel, (g,), True, title if i == 0 else "") for i, g in enumerate(own)]
    return rows


def engine_timeseries_figure(series: Sequence[RunSeries], title: str):
    """One row per shared panel or per scheduler on its own scale (runs without steps are left
    out)."""
    runs = [s for s in series if len(s.step_end_s)]
    series = engine_state_series(runs)
    colors = default_colors(len(series))
    rows = layout_rows(series, "replica" if any(len(s.step_replica) for s in runs) else "scheduler")
    heights = [OWN_ROW_IN if r.own_scale else SHARED_ROW_IN for r in rows]
    fig = new_figure(figsize=(WIDTH_IN, TOP_IN + sum(heights) + BOTTOM_IN))
    axes = fig.subplots(len(rows), 1, sharex=True, squeeze=False,
                        gridspec_kw={"height_ratios": heights})[:, 0] if rows else []
    for ax, row in zip(axes, rows):
        _draw_row(ax, row, series, colors)
    if len(axes):
        axes[-1].set_xlabel("time (s)")
    preempted = any(s.total_preemptions for s in series)
    fig.suptitle(f"{title}: engine state over time" + ("  (x: a step that preempted)"
                                                        if preempted else ""))
    entries = legend_entries(axes)
    order = [s.label for s in series if s.label in entries] + [
        k for k in entries if k not in {s.label for s in series}]
    ncol = max(1, min(len(order), LEGEND_COLUMNS))
    height = fig.get_figheight()
    fig.legend([entries[k] for k in order], order, loc="upper center", ncol=ncol, fontsize=8,
               frameon=False, bbox_to_anchor=(0.5, 1 - 0.4 / height))
    legend_in = 0.4 + 0.22 * -(-len(order) // ncol)
    fig.tight_layout(rect=(0, 0, 1, 1 - legend_in / height), h_pad=0.6)
    return fig


def _draw_row(ax, row: Row, series: Sequence[RunSeries], colors) -> None:
    for group in row.groups:
        s = series[group.index]
        values = panel_values(s, row.panel)
        ax.step(*envelope(s.step_end_s, values), where="post", linewidth=1,
                **draw_group_kwargs(group, colors))
        if row.panel.field == "kv_usage":
            _mark_preemptions(ax, s, colors[group.index])
    if row.own_scale:
        ax.set_ylabel(f"{row.panel.short}\n(own scale)", fontsize=8)
        ax.legend(loc="upper right", fontsize=7, frameon=False)
        ax.set_ylim(bottom=0)
    else:
        ax.set_ylabel(row.panel.label)
    if row.title:
        ax.set_title(row.title, fontsize=9, loc="left")
    if row.panel.count:   # linear: a count's shared row never spans a decade (it is split)
        set_scale(ax, "y", [np.max(panel_values(series[g.index], row.panel)) for g in row.groups],
                  counts=True)
    else:   # KV usage is a fraction of the cache: linear, read against 0 and 1
        ax.ticklabel_format(axis="y", style="plain", useOffset=False)
    ax.grid(alpha=0.3)


def _mark_preemptions(ax, s: RunSeries, color) -> None:
    hit = thin_events(s.step_end_s, s.num_preemptions)
    if len(hit):   # a scatter is a collection, so the lines stay one per scheduler
        ax.scatter(s.step_end_s[hit], s.kv_usage[hit], marker="x", s=18, color=color,
                   label="_preemptions", zorder=3)
