"""The decode cohort's step end times, and what a member reads from them when it leaves.

A member's token times are the ends of the cohort steps it took part in: its first and last,
the sum of its squared gaps (differences of a running sum over the steps) and its largest gap
(from a stack of the gaps larger than every later one). Steps before the oldest member joined are
forgotten now and then, so memory does not grow with the run.
"""
from __future__ import annotations

import math
from bisect import bisect_left
from operator import sub

_KEEP_STEPS = 4096   # steps recorded past the last forgetting before the next


class StepEnds:
    def __init__(self):
        # Per cohort step g >= first: its end time, and the running sum of squared gaps
        # ends[g] - ends[g - 1].
        self.first = 0
        self.ends: list[float] = []
        self.sq_prefix: list[float] = [0.0]
        # The steps whose gap is larger than every later gap, and those gaps (decreasing): the
        # largest gap since step a is the first entry at or after a. Below them a sentinel
        # (step -1, an infinite gap) that no gap displaces.
        self._max_steps: list[int] = [-1]
        self._max_gaps: list[float] = [math.inf]
        self._forget_at = _KEEP_STEPS

    def record(self, g: int, now_s: float) -> bool:
        """Step g, the one after the last recorded, ended at now_s. Its gap goes onto the stack
        of gaps larger than every later one, where the entries it is no smaller than leave
        (the top replaced in place, the usual case). Returns whether enough steps were recorded
        since the last forgetting to forget again (``forget_before``)."""
        ends = self.ends
        if ends:   # the first step ever has no gap
            gap = now_s - ends[-1]
            self.sq_prefix.append(self.sq_prefix[-1] + gap * gap)
            max_steps, max_gaps = self._max_steps, self._max_gaps
            if max_gaps[-1] <= gap:
                max_gaps[-1] = gap
                max_steps[-1] = g
                while max_gaps[-2] <= gap:
                    del max_gaps[-2], max_steps[-2]
            else:
                max_steps.append(g)
                max_gaps.append(gap)
        ends.append(now_s)
        return len(ends) > self._forget_at

    def since(self, g: int) -> list[float]:
        """The ends of steps g onwards."""
        return self.ends[g - self.first:]

    def tokens(self, g0: int, g: int, keep_gaps: bool) -> tuple:
        """What a member took from steps g0 .. g - 1, one token each (as Request.record_tokens
        takes it): its first and last token times, the sum of its squared gaps, its largest
        gap (0.0 with one token) and its gaps (empty unless ``keep_gaps``)."""
        j0, j = g0 - self.first, g - 1 - self.first   # list indices
        ends = self.ends
        later_max = self._max_gaps[bisect_left(self._max_steps, g0 + 1)] if j > j0 else 0.0
        gaps = map(sub, ends[j0 + 1:j + 1], ends[j0:j]) if keep_gaps else ()
        return ends[j0], ends[j], self.sq_prefix[j] - self.sq_prefix[j0], later_max, gaps

    def forget_before(self, oldest: int) -> None:
        """Forget the steps before step ``oldest``: no member reads them."""
        drop = oldest - self.first
        if drop > 0:
            del self.ends[:drop], self.sq_prefix[:drop]
            self.first = oldest
            stale = bisect_left(self._max_steps, oldest)
            del self._max_steps[1:stale], self._max_gaps[1:stale]   # the sentinel stays
        self._forget_at = len(self.ends) + _KEEP_STEPS
