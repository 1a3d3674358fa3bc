"""Sarathi-Serve stall-free batching: decodes first, then prefill chunks up to the budget (§4)."""
from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter

from simulator.batch import Batch
from simulator.cohort_step import CohortStep
from simulator.request import Request
from simulator.schedulers.base import Scheduler
from simulator.schedulers.options import Bool, Fraction, SchedulerOptions, options_config
from simulator.schedulers.registry import register_scheduler


_ARRIVAL = attrgetter("arrival_s")


@options_config
@dataclass(frozen=True)
class SarathiOptions(SchedulerOptions):
    watermark: Fraction = 0.01           # can_allocate keeps 1% of blocks free


@register_scheduler("sarathi", defaults={"max_num_seqs": 128, "max_num_batched_tokens": 512},
                    description="Sarathi-Serve: every decode first, then chunks of prompts up to "
                    "the token budget (chunk_size); whole-prompt blocks at admission")
class SarathiScheduler(Scheduler):
    family = "chunked_prefill"
    Options = SarathiOptions
    cohort_leads_running = False   # every decode goes first, whatever its place

    def check_config(self) -> None:
        self.check_token_budget(chunked_prefill=True)  # decodes never stall
        self._watermark_blocks = int(self.options.watermark * self.kv.num_total_blocks)

    def schedule(self, now_s: float) -> Batch | CohortStep:
        self.running.sort(key=_ARRIVAL)  # oldest first (§4 step 1)
        if self.cohort is not None:
            step = self._cohort_step(now_s)
            if step is not None:
                return step
        batch = Batch()
        # A cohort's members decode as one block of rows; the others are asked again after the
        # decodes, which may have preempted some or dissolved the cohort.
        others = self.non_members()
        num_members = len(self.cohort.members) if self.cohort is not None else 0
        budget = self.options.max_num_batched_tokens - self._schedule_decodes(batch, others)
        if batch.num_preempted or (self.cohort is not None and len(self.cohort.members) != num_members):
            others = self.non_members()   # a preemption or a dissolved cohort changed them
        budget = self._schedule_partial_prefills(batch, budget, others)
        self._schedule_new(batch, budget, now_s)
        return batch

    def _cohort_step(self, now_s: float) -> CohortStep | Batch | None:
        """schedule() when every running request but at most one is a cohort member, the one
        being a prompt chunked at an earlier step (then nothing waits) or none (then one request
        waits): the members' rows (their blocks free), then the chunk or the admission, as a
        CohortStep (a Batch of the rows alone when neither fits). None, with nothing changed,
        in every other case: schedule() goes request by request."""
        cohort, running, waiting = self.cohort, self.running, self.waiting
        members = cohort.members
        num_others = len(running) - len(members)
        if num_others > 1 or len(waiting) != (0 if num_others else 1):
            return None
        prefill = cohort.outside(running)[0] if num_others else None
        if prefill is not None and (prefill.num_output_tokens > 0 and prefill.num_prompt_tokens
                                    + prefill.num_output_tokens - prefill.num_computed_tokens <= 1):
            return None   # a decoder outside the cohort (it was dissolved): one by one
        budget, rows = self.options.max_num_batched_tokens, None
        if members:
            if not cohort.begin_step():   # no decoder outside it: no block to reserve
                return None
            rows = cohort.decode_rows()
            budget -= len(members)
        if budget > 0 and prefill is not None:   # _schedule_partial_prefills for the one
            n = prefill.num_prompt_tokens + prefill.num_output_tokens - prefill.num_computed_tokens
            return CohortStep.scheduling(rows, prefill, n if n < budget else budget)
        if budget > 0 and prefill is None and len(running) < self.options.max_num_seqs:
            request = waiting[0]   # _schedule_new for the one
            headroom = self._watermark_blocks
            if self.kv.allocate_up_to(request, request.num_tokens, headroom_blocks=headroom):
                waiting.popleft()
                self.admit(request, now_s)
                n = request.num_tokens
                return CohortStep.scheduling(rows, request, n if n < budget else budget)
        batch = Batch()   # the members' decodes only
        batch.cohort_rows = rows
        return batch

    def admission_headroom_blocks(self) -> int:
        return self._watermark_blocks

    def admission_blocked(self) -> bool:
        o = self.options
        if (not self.waiting or len(self.running) >= o.max_num_seqs
                or o.max_num_batched_tokens - len(self.running) <= 0):
            return True
        headroom = self._watermark_blocks  # refused now: refused later
        head = self.waiting[0]
        return not self.kv.can_fit(head, head.num_tokens, headroom_blocks=headroom)

    def keeps_cohort(self) -> bool:
        return True

    def _schedule_decodes(self, batch: Batch, others: list[Request]) -> int:
        # Requests still in their prompt are skipped (Request.is_prefill, inlined).
        decoders = [r for r in others
                    if r.num_prompt_tokens + r.num_output_tokens - r.num_computed_tokens <= 1
                    and r.num_output_tokens > 0]
        return self.schedule_decodes_with_cohort(batch, decoders)

    def _schedule_partial_prefills(self, batch: Batch, budget: int, others: list[Request]) -> int:
        for request in others:           # cohort members are decoders: never a prefill
            if budget <= 0:
                break
            # Request.is_prefill and num_remaining_tokens, inlined (every step passes here)
            remaining = request.num_prompt_tokens + request.num_output_tokens - request.num_computed_tokens
            if (remaining > 1 or request.num_output_tokens == 0) and request not in batch:
                n = remaining if remaining < budget else budget   # min(), without the builtin's call
                self.schedule_tokens(batch, request, n)  # blocks were allocated at admission
                budget -= n
        return budget

    def _schedule_new(self, batch: Batch, budget: int, now_s: float) -> None:
        if not self.waiting:
            return
        headroom = self._watermark_blocks
        while self.waiting and budget > 0 and len(self.running) < self.options.max_num_seqs:
            request = self.waiting[0]
            # can_allocate: the whole prompt (plus outputs when resuming) and the watermark.
            if not self.kv.allocate_up_to(request, request.num_tokens, headroom_blocks=headroom):
                break
            self.waiting.popleft()
            self.admit(request, now_s)
            n = request.num_tokens
            if n > budget:   # min(), without the builtin's call
                n = budget
            self.schedule_tokens(batch, request, n)
            budget -= n
