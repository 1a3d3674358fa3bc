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

Trace replay (``kind: trace``) is ``TraceArrivals``, with the trace files (simulator/workload/traces.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Literal

import numpy as np

from cost_models.options import OPTIONS_CONFIG, Constraint
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


def _check_n(n: int) -> None:
    if int(n) != n or n < 0:
        raise invalid("num_requests", n, "an integer >= 0")


def _check_duration(duration_s: float) -> None:
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
    """Shared times-from-gaps logic; subclasses define ``rate``, ``timing`` and ``gaps_s`` (or
    override both arrival methods)."""

    rate: float
    timing: Timing

    def __post_init__(self) -> None:
        _check_rate(type(self).__name__, self.rate)
        _check_timing(type(self).__name__, self.timing)

    def gaps_s(self, n: int, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def arrival_times_s(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Release times of ``n`` requests in seconds (sorted float64)."""
        _check_n(n)
        if n == 0:
            return np.zeros(0)
        return _times_from_gaps(self.gaps_s(n, rng), self.rate, self.timing)

    def arrival_times_until_s(self, duration_s: float, rng: np.random.Generator) -> np.ndarray:
        """Release times in [0, duration_s] from raw (never rescaled) gaps."""
        _check_duration(duration_s)
        expected = self.rate * duration_s
        chunk = int(expected + 6.0 * math.sqrt(expected)) + 16  # usually one draw suffices
        gaps = self.gaps_s(chunk, rng)
        while float(np.sum(gaps)) <= duration_s:
            gaps = np.concatenate((gaps, self.gaps_s(chunk, rng)))
        cumulative = np.cumsum(gaps)
        if self.timing == "older":
            cumulative = np.concatenate(([0.0], cumulative[:-1]))
        return cumulative[cumulative <= duration_s]


@dataclass(frozen=True)
class PoissonArrivals(RenewalArrivals):
    """Exponential gaps. Drawn as vLLM does, as Gamma(shape=1): same numbers as ``GammaArrivals(r, 1)``."""

    kind: Literal["poisson"] = field(default="poisson", kw_only=True)
    rate: RatePerS
    timing: Timing = "newer"
    __pydantic_config__ = OPTIONS_CONFIG  # unknown keys are errors

    def gaps_s(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.gamma(shape=1.0, scale=1.0 / self.rate, size=n)


@dataclass(frozen=True)
class GammaArrivals(RenewalArrivals):
    """Gamma gaps: ``--request-rate r --burstiness b`` (b < 1 burstier than Poisson, b > 1 smoother)."""

    kind: Literal["gamma"] = field(default="gamma", kw_only=True)
    rate: RatePerS
    burstiness: Annotated[float, Constraint(strict=True, gt=0, allow_inf_nan=False)] = 1.0
    timing: Timing = "newer"
    __pydantic_config__ = OPTIONS_CONFIG  # unknown keys are errors

    def __post_init__(self) -> None:
        super().__post_init__()
        b = self.burstiness
        if not (isinstance(b, (int, float)) and math.isfinite(b) and b > 0):
            raise invalid("GammaArrivals.burstiness", b,
                          "a finite number > 0 (1 = Poisson; kind 'constant' spaces arrivals evenly)")

    def gaps_s(self, n: int, rng: np.random.Generator) -> np.ndarray:
        theta = 1.0 / (self.rate * self.burstiness)
        return rng.gamma(shape=self.burstiness, scale=theta, size=n)


@dataclass(frozen=True)
class ConstantArrivals(RenewalArrivals):
    """Evenly spaced arrivals, 1/r apart (vLLM's ``--burstiness inf``). Draws nothing from ``rng``."""

    kind: Literal["constant"] = field(default="constant", kw_only=True)
    rate: RatePerS
    timing: Timing = "newer"
    __pydantic_config__ = OPTIONS_CONFIG  # unknown keys are errors

    @property
    def _first_index(self) -> int:
        return 1 if self.timing == "newer" else 0  # newer: request 0 waits one gap too

    def arrival_times_s(self, n: int, rng: np.random.Generator) -> np.ndarray:
        _check_n(n)
        # k/r rather than a running sum: no drift, and the newer last arrival is N/r exactly.
        return np.arange(self._first_index, self._first_index + n, dtype=np.float64) / self.rate

    def arrival_times_until_s(self, duration_s: float, rng: np.random.Generator) -> np.ndarray:
        _check_duration(duration_s)
        stop = self._first_index + math.floor(duration_s * self.rate) + 2
        times = np.arange(self._first_index, stop, dtype=np.float64) / self.rate
        return times[times <= duration_s]


@dataclass(frozen=True)
class InfArrivals:
    """``--request-rate inf``: every request is released at t=0 (with ``max_concurrency`` C: C users)."""

    kind: Literal["inf"] = field(default="inf", kw_only=True)
    __pydantic_config__ = OPTIONS_CONFIG  # unknown keys are errors

    def arrival_times_s(self, n: int, rng: np.random.Generator) -> np.ndarray:
        _check_n(n)
        return np.zeros(n)

    def arrival_times_until_s(self, duration_s: float, rng: np.random.Generator) -> np.ndarray:
        raise ValueError("duration_s: not allowed with arrival kind 'inf' (unbounded request count); "
                         "give num_requests instead")
