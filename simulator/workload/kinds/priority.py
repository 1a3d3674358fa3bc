"""The ``priority:`` block: each request's priority drawn from a list."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Literal

import numpy as np

from cost_models.options import OPTIONS_CONFIG, Constraint
from simulator.workload.lengths import invalid


@dataclass(frozen=True)
class PriorityChoice:
    """Each request's priority drawn from ``values`` (vLLM: lower is served first), with optional
    ``weights``. A single value draws nothing."""

    kind: Literal["choice"] = field(default="choice", kw_only=True)
    values: tuple[int, ...]
    weights: tuple[Annotated[float, Constraint(strict=True, ge=0, allow_inf_nan=False)], ...] | None = None
    __pydantic_config__ = OPTIONS_CONFIG

    def __post_init__(self) -> None:
        if not self.values or not all(isinstance(v, int) and not isinstance(v, bool) for v in self.values):
            raise invalid("PriorityChoice.values", self.values, "a non-empty list of integers")
        weights = self.weights
        if weights is not None and (len(weights) != len(self.values) or not _valid_weights(weights)):
            raise invalid("PriorityChoice.weights", weights,
                          f"{len(self.values)} finite numbers >= 0 (one per value) with a positive sum")

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        values = np.asarray(self.values, dtype=np.int64)
        if values.size == 1:
            return np.full(n, values[0], dtype=np.int64)
        p = None if self.weights is None else np.asarray(self.weights, dtype=np.float64) / sum(self.weights)
        return rng.choice(values, size=n, p=p)


def _valid_weights(weights: tuple[float, ...]) -> bool:
    return all(math.isfinite(w) and w >= 0 for w in weights) and sum(weights) > 0
