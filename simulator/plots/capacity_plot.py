"""Capacity per scheduler (and scenario) as bars with their 95% interval over seeds."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from simulator.plots.figures import pyplot, save_figure


def plot_capacity(capacities, base: Path, unit: str, slos_ms: dict[str, float]) -> list[Path]:
    """``capacities``: SchedulerCapacity items (simulator/sweep/capacity.py), drawn in order."""
    return save_figure(capacity_figure(capacities, unit, slos_ms), base)


def capacity_figure(capacities, unit: str, slos_ms: dict[str, float]):
    plt = pyplot()
    scenarios = list(dict.fromkeys(c.scenario for c in capacities))
    colors = {name: f"C{i}" for i, name in enumerate(scenarios)}
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(capacities) + 3), 5))
    x = np.arange(len(capacities))
    for xi, c in zip(x, capacities):
        ax.bar(xi, c.estimate.mean, yerr=c.estimate.half_width or 0.0, capsize=4, alpha=0.8,
               color=colors[c.scenario], label=c.scenario)
        seeds = [r.capacity for r in c.per_seed]   # every seed's own answer: the spread shows
        ax.scatter(np.full(len(seeds), xi), seeds, color="black", s=10, zorder=3)
    ax.set_xticks(x, [c.scheduler for c in capacities])
    ax.set(ylabel=f"capacity ({unit})",
           title="highest load meeting " + ", ".join(f"{k} <= {v:g}" for k, v in slos_ms.items()))
    ax.grid(alpha=0.3, axis="y")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig
