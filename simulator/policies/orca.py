"""Orca iteration-level scheduling with KV reserved up front (semantics §5, trap 19)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from simulator.core import rules
from simulator.core.batch import Batch
from simulator.core.request import Request
from simulator.policies.base import Scheduler
from simulator.policies.options import SchedulerOptions, options_config
from simulator.policies.registry import register_scheduler


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

    def reserved_tokens(self, request: Request) -> int:
        if self.options.reserve == "request":
            return min(request.num_prompt_tokens + request.max_output_tokens, self.max_model_len)
        return self.max_model_len

    def blocks_to_finish(self, request: Request) -> int:
        return self.kv.blocks_for(self.reserved_tokens(request))

    def admission_blocked(self) -> bool:
        # Reservations are taken at admission, so decoding never changes the free blocks.
        if not self.waiting or self.num_running >= self.options.max_num_seqs:
            return True
        head = self.waiting.peek()
        return not self.kv.can_fit(head, self.reserved_tokens(head))

    def schedule(self, now_s: float, batch: Batch | None = None) -> Batch:
        batch = Batch() if batch is None else batch
        self.schedule_every_running(batch)   # every in-flight request advances one iteration
        self._select_new(batch, now_s)
        return batch

    def _select_new(self, batch: Batch, now_s: float) -> None:
        """Alg. 1 Select: arrival order, up to max_bs, break when the reservation does not fit."""
        while self.waiting and self.num_running < self.options.max_num_seqs:
            request = self.waiting.peek()
            if not self.kv.allocate_up_to(request, self.reserved_tokens(request)):
                break
            self.waiting.pop()
            self.admit(request, now_s)
            batch.add(request, rules.tokens_wanted(request))  # the whole prompt, no chunking
