"""Whether a run reached steady state: the question a capacity answer rests on.

A rate is sustainable when, once the start-up transient is over, requests finish as fast as they
arrive and the waiting queue stops growing. Both are read over the second half of the arrival
window [T/2, T] (T: the last arrival), where a run long enough has left its empty-engine start
behind: the offered rate is the arrivals in that window per second, the achieved rate the
completions in it, and the queue's growth the least-squares slope of the number waiting (arrived,
not yet admitted) sampled across it. A run is steady when the achieved rate is within ``rel_tol``
of the offered one and the queue grows by less than ``rel_tol`` of the offered rate. A short run
at an unsustainable rate can meet latency SLOs before its queue has had time to build; this is
what tells it apart.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STEADY_REL_TOL = 0.05   # the relative width a capacity search stops at, by default
_QUEUE_SAMPLES = 64     # points of the waiting queue the slope is fitted to


@dataclass(frozen=True)
class SteadyState:
    offered_rate: float | None     # req/s arriving over [T/2, T]; None: no arrival window
    achieved_rate: float | None    # req/s finishing over [T/2, T]
    queue_growth_per_s: float      # slope of the waiting queue over [T/2, T]
    steady: bool

    def fields(self) -> dict:
        """The summary's figures (JSON-ready)."""
        return {"offered_request_rate": self.offered_rate,
                "achieved_request_rate": self.achieved_rate,
                "waiting_growth_per_s": self.queue_growth_per_s, "steady_state": self.steady}


def steady_state(arrival_s: np.ndarray, scheduled_s: np.ndarray, finish_s: np.ndarray,
                 rel_tol: float = STEADY_REL_TOL) -> SteadyState:
    """From every request's arrival (when it was sent), first admission and finish times (NaN
    where it never got there). All arrivals at one instant have no window: steady by definition (a closed batch)."""
    arrival_s = np.sort(_finite(arrival_s))
    end_s = float(arrival_s[-1]) if len(arrival_s) else 0.0
    start_s = end_s / 2
    width_s = end_s - start_s
    if not width_s > 0:
        return SteadyState(None, None, 0.0, True)
    offered = _count_in(arrival_s, start_s, end_s) / width_s
    achieved = _count_in(np.sort(_finite(finish_s)), start_s, end_s) / width_s
    growth = _queue_slope(arrival_s, np.sort(_finite(scheduled_s)), start_s, end_s)
    steady = achieved >= (1 - rel_tol) * offered and growth <= rel_tol * offered
    return SteadyState(offered, achieved, growth, bool(steady))


def _finite(values) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    return values[np.isfinite(values)]


def _count_in(sorted_times: np.ndarray, start_s: float, end_s: float) -> int:
    """Events in (start_s, end_s]."""
    return int(np.searchsorted(sorted_times, end_s, "right")
               - np.searchsorted(sorted_times, start_s, "right"))


def _queue_slope(arrival_s: np.ndarray, scheduled_s: np.ndarray, start_s: float,
                 end_s: float) -> float:
    """Requests per second the waiting queue (arrived minus admitted) grows by, fitted."""
    t = np.linspace(start_s, end_s, _QUEUE_SAMPLES)
    waiting = (np.searchsorted(arrival_s, t, "right")
               - np.searchsorted(scheduled_s, t, "right")).astype(np.float64)
    # Fitted in window widths: seconds can be too small to square (a window of 1e-298 s).
    width_s = end_s - start_s
    return float(np.polyfit((t - start_s) / width_s, waiting, 1)[0] / width_s)
