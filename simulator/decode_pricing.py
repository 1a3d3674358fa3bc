"""Pricing runs of decode steps: the steps between two departures share their rows, so their
durations follow from (rows, total context, longest context) alone, and the clock is advanced
one step at a time as SimPy's would be. Shared by fast_forward.plan_decode_run and
DecodeCohort.plan_run."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cost_models.batch_shape import BatchShape

_VECTOR_STEPS = 8   # a numpy expression pays off over more steps than this (small arrays cost ~us)


@dataclass
class DecodeSegment:
    """Steps with the same rows: step i of a run prices ``rows`` decodes over
    context_sum + i * rows (plus padded rows at the longest context, longest + i). Shared by
    plan_decode_run and DecodeCohort.plan_run."""
    rows: int
    pad: int
    context_sum: int
    longest: int

    def ends(self, cost_model, context, last_step, now_s: float, first: int, stop: int,
             next_arrival_s: float) -> list[float]:
        """End times of steps first..stop-1, stopping before one that starts at or after the
        next arrival. Clock additions are sequential, as SimPy's."""
        many = getattr(cost_model, "decode_step_times_s", None)
        if many is not None and stop - first > _VECTOR_STEPS:
            first_s = self.price_one(cost_model, context, last_step, first)
            if math.isfinite(next_arrival_s) and first_s > 0:   # steps only get longer: this many at most
                stop = min(stop, first + int((next_arrival_s - now_s) / first_s) + 2)
        if many is not None and stop - first > _VECTOR_STEPS:
            steps = np.arange(first, stop)
            longest = self.longest + steps
            times = many(self.rows + self.pad, self.context_sum + steps * self.rows + self.pad * longest,
                         longest)
            if times is not None:
                clock = np.add.accumulate(np.concatenate(([now_s], times)))
                keep = int(np.searchsorted(clock[:-1], next_arrival_s, side="left"))
                return clock[1:keep + 1].tolist()
        out = []
        for i in range(first, stop):
            if now_s >= next_arrival_s:
                break
            now_s = now_s + self.price_one(cost_model, context, last_step, i)
            out.append(now_s)
        return out

    def price_one(self, cost_model, context, last_step, i: int) -> float:
        longest = self.longest + i
        price = getattr(cost_model, "decode_step_time_s", None)
        if price is not None:
            return price(self.rows + self.pad, self.context_sum + i * self.rows + self.pad * longest,
                         longest)
        alive = context[last_step >= i] + i   # a plug-in model with only step_time_s
        shape = BatchShape(np.ones(self.rows, np.int64), alive, np.ones(self.rows, bool))
        return cost_model.step_time_s(shape.with_padding_rows(self.pad))
