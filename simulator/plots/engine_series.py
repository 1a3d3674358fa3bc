"""Engine state over time per scheduler: KV usage, running and waiting requests (steps.csv
columns, as a Prometheus scrape of vLLM would show them), with preemptions marked."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from simulator.results.decimate import envelope, thin_events
from simulator.plots.figures import FORMATS, new_figure, save_figure
from simulator.plots.run_series import RunSeries

PANELS = (("kv_usage", "KV cache usage (0-1)"), ("num_running", "running requests"),
          ("num_waiting", "waiting requests"))


def plot_engine_timeseries(series: Sequence[RunSeries], base: Path, title: str,
                           formats: tuple[str, ...] = FORMATS) -> list[Path]:
    return save_figure(engine_timeseries_figure(series, title), base, formats)


def engine_timeseries_figure(series: Sequence[RunSeries], title: str):
    """One line per scheduler per panel (runs without steps are left out)."""
    fig = new_figure(figsize=(12, 9))
    axes = fig.subplots(len(PANELS), 1, sharex=True)
    for s in series:
        if not len(s.step_end_s):
            continue
        for ax, (name, _) in zip(axes, PANELS):
            (line,) = ax.step(*envelope(s.step_end_s, getattr(s, name)), where="post",
                              label=s.label, linewidth=1)
            if name == "kv_usage":
                _mark_preemptions(ax, s, line.get_color())
    for ax, (_, ylabel) in zip(axes, PANELS):
        ax.set(ylabel=ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    axes[-1].set_xlabel("time (s)")
    fig.suptitle(f"{title}: engine state over time (x: a step that preempted)")
    fig.tight_layout()
    return fig


def _mark_preemptions(ax, s: RunSeries, color) -> None:
    hit = thin_events(s.step_end_s, s.num_preemptions)
    if len(hit):   # a scatter is a collection, so the lines stay one per scheduler
        ax.scatter(s.step_end_s[hit], s.kv_usage[hit], marker="x", s=18, color=color,
                   label=f"{s.label} preemptions ({s.total_preemptions})", zorder=3)
