"""Orca iteration-level scheduling with KV reserved up front (semantics §5, trap 19)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from simulator.batch import Batch
from simulator.request import Request
from simulator.schedulers.base import Scheduler
from simulator.schedulers.options import SchedulerOptions, options_config
from simulator.schedulers.registry import register_scheduler


@options_config
@dataclass(frozen=True)
class OrcaOptions(SchedulerOptions):
    # What a new request reserves: the whole context (Sarathi's emulation) or exactly its own
    # prompt + max_tokens (Orca Alg. 1, where max_tokens is what the client asked for).
    reserve: Literal["max_model_len", "request"] = "max_model_len"


@register_scheduler("orca", description="Orca: iteration-level batching; whole prompts join the "
                    "running batch; KV reserved for the maximum length; no preemption")
class OrcaScheduler(Scheduler):
    family = "continuous"
    Options = OrcaOptions
    cohort_leads_running = False   # every running request advances each iteration

    def reserved_tokens(self, request: Request) -> int:
        if self.options.reserve == "request":
            return min(request.num_prompt_tokens + request.max_output_tokens, self.max_model_len)
        return self.max_model_len

    def blocks_to_finish(self, request: Request) -> int:
        return self.kv.blocks_for(self.reserved_tokens(request))

    def admission_blocked(self) -> bool:
        # Reservations are taken at admission, so decoding never changes the free blocks.
        return (not self.waiting or len(self.running) >= self.options.max_num_seqs
                or not self.kv.can_fit(self.waiting[0], self.reserved_tokens(self.waiting[0])))

    def keeps_cohort(self) -> bool:
        return True

    def schedule(self, now_s: float) -> Batch:
        batch = Batch()
        self.schedule_every_running(batch)   # every in-flight request advances one iteration
        self._select_new(batch, now_s)
        return batch

    def _select_new(self, batch: Batch, now_s: float) -> None:
        """Alg. 1 Select: arrival order, up to max_bs, break when the reservation does not fit."""
        while self.waiting and len(self.running) < self.options.max_num_seqs:
            request = self.waiting[0]
            if not self.kv.allocate_up_to(request, self.reserved_tokens(request)):
                break
            self.waiting.popleft()
            self.admit(request, now_s)
            self.schedule_tokens(batch, request, request.num_tokens)  # whole prompt, no chunking
