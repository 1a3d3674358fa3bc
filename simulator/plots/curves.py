"""The headline picture: output throughput against TTFT and TPOT (p50 and p99), one curve per
scheduler, from sweep.csv; each point is the mean over seeds with its 95% interval both ways.

A sweep without a load axis (request rate or concurrency) has no curve to draw: its points are
shown as grouped bars instead (``plot_sweep_points``), one bar per scheduler.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from simulator.plots.figures import FORMATS, draw_slo, pyplot, save_figure
from simulator.sweep.stats import Curve, curves, mean_ci95, point_label, to_float

X_METRIC = "output_throughput"
PANELS = (("median_ttft_ms", "TTFT p50 (ms)", "ttft"), ("p99_ttft_ms", "TTFT p99 (ms)", "ttft"),
          ("median_tpot_ms", "TPOT p50 (ms)", "tpot"), ("p99_tpot_ms", "TPOT p99 (ms)", "tpot"))
POINT_METRICS = (("output_throughput", "output tokens/s"), ("p99_ttft_ms", "TTFT p99 (ms)"),
                 ("p99_tpot_ms", "TPOT p99 (ms)"), ("num_preemptions", "preemptions"))


def sweep_curves(rows: list[dict], load_key: str, param_keys: Sequence[str]) -> list[Curve]:
    return curves(rows, load_key, param_keys, [X_METRIC, *(m for m, _, _ in PANELS)])


def plot_throughput_latency(all_curves: list[Curve], base: Path, title: str,
                            slos_ms: dict[str, float] | None = None,
                            formats: tuple[str, ...] = FORMATS) -> list[Path]:
    return save_figure(throughput_latency_figure(all_curves, title, slos_ms), base, formats)


def throughput_latency_figure(all_curves: list[Curve], title: str,
                              slos_ms: dict[str, float] | None = None):
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    for ax, (metric, ylabel, slo_name) in zip(axes.flat, PANELS):
        for curve in all_curves:
            _draw_curve(ax, curve, metric)
        draw_slo(ax, (slos_ms or {}).get(slo_name), slo_name.upper())
        ax.set(xlabel="output throughput (tokens/s)", ylabel=ylabel,
               title=f"{ylabel.split(' (')[0]} vs throughput")
        if _spans_decades(all_curves, metric):
            ax.set_yscale("log")
        else:   # from zero, without an offset: a flat 20 ms must read as 20 ms
            ax.set_ylim(bottom=0, top=ax.get_ylim()[1] * 1.05)
            ax.ticklabel_format(axis="y", useOffset=False, style="plain")
        ax.grid(alpha=0.3)
    fig.suptitle(f"{title}: throughput vs latency (mean over seeds, 95% interval)")
    return legend_below(fig, axes.flat)


def legend_below(fig, axes):
    """One legend for all panels, under them (the curves are the same in each panel)."""
    entries: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    ncol = min(3, max(1, len(entries)))
    fig.legend(entries.values(), entries.keys(), loc="lower center", ncol=ncol, fontsize=8)
    rows = -(-len(entries) // ncol)
    fig.tight_layout(rect=(0, min(0.4, 0.03 + 0.028 * rows), 1, 1))
    return fig


def _spans_decades(all_curves: list[Curve], metric: str) -> bool:
    """Log scale only when the values span more than a factor of 10 (else its ticks say little)."""
    values = [e.mean for c in all_curves for e in c.metrics[metric] if e.mean > 0]
    return bool(values) and max(values) > 10 * min(values)


def _draw_curve(ax, curve: Curve, metric: str) -> None:
    x = curve.metrics[X_METRIC]
    y = curve.metrics[metric]
    xs, ys = [e.mean for e in x], [e.mean for e in y]
    (line,) = ax.plot(xs, ys, marker="o", markersize=4, label=curve.label)
    xerr = [e.half_width or 0.0 for e in x]
    # On a log axis an interval reaching below zero would draw to the bottom edge: clip it.
    yerr = [[min(e.half_width or 0.0, 0.9 * e.mean) for e in y], [e.half_width or 0.0 for e in y]]
    if any(xerr) or any(yerr[1]):   # error bars are collections, not lines: one line per curve
        ax.errorbar(xs, ys, xerr=xerr, yerr=yerr, fmt="none", ecolor=line.get_color(),
                    alpha=0.35, capsize=0, linewidth=1)


def plot_sweep_points(rows: list[dict], param_keys: Sequence[str], base: Path,
                      title: str, formats: tuple[str, ...] = FORMATS) -> list[Path]:
    return save_figure(sweep_points_figure(rows, param_keys, title), base, formats)


def sweep_points_figure(rows: list[dict], param_keys: Sequence[str], title: str):
    """Grouped bars: one group per sweep point, one bar per scheduler, mean over seeds ± 95%."""
    plt = pyplot()
    finished = [r for r in rows if not r.get("error")]
    points = list(dict.fromkeys(point_label(r, param_keys, "\n") for r in finished))
    schedulers = list(dict.fromkeys(r["scheduler"] for r in finished))
    fig, axes = plt.subplots(len(POINT_METRICS), 1, figsize=(max(8, 1.3 * len(points) + 2), 10),
                             sharex=True)
    width = 0.8 / max(1, len(schedulers))
    for ax, (metric, ylabel) in zip(axes, POINT_METRICS):
        for j, scheduler in enumerate(schedulers):
            est = [_point_estimate(finished, param_keys, p, scheduler, metric) for p in points]
            errors = [e[1] for e in est]
            ax.bar(np.arange(len(points)) + j * width, [e[0] for e in est], width,
                   yerr=errors if any(errors) else None, label=scheduler, capsize=2)
        ax.set(ylabel=ylabel)
        ax.grid(alpha=0.3, axis="y")
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
