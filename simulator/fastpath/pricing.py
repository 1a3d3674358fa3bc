"""Pricing runs of decode steps: the engine's choice of how, the cost model's formula.

The steps of a run between two leavers have the same rows, so step i is priced as ``rows``
decodes over ``context_sum + i * rows`` tokens of context, the longest at ``longest + i``: with
the model's optional ``decode_steps_time_s`` where it has one (the same floats as its
``step_time_s``, tests/test_cost_model_contract.py), else with ``step_time_s`` step by step
(cost_models.base.decode_steps_time_s).
"""
from __future__ import annotations

import math

from cost_models.base import decode_steps_time_s
from cost_models.batch_shape import BatchShape


# Runs this short are priced whole: cheaper than bounding them by the first step's time.
_PRICE_AHEAD_STEPS = 8


class DecodePricer:
    def __init__(self, cost_model):
        self.cost_model = cost_model
        self._run_times = getattr(cost_model, "decode_steps_time_s", None)

    def step_times(self, rows: int, context_sum: int, longest: int, num_steps: int,
                   window_s: float) -> list[float]:
        """Durations of the next decode steps, up to ``num_steps``; about as many as fit in
        ``window_s`` (the time left before the next arrival, where the run stops: steps only get
        longer, so the first step's time bounds their number; a caller that needs more asks
        again)."""
        if num_steps > _PRICE_AHEAD_STEPS and math.isfinite(window_s):
            first_s = self.cost_model.step_time_s(BatchShape.of_decode_rows(rows, context_sum, longest))
            if first_s > 0:
                num_steps = min(num_steps, int(window_s / first_s) + 1)
        if self._run_times is not None:
            return self._run_times(rows, context_sum, longest, num_steps)
        return decode_steps_time_s(self.cost_model, rows, context_sum, longest, num_steps)
