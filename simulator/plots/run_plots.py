"""Plots written by `servesim run`: latency CDFs and engine state over time, one line per scheduler."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from simulator.plots.cdfs import LatencySamples, plot_latency_cdfs
from simulator.plots.engine_series import plot_engine_timeseries
from simulator.plots.figures import pyplot, save_figure
from simulator.plots.result_dir import ENGINE_TIMESERIES, LATENCY_CDFS


def plot_run(out_dir: Path, outputs) -> list[Path]:
    """``run_overview.png`` (the quick look), plus ``latency_cdfs`` and ``engine_timeseries``
    (PNG and SVG) as `servesim plot` draws them from the written files."""
    out_dir = Path(out_dir)
    paths = [_overview(out_dir, outputs)]
    paths += plot_latency_cdfs([LatencySamples.from_requests(o.label, o.result.requests)
                                for o in outputs], out_dir / LATENCY_CDFS, out_dir.name)
    paths += plot_engine_timeseries([(o.label, o.result.step_log.to_columns()) for o in outputs],
                                    out_dir / ENGINE_TIMESERIES, out_dir.name)
    return paths


def _overview(out_dir: Path, outputs) -> Path:
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    for output in outputs:
        _latency_cdfs(axes[0], output)
        _engine_series(axes[1], output)
    for ax in axes.flat:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{out_dir.name}: latency and engine state per scheduler")
    fig.tight_layout()
    return save_figure(fig, out_dir / "run_overview", formats=("png",))[0]


def _latency_cdfs(axes, output) -> None:
    reqs = [r for r in output.result.requests if r.finish_s is not None]
    ttft_ms = np.sort([(r.first_token_s - r.arrival_s) * 1e3 for r in reqs])
    e2e_ms = np.sort([(r.finish_s - r.arrival_s) * 1e3 for r in reqs])
    frac = np.arange(1, len(reqs) + 1) / max(1, len(reqs))
    axes[0].plot(ttft_ms, frac, label=output.label)
    axes[0].set(xlabel="TTFT (ms)", ylabel="fraction of requests", title="TTFT CDF", xscale="log")
    axes[1].plot(e2e_ms, frac, label=output.label)
    axes[1].set(xlabel="end-to-end latency (ms)", ylabel="fraction of requests",
                title="E2E latency CDF", xscale="log")


def _engine_series(axes, output) -> None:
    cols = output.result.step_log.to_columns()
    t = cols["end_s"]
    axes[0].step(t, cols["num_running"], where="post", label=f"{output.label} running")
    axes[0].set(xlabel="time (s)", ylabel="requests", title="running requests")
    axes[1].step(t, cols["kv_usage"], where="post", label=output.label)
    axes[1].set(xlabel="time (s)", ylabel="KV cache usage (0-1)", title="KV cache usage")
