"""``kind: uniform`` lengths."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from cost_models.options import OPTIONS_CONFIG
from simulator.workload.lengths import PositiveInt, require_int


@dataclass(frozen=True)
class UniformLength:
    """Integers uniform on [low, high], both inclusive."""

    kind: Literal["uniform"] = field(default="uniform", kw_only=True)
    low: PositiveInt
    high: PositiveInt
    __pydantic_config__ = OPTIONS_CONFIG

    def __post_init__(self) -> None:
        require_int("UniformLength", "low", self.low, 1)
        require_int("UniformLength", "high", self.high, self.low)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(self.low, self.high + 1, size=n, dtype=np.int64)
