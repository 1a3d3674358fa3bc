"""``kind: constant`` arrivals (the vLLM conventions: simulator/workload/arrivals.py)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from cost_models.options import OPTIONS_CONFIG
from simulator.workload.arrivals import RatePerS, RenewalArrivals, Timing, check_duration, check_n


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

    def gaps_s(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.full(n, 1.0 / self.rate)

    def arrival_times_s(self, n: int, rng: np.random.Generator) -> np.ndarray:
        check_n(n)
        # k/r rather than a running sum: no drift, and the newer last arrival is N/r exactly.
        return np.arange(self._first_index, self._first_index + n, dtype=np.float64) / self.rate

    def arrival_times_until_s(self, duration_s: float, rng: np.random.Generator) -> np.ndarray:
        check_duration(duration_s)
        stop = self._first_index + math.floor(duration_s * self.rate) + 2
        times = np.arange(self._first_index, stop, dtype=np.float64) / self.rate
        return times[times <= duration_s]
