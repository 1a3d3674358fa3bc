"""Sarathi-Serve stall-free batching: decodes first, then prefill chunks up to the budget (§4)."""
from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter

from simulator.core import rules
from simulator.core.batch import Batch
from simulator.policies.base import Scheduler
from simulator.policies.options import Fraction, SchedulerOptions, options_config
from simulator.policies.registry import register_scheduler

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

    def check_config(self) -> None:
        self.check_token_budget(chunked_prefill=True)  # decodes never stall
        self._watermark_blocks = int(self.options.watermark * self.kv.num_total_blocks)

    def admission_headroom_blocks(self) -> int:
        return self._watermark_blocks

    def schedule(self, now_s: float, batch: Batch | None = None) -> Batch:
        batch = Batch() if batch is None else batch
        self.running.sort(key=_ARRIVAL)  # oldest first (§4 step 1)
        decoders = [r for r in self.running if r.num_output_tokens > 0 and rules.tokens_wanted(r) <= 1]
        self.schedule_decodes(batch, decoders)   # every decode first (§4 step 2)
        budget = self.options.max_num_batched_tokens - batch.total_tokens
        budget = self._schedule_partial_prefills(batch, budget)
        self._schedule_new(batch, budget, now_s)
        return batch

    def admission_blocked(self) -> bool:
        o = self.options
        if (not self.waiting or self.num_running >= o.max_num_seqs
                or o.max_num_batched_tokens - self.num_running <= 0):
            return True
        head = self.waiting.peek()   # refused now: refused later
        return not self.kv.can_fit(head, head.num_tokens, headroom_blocks=self._watermark_blocks)

    def _schedule_partial_prefills(self, batch: Batch, budget: int) -> int:
        """§4 step 3: prompts chunked at earlier steps, oldest first (blocks were allocated at
        admission)."""
        for request in self.running:
            if budget <= 0:
                break
            wanted = rules.tokens_wanted(request)
            if (wanted > 1 or request.num_output_tokens == 0) and request not in batch:
                n = min(wanted, budget)
                batch.add(request, n)
                budget -= n
        return budget

    def _schedule_new(self, batch: Batch, budget: int, now_s: float) -> None:
        """§4 step 4: new requests FIFO while budget and seats are left; can_allocate asks for
        the whole prompt (plus outputs when resuming) and the watermark."""
        while self.waiting and budget > 0 and self.num_running < self.options.max_num_seqs:
            request = self.waiting.peek()
            if not self.kv.allocate_up_to(request, request.num_tokens,
                                          headroom_blocks=self._watermark_blocks):
                break
            self.waiting.pop()
            self.admit(request, now_s)
            n = min(request.num_tokens, budget)
            batch.add(request, n)
            budget -= n
