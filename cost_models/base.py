"""The one interface every step-cost model implements.

A model is one method, ``step_time_s(shape)``. It may add one method for a run of decode steps
with the same rows, ``decode_steps_time_s(num_seqs, context_sum, longest, num_steps)``: the
durations of steps i = 0 .. num_steps - 1 of ``num_seqs`` decodes over ``context_sum + i *
num_seqs`` tokens of context, the longest ``longest + i``. It must give the floats
``step_time_s`` gives for those steps; ``decode_steps_time_s`` below is that method built on
``step_time_s``, for models without their own. The engine decides when a run is priced
(simulator/fastpath/pricing.py).
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from cost_models.batch_shape import BatchShape


@runtime_checkable
class StepCostModel(Protocol):
    """Duration of one forward pass (GPU work plus the engine's per-step CPU overhead)."""

    def step_time_s(self, shape: BatchShape) -> float: ...


def decode_steps_time_s(model, num_seqs: int, context_sum: int, longest: int,
                        num_steps: int) -> list[float]:
    """The default run method: ``step_time_s`` of each decode step of the run."""
    step_time_s, rows = model.step_time_s, BatchShape.of_decode_rows
    return [step_time_s(rows(num_seqs, context_sum + i * num_seqs, longest + i))
            for i in range(num_steps)]
