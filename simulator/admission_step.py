"""The loaded engine's most common step, without a Batch's lists: a decode cohort's rows plus
the tokens of one request admitted from the waiting queue.

At high load every running request decodes as a member of the cohort, and nearly every step that
is not part of a multi-step advance is the one that admits the next arrival. A Batch for it holds
four one-element lists, and its end goes through a loop over them; this records the one request's
figures instead. The scheduler forms it by the same admission code as a Batch
(``VllmV1Scheduler._admit_head``) and ends it by the same bookkeeping (``Scheduler.on_step_end``),
so the step is the same step (tests/test_admission_step.py compares whole runs with and without).
"""
from __future__ import annotations

from cost_models.batch_shape import BatchShape
from simulator.request import Request


class AdmissionStep:
    __slots__ = ("cohort_rows", "request", "num_new_tokens", "num_context_tokens", "sample",
                 "num_preempted")

    def __init__(self, cohort_rows: tuple[int, int, int] | None, request: Request,
                 num_new_tokens: int, num_context_tokens: int, sample: bool):
        self.cohort_rows = cohort_rows      # (count, total context, longest) or None: no members
        self.request = request
        self.num_new_tokens = num_new_tokens
        self.num_context_tokens = num_context_tokens
        self.sample = sample                # the request samples at the end of this step
        self.num_preempted = 0              # admissions never preempt (rule 1.2 B7)

    def __bool__(self) -> bool:
        return True

    def shape(self) -> BatchShape:
        """BatchShape.from_lists of the one request and the rows, its work counts written out
        (work_counts_of for one listed sequence)."""
        n, c, sample = self.num_new_tokens, self.num_context_tokens, self.sample
        rows = self.cohort_rows or (0, 0, 0)
        shape = BatchShape([n], [c], [sample], rows)
        num_rows, rows_ctx, _ = rows
        if n == 1:   # one token: a decode
            shape._counts = (1 + num_rows, c + rows_ctx, 1 + num_rows, 0.0, 0, 0,
                             sample + num_rows, 1 + num_rows)
        else:
            shape._counts = (n + num_rows, rows_ctx, num_rows, float(n * c) + (float(n * n) + n) / 2,
                             c, 1, sample + num_rows, 1 + num_rows)
        return shape
