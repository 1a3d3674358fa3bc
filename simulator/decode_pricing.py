"""Pricing runs of decode steps: the steps between two departures share their rows, so their
durations follow from (rows, total context, longest context) alone, and the clock is advanced
one step at a time as SimPy's would be. Shared by fast_forward.plan_decode_run and
DecodeCohort.plan_run."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cost_models.batch_shape import BatchShape

# The model's own loop (decode_step_ends) prices up to this many steps of a segment; steps past
# them go as one numpy expression (decode_step_times_s) where the model has it. Callgrind on the
# 2k-request peer runs could not tell 24, 64, 256 and never vectorising apart (within 1.5%):
# numpy's fixed cost per call is repaid only by long segments (static batches, closed loops).
_LOOP_STEPS = 64


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
        next arrival. Clock additions are sequential, as SimPy's. The model's own loop prices
        the first _LOOP_STEPS steps (an arrival usually comes first); a longer rest goes by numpy
        where the model can."""
        out: list[float] = []
        loop = getattr(cost_model, "decode_step_ends", None)
        if loop is not None:
            n = min(stop - first, _LOOP_STEPS)
            head = self._loop_ends(loop, now_s, first, n, next_arrival_s)
            if head is not None:
                if len(head) < n or first + n == stop:
                    return head   # the next arrival or the segment's end came first
                out, now_s, first = head, head[-1], first + n
        if stop - first > _LOOP_STEPS and getattr(cost_model, "decode_step_times_s", None):
            rest = self._vector_ends(cost_model, context, last_step, now_s, first, stop, next_arrival_s)
            if rest is not None:
                out.extend(rest)
                return out
        if loop is not None:
            rest = self._loop_ends(loop, now_s, first, stop - first, next_arrival_s)
            if rest is not None:
                out.extend(rest)
                return out
        price = self._pricer(cost_model, context, last_step)
        for i in range(first, stop):
            if now_s >= next_arrival_s:
                break
            now_s = now_s + price(i)
            out.append(now_s)
        return out

    def _loop_ends(self, loop, now_s: float, first: int, num_steps: int,
                   next_arrival_s: float) -> list[float] | None:
        """The model's decode_step_ends for steps first..first+num_steps-1 (None: it declines)."""
        rows, pad, longest = self.rows + self.pad, self.pad, self.longest + first
        return loop(rows, self.context_sum + first * self.rows + pad * longest, rows, longest,
                    now_s, num_steps, next_arrival_s)

    def _vector_ends(self, cost_model, context, last_step, now_s: float, first: int, stop: int,
                     next_arrival_s: float) -> list[float] | None:
        """ends() as numpy expressions (None: the model cannot, or so few steps come before the
        next arrival that a loop is cheaper)."""
        first_s = self._pricer(cost_model, context, last_step)(first)
        if math.isfinite(next_arrival_s) and first_s > 0:   # steps only get longer: this many at most
            stop = min(stop, first + int((next_arrival_s - now_s) / first_s) + 2)
        if stop - first <= _LOOP_STEPS:
            return None
        steps = np.arange(first, stop)
        longest = self.longest + steps
        times = cost_model.decode_step_times_s(
            self.rows + self.pad, self.context_sum + steps * self.rows + self.pad * longest, longest)
        if times is None:
            return None
        clock = np.add.accumulate(np.concatenate(([now_s], times)))
        keep = int(np.searchsorted(clock[:-1], next_arrival_s, side="left"))
        return clock[1:keep + 1].tolist()

    def _pricer(self, cost_model, context, last_step):
        """Step i's duration: the model's decode_step_time_s, resolved once per segment."""
        rows, pad, context_sum, longest = self.rows, self.pad, self.context_sum, self.longest
        one = getattr(cost_model, "decode_step_time_s", None)
        if one is not None:
            return lambda i: one(rows + pad, context_sum + i * rows + pad * (longest + i), longest + i)

        def by_shape(i: int) -> float:   # a plug-in model with only step_time_s: the exact shape
            alive = context[last_step >= i] + i
            shape = BatchShape(np.ones(rows, np.int64), alive, np.ones(rows, bool))
            return cost_model.step_time_s(shape.with_padding_rows(pad))
        return by_shape
