"""``kind: gamma`` arrivals (the vLLM conventions: simulator/workload/arrivals.py)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Literal

import numpy as np

from cost_models.options import OPTIONS_CONFIG, Constraint
from simulator.workload.arrivals import RatePerS, RenewalArrivals, Timing
from simulator.workload.lengths import invalid


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
