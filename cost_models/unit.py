"""The textbook toy: every step costs the same fixed time, so a whole prompt takes one step."""
from __future__ import annotations

import math
from dataclasses import dataclass

from cost_models.batch_shape import BatchShape


@dataclass(frozen=True)
class UnitCostModel:
    # Named fixed_step_time_s, not step_time_s: a field of that name would shadow the
    # StepCostModel method step_time_s(shape) on every instance.
    fixed_step_time_s: float = 1.0
    # A step holding any prefill (a sequence computing more than one token) costs this instead;
    # None keeps every step at fixed_step_time_s.
    prefill_step_time_s: float | None = None

    def __post_init__(self) -> None:
        _check_positive("cost_model.fixed_step_time_s", self.fixed_step_time_s)
        if self.prefill_step_time_s is not None:
            _check_positive("cost_model.prefill_step_time_s", self.prefill_step_time_s)

    def step_time_s(self, shape: BatchShape) -> float:
        if self.prefill_step_time_s is not None and shape.num_prefill_seqs > 0:
            return self.prefill_step_time_s
        return self.fixed_step_time_s

    def decode_step_time_s(self, num_seqs: int, context_sum: int, longest: int = 0) -> float:
        """An all-decode step (see RooflineCostModel.decode_step_time_s)."""
        return self.fixed_step_time_s

    def decode_step_terms(self, num_seqs: int, longest: int = 0) -> tuple:
        """cost_models.base's decode-step terms: the fixed time plus zeros (exact: x + 0.0 == x)."""
        return (self.fixed_step_time_s, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def _check_positive(field: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{field}: {value!r} is not a positive number of seconds")
