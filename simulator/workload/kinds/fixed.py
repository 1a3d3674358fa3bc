"""``kind: fixed`` lengths."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from cost_models.options import OPTIONS_CONFIG
from simulator.workload.lengths import PositiveInt, require_int


@dataclass(frozen=True)
class FixedLength:
    """Every request gets ``value`` tokens. Draws nothing."""

    kind: Literal["fixed"] = field(default="fixed", kw_only=True)
    value: PositiveInt
    __pydantic_config__ = OPTIONS_CONFIG

    def __post_init__(self) -> None:
        require_int("FixedLength", "value", self.value, 1)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.full(n, self.value, dtype=np.int64)
