"""A step of a decode cohort's rows plus one other request's tokens, without a Batch's lists.

Once the running decoders are a cohort, most steps that are not part of a multi-step advance
list one request next to the members' rows: an arrival admitted (vLLM V1, Sarathi), the rest of a
prompt chunked at the last step (Sarathi), or a lone prefill (vLLM V0, whose prefill steps hold no
decodes). A Batch for it holds four one-element lists, and its end goes through a loop over them;
this records the one request's figures instead. Each policy forms it from its own rules where
they give such a step (``_cohort_step``; the same admission code as its Batches) and it ends by
the same bookkeeping (``Scheduler.on_step_end``), so it is the same step: tests/test_cohort_step.py
compares whole runs with and without it.
"""
from __future__ import annotations

from cost_models.batch_shape import BatchShape
from simulator.request import Request


class CohortStep:
    __slots__ = ("cohort_rows", "request", "num_new_tokens", "num_context_tokens", "sample",
                 "num_preempted")

    def __init__(self, cohort_rows: tuple[int, int, int] | None, request: Request,
                 num_new_tokens: int, num_context_tokens: int, sample: bool):
        self.cohort_rows = cohort_rows      # (count, total context, longest) or None: no members
        self.request = request
        self.num_new_tokens = num_new_tokens
        self.num_context_tokens = num_context_tokens
        self.sample = sample                # the request samples at the end of this step
        self.num_preempted = 0              # formed only where the step preempts nobody

    @classmethod
    def scheduling(cls, cohort_rows: tuple[int, int, int] | None, request: Request,
                   num_new_tokens: int) -> "CohortStep":
        """The step of ``cohort_rows`` and ``num_new_tokens`` of ``request``, with C advanced
        at schedule time as Scheduler.schedule_tokens does (rule 1.2)."""
        computed = request.num_computed_tokens
        request.num_computed_tokens = computed + num_new_tokens
        return cls(cohort_rows, request, num_new_tokens, computed,
                   computed + num_new_tokens >= request.num_prompt_tokens
                   + request.num_output_tokens + request.num_output_placeholders)

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
