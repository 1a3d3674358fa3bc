"""Engine state over time per scheduler: KV usage, running and waiting requests (steps.csv
columns, as a Prometheus scrape of vLLM would show them), with preemptions marked."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from simulator.plots.figures import pyplot, save_figure

PANELS = (("kv_usage", "KV cache usage (0-1)"), ("num_running", "running requests"),
          ("num_waiting", "waiting requests"))
MAX_POINTS = 20_000   # per line: more is invisible and bloats the SVG


def plot_engine_timeseries(traces: Sequence[tuple[str, dict[str, np.ndarray]]], base: Path,
                           title: str) -> list[Path]:
    return save_figure(engine_timeseries_figure(traces, title), base)


def engine_timeseries_figure(traces: Sequence[tuple[str, dict[str, np.ndarray]]], title: str):
    """``traces``: (scheduler label, steps.csv columns). One line per scheduler per panel."""
    plt = pyplot()
    fig, axes = plt.subplots(len(PANELS), 1, figsize=(12, 9), sharex=True)
    for label, cols in traces:
        keep = _thin(len(cols["end_s"]))
        for ax, (name, _) in zip(axes, PANELS):
            (line,) = ax.step(cols["end_s"][keep], cols[name][keep], where="post", label=label,
                              linewidth=1)
            if name == "kv_usage":
                _mark_preemptions(ax, cols, line.get_color(), label)
    for ax, (_, ylabel) in zip(axes, PANELS):
        ax.set(ylabel=ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    axes[-1].set_xlabel("time (s)")
    fig.suptitle(f"{title}: engine state over time (x: a step that preempted)")
    fig.tight_layout()
    return fig


def _thin(n: int) -> slice:
    return slice(None, None, max(1, n // MAX_POINTS))


def _mark_preemptions(ax, cols: dict[str, np.ndarray], color, label: str) -> None:
    hit = cols["num_preemptions"] > 0
    if hit.any():   # a scatter is a collection, so the lines stay one per scheduler
        ax.scatter(cols["end_s"][hit], cols["kv_usage"][hit], marker="x", s=18, color=color,
                   label=f"{label} preemptions ({int(cols['num_preemptions'].sum())})", zorder=3)
