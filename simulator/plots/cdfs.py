"""Latency CDFs per scheduler: TTFT, TPOT and end-to-end latency, from each run's RunSeries."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from simulator.results.decimate import cdf_points
from simulator.plots.figures import FORMATS, SLO_LABEL_PREFIX, SLO_STYLE, new_figure, save_figure
from simulator.plots.run_series import RunSeries

PANELS = (("ttft_ms", "TTFT (ms)", "ttft"), ("tpot_ms", "TPOT (ms)", "tpot"),
          ("e2el_ms", "end-to-end latency (ms)", "e2el"))


def plot_latency_cdfs(series: Sequence[RunSeries], base: Path, title: str,
                      slos_ms: dict[str, float] | None = None,
                      formats: tuple[str, ...] = FORMATS) -> list[Path]:
    return save_figure(latency_cdfs_figure(series, title, slos_ms), base, formats)


def latency_cdfs_figure(series: Sequence[RunSeries], title: str,
                        slos_ms: dict[str, float] | None = None):
    fig = new_figure(figsize=(15, 4.5))
    axes = fig.subplots(1, 3)
    for ax, (field, xlabel, slo_name) in zip(axes, PANELS):
        for s in series:
            values = getattr(s, field)
            if len(values):
                ax.plot(*cdf_points(values), label=s.label)
        slo = (slos_ms or {}).get(slo_name)
        if slo is not None:
            ax.axvline(slo, label=f"{SLO_LABEL_PREFIX} {slo_name.upper()} {slo:g} ms", **SLO_STYLE)
        ax.set(xlabel=xlabel, ylabel="fraction of requests", xscale="log",
               title=f"{xlabel.split(' (')[0]} CDF")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.suptitle(f"{title}: latency CDFs per scheduler")
    fig.tight_layout()
    return fig
