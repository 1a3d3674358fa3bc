"""The one interface every step-cost model implements."""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from cost_models.batch_shape import BatchShape


@runtime_checkable
class StepCostModel(Protocol):
    """Duration of one forward pass (GPU work plus the engine's per-step CPU overhead)."""

    def step_time_s(self, shape: BatchShape) -> float: ...


# A decode step's duration as the terms a model returns from ``decode_step_terms(num_seqs,
# longest)``: (base, a, b, q, c1, c2, c3), the step taking
#     (((base + max(a * pairs, b * pairs + q)) + c1) + c2) + c3
# seconds, pairs = the rows' total context + num_seqs. Each model groups its own sums so (float
# addition is not associative), and every path that prices a decode step (the model's step_time_s,
# decode_step_ends, a decode cohort's run) evaluates this one expression, so all agree to the bit.


def decode_step_s(terms: tuple, pairs: int) -> float:
    """One decode step's time from its terms; ``pairs``: the rows' total context + rows."""
    base, a, b, q, c1, c2, c3 = terms
    return (((base + max(a * pairs, b * pairs + q)) + c1) + c2) + c3


def decode_step_ends_from_terms(terms: tuple, num_seqs: int, context_sum: int, context_step: int,
                                now_s: float, num_steps: int, next_arrival_s: float) -> list[float]:
    """The clock after each of up to ``num_steps`` decode steps from ``now_s`` (step i over
    context_sum + i * context_step), each step's time added in turn as SimPy adds it; none
    starts at or after next_arrival_s. decode_step_s, written out: the loop of every run of
    decode steps priced beforehand."""
    base, a, b, q, c1, c2, c3 = terms
    pairs = context_sum + num_seqs
    ends = []
    for _ in range(num_steps):
        if now_s >= next_arrival_s:
            break
        now_s = now_s + (((base + max(a * pairs, b * pairs + q)) + c1) + c2 + c3)
        ends.append(now_s)
        pairs += context_step
    return ends
