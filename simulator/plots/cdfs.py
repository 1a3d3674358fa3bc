"""Latency CDFs per scheduler: TTFT, TPOT and end-to-end latency, from a run or its requests.csv."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from simulator.metrics.summary import latencies_s
from simulator.plots.figures import SLO_LABEL_PREFIX, SLO_STYLE, pyplot, read_columns, save_figure

PANELS = (("ttft_ms", "TTFT (ms)", "ttft"), ("tpot_ms", "TPOT (ms)", "tpot"),
          ("e2el_ms", "end-to-end latency (ms)", "e2el"))


@dataclass(frozen=True)
class LatencySamples:
    """Per-request latencies of one scheduler's run (finished requests only)."""
    label: str
    ttft_ms: np.ndarray
    tpot_ms: np.ndarray   # requests with one output token have no TPOT
    e2el_ms: np.ndarray

    @classmethod
    def from_requests(cls, label: str, requests) -> "LatencySamples":
        triples = [t for t in (latencies_s(r) for r in requests) if t is not None]
        return cls(label, np.array([t[0] * 1e3 for t in triples]),
                   np.array([t[1] * 1e3 for t in triples if t[1] is not None]),
                   np.array([t[2] * 1e3 for t in triples]))

    @classmethod
    def from_requests_csv(cls, label: str, path: Path) -> "LatencySamples":
        cols = read_columns(path)
        return cls(label, *(_finite(cols[name]) for name in ("ttft_ms", "tpot_ms", "e2el_ms")))


def _finite(x: np.ndarray) -> np.ndarray:
    return x[np.isfinite(x)]


def plot_latency_cdfs(samples: Sequence[LatencySamples], base: Path, title: str,
                      slos_ms: dict[str, float] | None = None) -> list[Path]:
    return save_figure(latency_cdfs_figure(samples, title, slos_ms), base)


def latency_cdfs_figure(samples: Sequence[LatencySamples], title: str,
                        slos_ms: dict[str, float] | None = None):
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for ax, (field, xlabel, slo_name) in zip(axes, PANELS):
        for s in samples:
            values = np.sort(getattr(s, field))
            if len(values):
                ax.plot(values, np.arange(1, len(values) + 1) / len(values), label=s.label)
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
