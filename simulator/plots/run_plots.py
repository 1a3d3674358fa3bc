"""Plots written by `servesim run`: latency CDFs and engine state over time, one line per scheduler."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_run(out_dir: Path, outputs) -> list[Path]:
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    for output in outputs:
        _latency_cdfs(axes[0], output)
        _engine_series(axes[1], output)
    for ax in axes.flat:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{out_dir.name}: latency and engine state per scheduler")
    fig.tight_layout()
    return [_save(fig, out_dir / "run_overview.png", plt)]


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


def _save(fig, path: Path, plt) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, dpi=110, format=path.suffix.lstrip("."))
    plt.close(fig)
    os.replace(tmp, path)
    return path
