"""Validation figures: latency CDFs and engine time series, measured vs simulated.

Measured engine series come at ticks (LLMServingSim's ``timeseries.csv``, or the iteration log's
per-second means); the simulated step log is resampled onto the same ticks as the time-weighted
mean over each tick's interval, idle time counting as zero (an idle engine holds nothing).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from simulator.results.timeseries import EngineSeries
from simulator.plots.figures import pyplot, save_figure
from simulator.validate.compare import RunLatencies
from simulator.validate.measured import MeasuredSeries

MEASURED_STYLE = {"color": "black", "linewidth": 1.6, "label": "measured"}
SIMULATED_STYLE = {"color": "tab:orange", "linewidth": 1.4, "linestyle": "--", "label": "simulated"}


def plot_latency_cdfs(measured: RunLatencies, simulated: RunLatencies, base: Path, title: str) -> list[Path]:
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    panels = (("TTFT (ms)", "ttft_s"), ("TPOT (ms)", "tpot_s"), ("E2E latency (ms)", "e2el_s"))
    for ax, (label, attr) in zip(axes, panels):
        for run, style in ((measured, MEASURED_STYLE), (simulated, SIMULATED_STYLE)):
            x = np.sort(getattr(run, attr)) * 1e3
            if x.size:
                ax.step(x, np.arange(1, x.size + 1) / x.size, where="post", **style)
        ax.set_xlabel(label)
        ax.set_ylabel("fraction of requests")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right")
    fig.suptitle(f"{title}: latency CDFs")
    fig.tight_layout()
    return save_figure(fig, base, formats=("png",))


def resample_steps(series: EngineSeries, name: str, ticks_s: np.ndarray, width_s: float) -> np.ndarray:
    """Time-weighted mean of one step-log column over (tick - width, tick] for each tick."""
    end = np.asarray(series.time_s, float)
    start = end - np.asarray(series.step_time_s, float)
    values = np.asarray(getattr(series, name), float)
    if not end.size:
        return np.zeros(len(ticks_s))
    # Cumulative area at each step's start and end; flat across idle gaps, linear within a step.
    area_end = np.cumsum(values * (end - start))
    area_start = area_end - values * (end - start)
    knots = np.column_stack([start, end]).ravel()
    areas = np.column_stack([area_start, area_end]).ravel()
    area = lambda t: np.interp(t, knots, areas, left=0.0, right=float(area_end[-1]))  # noqa: E731
    ticks = np.asarray(ticks_s, float)
    return (area(ticks) - area(ticks - width_s)) / width_s


def tick_width_s(ticks_s: np.ndarray) -> float:
    gaps = np.diff(np.asarray(ticks_s, float))
    return float(np.median(gaps)) if gaps.size else 1.0


def plot_engine_series(measured: MeasuredSeries | None, simulated: EngineSeries, base: Path,
                       title: str) -> list[Path]:
    """Running, waiting and KV usage over time; a measured panel is left out where not recorded."""
    plt = pyplot()
    panels = [("num_running", "running requests", measured.num_running if measured else None),
              ("num_waiting", "waiting requests", measured.num_waiting if measured else None),
              ("kv_usage", "KV cache usage (0-1)", measured.kv_usage if measured else None)]
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 8), sharex=True)
    if measured is not None:
        ticks, width = measured.time_s, tick_width_s(measured.time_s)
    else:
        width = 1.0
        ticks = np.arange(width, float(simulated.time_s[-1]) + width, width) if len(simulated) else np.zeros(0)
    for ax, (name, label, values) in zip(axes, panels):
        if values is not None:
            ax.plot(ticks, values, **MEASURED_STYLE)
        else:
            ax.text(0.01, 0.9, "measured: not recorded", transform=ax.transAxes, fontsize=8, color="gray")
        ax.plot(ticks, resample_steps(simulated, name, ticks, width), **SIMULATED_STYLE)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right")
    axes[-1].set_xlabel("time since the run's start (s)")
    source = measured.source if measured else "none"
    fig.suptitle(f"{title}: engine state\nmeasured: {source}; simulated: step log, time-weighted mean per tick",
                 fontsize=10)
    fig.tight_layout()
    return save_figure(fig, base, formats=("png",))
