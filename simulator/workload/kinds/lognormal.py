"""``kind: lognormal`` lengths."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Literal

import numpy as np

from cost_models.options import OPTIONS_CONFIG, Constraint
from simulator.workload.lengths import PositiveInt, invalid, require_int


@dataclass(frozen=True)
class LognormalLength:
    """``median * exp(sigma * Z)``, rounded half-to-even (``np.rint``), then clipped to [min, max]."""

    kind: Literal["lognormal"] = field(default="lognormal", kw_only=True)
    median: Annotated[float, Constraint(strict=True, gt=0, allow_inf_nan=False)]
    sigma: Annotated[float, Constraint(strict=True, ge=0, allow_inf_nan=False)]
    min: PositiveInt = 1
    max: PositiveInt | None = None
    __pydantic_config__ = OPTIONS_CONFIG

    def __post_init__(self) -> None:
        if not (math.isfinite(self.median) and self.median > 0):
            raise invalid("LognormalLength.median", self.median, "a finite number > 0")
        if not (math.isfinite(self.sigma) and self.sigma >= 0):
            raise invalid("LognormalLength.sigma", self.sigma, "a finite number >= 0")
        require_int("LognormalLength", "min", self.min, 1)
        if self.max is not None:
            require_int("LognormalLength", "max", self.max, self.min)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        draws = np.rint(rng.lognormal(math.log(self.median), self.sigma, size=n))
        upper = np.inf if self.max is None else self.max
        return np.clip(draws, self.min, upper).astype(np.int64)
