"""Open-loop arrival (release) times, as `vllm bench serve` produces them (semantics section 7 "Arrivals").

vLLM draws every inter-arrival gap from ``Gamma(shape=b, scale=1/(r*b))`` (b = ``--burstiness``, 1 is
Poisson): mean 1/r, coefficient of variation 1/sqrt(b). Two conventions turn gaps into times
(``timing``):

- ``"newer"``: `vllm/benchmarks/serve.py` ``get_request`` since vllm-project/vllm PR #21108 (merged
  2025-07-17, so the 0.10 releases onward; the exact first release was not checked). All N gaps are
  drawn up front and summed, so request 0 also waits its gap; without a ramp-up the cumulative times
  are then rescaled so the last arrival is exactly N/r.
- ``"older"``: vLLM up to 0.9.x (`benchmarks/benchmark_serving.py` and the first `vllm bench serve`): request
  0 is sent at t=0, then the loop sleeps one raw gap after each request. We still draw N gaps (the
  loop drew one after the last request too), so both conventions consume the generator identically.

vLLM seeds the legacy global ``np.random``; we draw from the passed ``numpy.random.Generator``, so the
distributions match but the individual numbers do not.

``arrival_times_until_s(duration_s, rng)`` serves ``duration_s`` workloads (no vLLM counterpart): raw
gaps are drawn in chunks until the cumulative time exceeds the duration, and the arrivals at or before
``duration_s`` are kept. N is unknown in advance, so the "newer" rescaling is not applied (only its
"first request waits its gap" part is).

The classes of the arrival kinds live in simulator/workload/kinds/, one module per kind.
"""
from __future__ import annotations

import math
from typing import Annotated, Literal

import numpy as np

from cost_models.options import Constraint
from simulator.workload.lengths import invalid

Timing = Literal["newer", "older"]
RatePerS = Annotated[float, Constraint(strict=True, gt=0, allow_inf_nan=False)]
_TIMINGS = ("newer", "older")


def _check_rate(owner: str, rate: float) -> None:
    if not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
        raise invalid(f"{owner}.rate", rate, "a finite number > 0 (requests/s)")


def _check_timing(owner: str, timing: str) -> None:
    if timing not in _TIMINGS:
        raise invalid(f"{owner}.timing", timing, f"one of {_TIMINGS}")


def check_n(n: int) -> None:
    if int(n) != n or n < 0:
        raise invalid("num_requests", n, "an integer >= 0")


def check_duration(duration_s: float) -> None:
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise invalid("duration_s", duration_s, "a finite number > 0")


def _times_from_gaps(gaps: np.ndarray, rate: float, timing: Timing) -> np.ndarray:
    """N gaps -> N sorted times under one of the two vLLM conventions."""
    cumulative = np.cumsum(gaps, dtype=np.float64)
    if timing == "older":
        return np.concatenate(([0.0], cumulative[:-1]))
    if cumulative.size == 0 or cumulative[-1] == 0.0:
        return cumulative  # vLLM skips the rescaling when the total delay is 0
    # Dividing first makes the last element 1.0 exactly, so the last arrival is exactly N/r.
    return cumulative / cumulative[-1] * (cumulative.size / rate)


class RenewalArrivals:
    """Shared times-from-gaps logic; subclasses define ``rate``, ``timing`` and ``gaps_s``."""

    rate: float
    timing: Timing

    def __post_init__(self) -> None:
        _check_rate(type(self).__name__, self.rate)
        _check_timing(type(self).__name__, self.timing)

    def gaps_s(self, n: int, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def arrival_times_s(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Release times of ``n`` requests in seconds (sorted float64)."""
        check_n(n)
        if n == 0:
            return np.zeros(0)
        return _times_from_gaps(self.gaps_s(n, rng), self.rate, self.timing)

    def arrival_times_until_s(self, duration_s: float, rng: np.random.Generator) -> np.ndarray:
        """Release times in [0, duration_s] from raw (never rescaled) gaps."""
        check_duration(duration_s)
        expected = self.rate * duration_s
        chunk = int(expected + 6.0 * math.sqrt(expected)) + 16  # usually one draw suffices
        gaps = self.gaps_s(chunk, rng)
        while float(np.sum(gaps)) <= duration_s:
            gaps = np.concatenate((gaps, self.gaps_s(chunk, rng)))
        cumulative = np.cumsum(gaps)
        if self.timing == "older":
            cumulative = np.concatenate(([0.0], cumulative[:-1]))
        return cumulative[cumulative <= duration_s]


def __getattr__(name: str):
    """``simulator.workload.arrivals.PoissonArrivals`` and its siblings still resolve (from kinds/)."""
    if name.endswith("Arrivals") and not name.startswith("_"):
        import simulator.workload
        return getattr(simulator.workload, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
