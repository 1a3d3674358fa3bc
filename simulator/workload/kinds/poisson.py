"""``kind: poisson`` arrivals (the vLLM conventions: simulator/workload/arrivals.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from cost_models.options import OPTIONS_CONFIG
from simulator.workload.arrivals import RatePerS, RenewalArrivals, Timing


@dataclass(frozen=True)
class PoissonArrivals(RenewalArrivals):
    """Exponential gaps. Drawn as vLLM does, as Gamma(shape=1): same numbers as ``GammaArrivals(r, 1)``."""

    kind: Literal["poisson"] = field(default="poisson", kw_only=True)
    rate: RatePerS
    timing: Timing = "newer"
    __pydantic_config__ = OPTIONS_CONFIG  # unknown keys are errors

    def gaps_s(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.gamma(shape=1.0, scale=1.0 / self.rate, size=n)
