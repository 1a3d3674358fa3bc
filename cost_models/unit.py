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

    def decode_steps_time_s(self, num_seqs: int, context_sum: int, longest: int,
                            num_steps: int) -> list[float]:
        """step_time_s of a run of decode steps (cost_models.base): no prefill, the fixed time."""
        return [self.fixed_step_time_s] * num_steps


MAX_STEP_TIME_S = 3600.0   # an hour a step: beyond it a run's clock outgrows float precision


def _check_positive(field: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not 0 < value <= MAX_STEP_TIME_S:
        raise ValueError(f"{field}: {value!r} is not allowed; must be a positive number of seconds "
                         f"<= {MAX_STEP_TIME_S:g}")
