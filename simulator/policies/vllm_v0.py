"""vLLM V0 (legacy): prefill-prioritised steps, whole-prompt allocation, recompute (semantics §3)."""
from __future__ import annotations

from dataclasses import dataclass

from simulator.core.batch import Batch
from simulator.policies.base import Scheduler
from simulator.policies.options import Bool, Fraction, SchedulerOptions, options_config
from simulator.policies.registry import register_scheduler
from simulator.policies.sarathi import SarathiScheduler


@options_config
@dataclass(frozen=True)
class VllmV0Options(SchedulerOptions):
    enable_chunked_prefill: Bool = False
    watermark: Fraction = 0.01           # block manager: admit only if free - required >= 1%


@register_scheduler("vllm_v0", description="vLLM V0: a step is all-prefill or all-decode; "
                    "paged KV; whole-prompt blocks at admission; recompute preemption of the tail")
class VllmV0Scheduler(Scheduler):
    family = "continuous"
    checks_pool_at_startup = True
    Options = VllmV0Options

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

    def schedule(self, now_s: float, batch: Batch | None = None) -> Batch:
        batch = Batch() if batch is None else batch
        if self.decodes_running_next():
            # A decode step: every running request decodes; a block shortage preempts the tail.
            self.schedule_decodes(batch, list(self.running))
        else:
            self._schedule_prefills(batch, now_s)
        return batch

    def decodes_running_next(self) -> bool:
        """A step that admits a prefill is prefill-only: every decode stalls (trap 3)."""
        return not self._head_fits(0)

    def admission_blocked(self) -> bool:
        # Refused now (seats, budget or blocks): refused while decodes run.
        return not self._head_fits(0)

    def _head_fits(self, num_tokens: int) -> bool:
        """Whether the head of waiting is admitted next to ``num_tokens`` already admitted this
        step: a seat, the token budget, and its whole prompt's blocks above the watermark."""
        if not self.waiting:
            return False
        head, o = self.waiting.peek(), self.options
        n = head.num_tokens  # a resumed request re-prefills prompt + outputs
        return (self.num_running + 1 <= o.max_num_seqs and num_tokens + n <= o.max_num_batched_tokens
                and self.kv.can_fit(head, n, headroom_blocks=self._watermark_blocks))

    def _schedule_prefills(self, batch: Batch, now_s: float) -> None:
        num_tokens = 0
        while self._head_fits(num_tokens):
            request = self.waiting.pop()
            self.kv.allocate_up_to(request, request.num_tokens,
                                   headroom_blocks=self._watermark_blocks)
            self.admit(request, now_s)
            n = request.num_tokens
            batch.add(request, n)
            num_tokens += n
