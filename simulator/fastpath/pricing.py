"""Pricing runs of decode steps: the engine's choice of how, the cost model's formula.

The steps of a run between two leavers have the same rows, so step i is priced as ``rows``
decodes over ``context_sum + i * rows`` tokens of context, the longest at ``longest + i``: with
the model's optional ``decode_steps_time_s`` where it has one (the same floats as its
``step_time_s``, tests/test_cost_model_contract.py), else with ``step_time_s`` step by step
(cost_models.base.decode_steps_time_s). A run is priced a few steps at a time, more each time
its rows stay the same (simulator/fastpath/cohort.py): most runs end within a few steps, at the
next arrival.
"""
from __future__ import annotations

from cost_models.base import decode_steps_time_s


class DecodePricer:
    def __init__(self, cost_model):
        self.cost_model = cost_model
        self._run_times = getattr(cost_model, "decode_steps_time_s", None)

    def step_times(self, rows: int, context_sum: int, longest: int, num_steps: int) -> list[float]:
        """Durations of the next ``num_steps`` decode steps."""
        if self._run_times is not None:
            return self._run_times(rows, context_sum, longest, num_steps)
        return decode_steps_time_s(self.cost_model, rows, context_sum, longest, num_steps)
