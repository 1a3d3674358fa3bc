"""The headline picture: output throughput against TTFT and TPOT (p50 and p99), one curve per
scheduler, from sweep.csv; each point is the mean over seeds with its 95% interval both ways.

A sweep without a load axis (request rate or concurrency) has no curve to draw: its points are
shown as grouped bars instead (``plot_sweep_points``), one bar per scheduler.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from simulator.plots.figures import draw_slo, pyplot, save_figure
from simulator.sweep.stats import Curve, curves, mean_ci95, series_label, to_float

X_METRIC = "output_throughput"
PANELS = (("median_ttft_ms", "TTFT p50 (ms)", "ttft"), ("p99_ttft_ms", "TTFT p99 (ms)", "ttft"),
          ("median_tpot_ms", "TPOT p50 (ms)", "tpot"), ("p99_tpot_ms", "TPOT p99 (ms)", "tpot"))
POINT_METRICS = (("output_throughput", "output tokens/s"), ("p99_ttft_ms", "TTFT p99 (ms)"),
                 ("p99_tpot_ms", "TPOT p99 (ms)"), ("num_preemptions", "preemptions"))


def sweep_curves(rows: list[dict], load_key: str, param_keys: Sequence[str]) -> list[Curve]:
    return curves(rows, load_key, param_keys, [X_METRIC, *(m for m, _, _ in PANELS)])


def plot_throughput_latency(all_curves: list[Curve], base: Path, title: str,
                            slos_ms: dict[str, float] | None = None) -> list[Path]:
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    for ax, (metric, ylabel, slo_name) in zip(axes.flat, PANELS):
        for curve in all_curves:
            _draw_curve(ax, curve, metric)
        draw_slo(ax, (slos_ms or {}).get(slo_name), slo_name.upper())
        ax.set(xlabel="output throughput (tokens/s)", ylabel=ylabel, yscale="log",
               title=f"{ylabel.split(' (')[0]} vs throughput")
        ax.grid(alpha=0.3, which="both")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(f"{title}: throughput vs latency (mean over seeds, 95% interval)")
    fig.tight_layout()
    return save_figure(fig, base)


def _draw_curve(ax, curve: Curve, metric: str) -> None:
    x = curve.metrics[X_METRIC]
    y = curve.metrics[metric]
    xs, ys = [e.mean for e in x], [e.mean for e in y]
    (line,) = ax.plot(xs, ys, marker="o", markersize=4, label=curve.label)
    xerr = [e.half_width or 0.0 for e in x]
    yerr = [e.half_width or 0.0 for e in y]
    if any(xerr) or any(yerr):   # error bars are collections, not lines: one line per curve
        ax.errorbar(xs, ys, xerr=xerr, yerr=yerr, fmt="none", ecolor=line.get_color(),
                    alpha=0.6, capsize=0)


def plot_sweep_points(rows: list[dict], param_keys: Sequence[str], base: Path,
                      title: str) -> list[Path]:
    """Grouped bars: one group per sweep point, one bar per scheduler, mean over seeds ± 95%."""
    plt = pyplot()
    finished = [r for r in rows if not r.get("error")]
    points = list(dict.fromkeys(series_label({**r, "scheduler": ""}, param_keys).strip(" ()")
                                for r in finished))
    schedulers = list(dict.fromkeys(r["scheduler"] for r in finished))
    fig, axes = plt.subplots(len(POINT_METRICS), 1, figsize=(max(8, 1.2 * len(points) + 3), 11),
                             sharex=True)
    width = 0.8 / max(1, len(schedulers))
    for ax, (metric, ylabel) in zip(axes, POINT_METRICS):
        for j, scheduler in enumerate(schedulers):
            est = [_point_estimate(finished, param_keys, p, scheduler, metric) for p in points]
            ax.bar(np.arange(len(points)) + j * width, [e[0] for e in est], width,
                   yerr=[e[1] for e in est], label=scheduler, capsize=2)
        ax.set(ylabel=ylabel)
        ax.grid(alpha=0.3, axis="y")
    axes[0].legend(fontsize=8)
    axes[-1].set_xticks(np.arange(len(points)) + 0.4 - width / 2, points, rotation=20, ha="right",
                        fontsize=8)
    axes[-1].set_xlabel("sweep point")
    fig.suptitle(f"{title}: every sweep point (mean over seeds, 95% interval)")
    fig.tight_layout()
    return save_figure(fig, base)


def _point_estimate(rows, param_keys, point: str, scheduler: str, metric: str):
    values = [to_float(r.get(metric)) for r in rows if r["scheduler"] == scheduler
              and series_label({**r, "scheduler": ""}, param_keys).strip(" ()") == point]
    values = [v for v in values if v is not None]
    if not values:
        return 0.0, 0.0
    est = mean_ci95(values)
    return est.mean, est.half_width or 0.0
