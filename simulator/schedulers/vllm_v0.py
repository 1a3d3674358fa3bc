"""vLLM V0 (legacy): prefill-prioritised steps, whole-prompt allocation, recompute (semantics §3)."""
from __future__ import annotations

from dataclasses import dataclass

from simulator.batch import Batch
from simulator.cohort_step import CohortStep
from simulator.schedulers.base import Scheduler
from simulator.schedulers.options import Bool, Fraction, SchedulerOptions, options_config
from simulator.schedulers.registry import register_scheduler
from simulator.schedulers.sarathi import SarathiScheduler


@options_config
@dataclass(frozen=True)
class VllmV0Options(SchedulerOptions):
    enable_chunked_prefill: Bool = False
    watermark: Fraction = 0.01           # block manager: admit only if free - required >= 1%


@register_scheduler("vllm_v0", description="vLLM V0: a step is all-prefill or all-decode; "
                    "paged KV; whole-prompt blocks at admission; recompute preemption of the tail")
class VllmV0Scheduler(Scheduler):
    family = "continuous"
    Options = VllmV0Options
    cohort_leads_running = False   # a decode step gives every running request its token

    @classmethod
    def resolve_class(cls, options) -> type[Scheduler]:
        # V0 with chunked prefill mixes running chunks/decodes then new prefills under one budget
        # and allocates whole prompts at admission: Sarathi's rules (semantics §3 "Chunked prefill").
        return SarathiScheduler if options.enable_chunked_prefill else cls

    def check_config(self) -> None:
        self.check_token_budget(self.options.enable_chunked_prefill)
        self._watermark_blocks = int(self.options.watermark * self.kv.num_total_blocks)

    def max_request_tokens(self) -> int:
        # Prompts longer than min(max_model_len, max_num_batched_tokens) are ignored by V0.
        return min(self.max_model_len, self.options.max_num_batched_tokens)

    def admission_headroom_blocks(self) -> int:
        return self._watermark_blocks

    def schedule(self, now_s: float) -> Batch | CohortStep:
        if self.cohort is not None and len(self.waiting) == 1:
            step = self._cohort_step(now_s)
            if step is not None:
                return step
        batch = Batch()
        self._schedule_prefills(batch, now_s)
        if not batch:  # any admitted prefill makes the step prefill-only (trap 3)
            self._schedule_decodes(batch)
        return batch

    def _cohort_step(self, now_s: float) -> CohortStep | None:
        """schedule() when one request waits and is admitted: a prefill step of it alone (a
        prefill step holds no decodes, trap 3). None, with nothing changed, when it is not."""
        o, request = self.options, self.waiting[0]
        n = request.num_tokens  # a resumed request re-prefills prompt + outputs
        if len(self.running) + 1 > o.max_num_seqs or n > o.max_num_batched_tokens:
            return None
        if not self.kv.allocate_up_to(request, n, headroom_blocks=self._watermark_blocks):
            return None
        self.waiting.popleft()
        self.admit(request, now_s)
        return CohortStep.scheduling(None, request, n)

    def admission_blocked(self) -> bool:
        if not self.waiting or len(self.running) + 1 > self.options.max_num_seqs:
            return True
        head = self.waiting[0]  # refused now (budget or blocks): refused while decodes run
        return (head.num_tokens > self.options.max_num_batched_tokens or not self.kv.can_fit(
            head, head.num_tokens, headroom_blocks=self._watermark_blocks))

    def _schedule_prefills(self, batch: Batch, now_s: float) -> None:
        o = self.options
        num_tokens = 0
        while self.waiting:
            request = self.waiting[0]
            n = request.num_tokens  # a resumed request re-prefills prompt + outputs
            if len(self.running) + 1 > o.max_num_seqs or num_tokens + n > o.max_num_batched_tokens:
                break
            # Block manager: LATER (break) unless free - required >= watermark.
            if not self.kv.allocate_up_to(request, n, headroom_blocks=self._watermark_blocks):
                break
            self.waiting.popleft()
            self.admit(request, now_s)
            self.schedule_tokens(batch, request, n)
            num_tokens += n

    def keeps_cohort(self) -> bool:
        return True

    def _schedule_decodes(self, batch: Batch) -> None:
        # A decode step: every running request decodes; a block shortage preempts the tail.
        self.schedule_decodes_with_cohort(batch, list(self.non_members()))
