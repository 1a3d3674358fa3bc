"""The headline picture: output throughput against TTFT and TPOT (p50 and p99), one curve per
scheduler, from sweep.csv; each point is the mean over seeds with its 95% interval both ways,
labelled by its request rate or concurrency. The rules of axes.py hold: exactly equal curves are
one line named for all of them, an axis is logarithmic only over a decade, a panel with nothing to
show (TPOT when no request produced a second token) is left out.

A sweep without a load axis (request rate or concurrency) has no curve to draw: its points are
shown as grouped bars instead (``plot_sweep_points``), one bar per scheduler.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from simulator.plots.axes import (default_colors, draw_group_kwargs, grid_axes, has_data,
                                  identical_groups, legend_entries, place_point_labels, round_number,
                                  rows_of, set_scale)
from simulator.plots.figures import FORMATS, draw_slo, new_figure, save_figure
from simulator.sweep.stats import Curve, curves, mean_ci95, point_label, to_float

X_METRIC = "output_throughput"
PANELS = (("median_ttft_ms", "TTFT p50 (ms)", "ttft"), ("p99_ttft_ms", "TTFT p99 (ms)", "ttft"),
          ("median_tpot_ms", "TPOT p50 (ms)", "tpot"), ("p99_tpot_ms", "TPOT p99 (ms)", "tpot"))
POINT_METRICS = (("output_throughput", "output tokens/s"), ("p99_ttft_ms", "TTFT p99 (ms)"),
                 ("p99_tpot_ms", "TPOT p99 (ms)"), ("num_preemptions", "preemptions"))
MAX_LABELLED_BARS = 32   # each bar's value written above it up to this many bars per panel
LOAD_NAMES = {"workload.arrival.rate": "request rate (req/s)",   # what a point's label is
              "workload.max_concurrency": "concurrency (clients)"}


def sweep_curves(rows: list[dict], load_key: str, param_keys: Sequence[str]) -> list[Curve]:
    return curves(rows, load_key, param_keys, [X_METRIC, *(m for m, _, _ in PANELS)])


def plot_throughput_latency(all_curves: list[Curve], base: Path, title: str,
                            slos_ms: dict[str, float] | None = None,
                            formats: tuple[str, ...] = FORMATS,
                            load_key: str | None = None) -> list[Path]:
    return save_figure(throughput_latency_figure(all_curves, title, slos_ms, load_key), base,
                       formats)


def shown_curve_panels(all_curves: list[Curve]) -> list[tuple]:
    """The latency panels some curve has a non-zero value for (an empty TPOT is 0 in sweep.csv:
    no request produced a second token)."""
    return [p for p in PANELS
            if has_data(([e.mean for e in c.metrics[p[0]]] for c in all_curves),
                        zero_is_nothing=True)]


def throughput_latency_figure(all_curves: list[Curve], title: str,
                              slos_ms: dict[str, float] | None = None,
                              load_key: str | None = None):
    """``load_key``: the swept path along each curve (its values label the points)."""
    panels = shown_curve_panels(all_curves)
    per_row = rows_of(len(panels), 2)
    fig = new_figure(figsize=(12, 0.9 + 3.9 * max(1, len(per_row))))
    axes = [ax for row in grid_axes(fig, per_row) for ax in row]
    colors = default_colors(len(all_curves))
    labels: dict = {}
    for ax, (metric, ylabel, slo_name) in zip(axes, panels):
        groups = identical_groups([c.label for c in all_curves],
                                  [_curve_data(c, metric) for c in all_curves])
        labels[ax] = [p for group in groups for p in _draw_curve(
            ax, all_curves[group.index], metric, draw_group_kwargs(group, colors))]
        draw_slo(ax, (slos_ms or {}).get(slo_name), slo_name.upper())
        ax.set(xlabel="output throughput (tokens/s)", ylabel=ylabel,
               title=f"{ylabel.split(' (')[0]} vs throughput")
        ys = [e.mean for c in all_curves for e in c.metrics[metric]]
        if not set_scale(ax, "y", ys):   # from zero: a flat 20 ms must read as 20 ms
            ax.set_ylim(bottom=0, top=ax.get_ylim()[1] * 1.05)
        set_scale(ax, "x", [e.mean for c in all_curves for e in c.metrics[X_METRIC]])
        ax.grid(alpha=0.3)
    load = LOAD_NAMES.get(load_key or "", "the swept load")
    fig.suptitle(f"{title}: throughput vs latency (mean over seeds, 95% interval; "
                 f"points labelled by {load})" if panels else
                 f"{title}: no latency to show (every run failed or produced no tokens)")
    legend_below(fig, axes)
    for ax, points in labels.items():   # placed once the layout has sized the axes
        place_point_labels(ax, points)
    return fig


def legend_below(fig, axes):
    """One legend for all panels, under them (the curves are the same in each panel)."""
    entries = legend_entries(axes)
    ncol = min(3, max(1, len(entries)))
    fig.legend(entries.values(), entries.keys(), loc="lower center", ncol=ncol, fontsize=8)
    rows = -(-len(entries) // ncol)
    height = fig.get_figheight()
    fig.tight_layout(rect=(0, min(0.4, (0.25 + 0.2 * rows) / height), 1, 1))
    return fig


def _curve_data(curve: Curve, metric: str) -> tuple:
    """What is drawn of one curve in one panel: both means and both intervals, and the labels."""
    x, y = curve.metrics[X_METRIC], curve.metrics[metric]
    return ([e.mean for e in x], [e.mean for e in y], [e.half_width or 0.0 for e in x],
            [e.half_width or 0.0 for e in y], curve.x)


def _draw_curve(ax, curve: Curve, metric: str, style: dict) -> list[tuple]:
    """The curve with its intervals; returns its point labels (the swept load of each point)."""
    x = curve.metrics[X_METRIC]
    y = curve.metrics[metric]
    xs, ys = [e.mean for e in x], [e.mean for e in y]
    (line,) = ax.plot(xs, ys, marker="o", markersize=4, **style)
    xerr = [e.half_width or 0.0 for e in x]
    # On a log axis an interval reaching below zero would draw to the bottom edge: clip it.
    yerr = [[min(e.half_width or 0.0, 0.9 * e.mean) for e in y], [e.half_width or 0.0 for e in y]]
    if any(xerr) or any(yerr[1]):   # error bars are collections, not lines: one line per curve
        ax.errorbar(xs, ys, xerr=xerr, yerr=yerr, fmt="none", ecolor=line.get_color(),
                    alpha=0.35, capsize=0, linewidth=1)
    return [(x_, y_, f"{load:g}", line.get_color()) for x_, y_, load in zip(xs, ys, curve.x)]


def plot_sweep_points(rows: list[dict], param_keys: Sequence[str], base: Path,
                      title: str, formats: tuple[str, ...] = FORMATS) -> list[Path]:
    return save_figure(sweep_points_figure(rows, param_keys, title), base, formats)


def sweep_points_figure(rows: list[dict], param_keys: Sequence[str], title: str):
    """Grouped bars: one group per sweep point, one bar per scheduler, mean over seeds ± 95%; a
    metric that is zero at every point (no preemptions) has no panel."""
    finished = [r for r in rows if not r.get("error")]
    points = list(dict.fromkeys(point_label(r, param_keys, "\n") for r in finished))
    schedulers = list(dict.fromkeys(r["scheduler"] for r in finished))
    estimates = {metric: [[_point_estimate(finished, param_keys, p, s, metric) for p in points]
                          for s in schedulers] for metric, _ in POINT_METRICS}
    panels = [(m, label) for m, label in POINT_METRICS
              if has_data(([e[0] for e in est] for est in estimates[m]), zero_is_nothing=True)]
    fig = new_figure(figsize=(max(8, 1.3 * len(points) + 2), 1.6 + 2.1 * max(1, len(panels))))
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0] if panels else []
    width = 0.8 / max(1, len(schedulers))
    label_bars = len(points) * len(schedulers) <= MAX_LABELLED_BARS
    for ax, (metric, ylabel) in zip(axes, panels):
        for j, (scheduler, est) in enumerate(zip(schedulers, estimates[metric])):
            errors = [e[1] for e in est]
            bars = ax.bar(np.arange(len(points)) + j * width, [e[0] for e in est], width,
                          yerr=errors if any(errors) else None, label=scheduler, capsize=2)
            if label_bars:
                ax.bar_label(bars, [round_number(e[0]) for e in est], fontsize=7, padding=1)
        # Linear even over decades: a bar's length is its value; the labels give small ones.
        ax.ticklabel_format(axis="y", style="plain", useOffset=False)
        ax.set(ylabel=ylabel, ylim=(0, ax.get_ylim()[1] * 1.08))
        ax.grid(alpha=0.3, axis="y")
    if len(axes):
        axes[-1].set_xticks(np.arange(len(points)) + 0.4 - width / 2, points, fontsize=8)
        axes[-1].set_xlabel("sweep point")
    fig.suptitle(f"{title}: every sweep point (mean over seeds, 95% interval)")
    return legend_below(fig, axes[:1])


def _point_estimate(rows, param_keys, point: str, scheduler: str, metric: str):
    values = [to_float(r.get(metric)) for r in rows if r["scheduler"] == scheduler
              and point_label(r, param_keys, "\n") == point]
    values = [v for v in values if v is not None]
    if not values:
        return 0.0, 0.0
    est = mean_ci95(values)
    return est.mean, est.half_width or 0.0
