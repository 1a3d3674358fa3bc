"""Time series read off the step log: queue lengths and KV usage, and time-weighted means.

Each step's values describe the engine *during* that step (queues as left by its scheduling), so a
series is a step function: the value holds from the step's start to its end. Idle gaps between
steps (nothing to run) belong to no step.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np



@dataclass(frozen=True, eq=False, repr=False)
class EngineSeries:
    """Per-step engine state stamped at step-end times (what a Prometheus scrape would see)."""
    time_s: np.ndarray        # float64, end of each step
    step_time_s: np.ndarray   # float64, duration of each step (the weight of its values)
    num_running: np.ndarray   # int64, vllm:num_requests_running
    num_waiting: np.ndarray   # int64, vllm:num_requests_waiting
    kv_usage: np.ndarray      # float64 0..1, vllm:kv_cache_usage_perc

    @classmethod
    def from_columns(cls, cols) -> "EngineSeries":
        """From a step table's columns (StepTable.to_columns, or steps.csv read back)."""
        return cls(time_s=cols["end_s"], step_time_s=cols["end_s"] - cols["start_s"],
                   num_running=cols["num_running"], num_waiting=cols["num_waiting"],
                   kv_usage=cols["kv_usage"])

    def __len__(self) -> int:
        return len(self.time_s)

    def mean(self, name: str, over_s: float | None = None) -> float:
        """Time-weighted mean of one series (see ``time_weighted_mean`` for ``over_s``)."""
        if name not in ("num_running", "num_waiting", "kv_usage"):
            raise ValueError(f"series name: {name!r} must be num_running, num_waiting or kv_usage")
        return time_weighted_mean(self.step_time_s, getattr(self, name), over_s)


def time_weighted_mean(durations_s: np.ndarray, values: np.ndarray,
                       over_s: float | None = None) -> float:
    """Σ value·duration / Σ duration, or / ``over_s`` when given.

    ``over_s`` is the window the mean is over (e.g. the benchmark duration): time not covered by
    any step then counts as zero, which is right for queue lengths (an idle engine holds no
    requests), as Little's law needs. Returns 0.0 for an empty or zero-length window.
    """
    if over_s is not None and not over_s >= 0:
        raise ValueError(f"time_weighted_mean over_s: {over_s} must be >= 0")
    durations = np.asarray(durations_s, dtype=np.float64)
    # Not np.dot: BLAS sums in an order that depends on its threads and CPU, and a summary must
    # be the same bytes everywhere; numpy's own (pairwise) sum does not.
    weighted = float(np.sum(durations * np.asarray(values, dtype=np.float64)))
    total_s = float(durations.sum()) if over_s is None else float(over_s)
    return weighted / total_s if total_s > 0 else 0.0
