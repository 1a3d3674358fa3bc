"""The one interface every step-cost model implements."""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from cost_models.batch_shape import BatchShape


@runtime_checkable
class StepCostModel(Protocol):
    """Duration of one forward pass (GPU work plus the engine's per-step CPU overhead)."""

    def step_time_s(self, shape: BatchShape) -> float: ...
