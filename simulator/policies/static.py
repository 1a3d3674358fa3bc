"""Static batching (FasterTransformer / HF generate): no refill until the batch drains (§6)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from simulator.core.batch import Batch
from simulator.core.request import Request
from simulator.policies.base import Scheduler
from simulator.policies.options import (NonNegativeFloat, PositiveInt, SchedulerOptions,
                                        options_config)
from simulator.policies.registry import register_scheduler


@options_config
@dataclass(frozen=True)
class StaticOptions(SchedulerOptions):
    max_batch_size: PositiveInt | None = None   # default: max_num_seqs
    max_wait_s: NonNegativeFloat = 0.0  # wait for a full batch at most this long
    # ft: a member's latency ends at its own last token, finished rows stop computing, no refill.
    # hf: padded rows compute until the longest finishes; outputs return at batch end (trap 18).
    variant: Literal["ft", "hf"] = "ft"


@register_scheduler("static", aliases=("faster_transformer",),
                    description="Static batching: a batch is formed when the engine is idle and "
                    "runs until its longest member finishes; no refill")
class StaticScheduler(Scheduler):
    family = "static"
    Options = StaticOptions

    def __init__(self, options, kv_cache, context):
        super().__init__(options, kv_cache, context)
        self.batch_members: list[Request] = []

    @property
    def max_batch_size(self) -> int:
        return self.options.max_batch_size or self.options.max_num_seqs

    def blocks_to_finish(self, request: Request) -> int:
        return self.kv.blocks_for(self.max_model_len)

    def admission_blocked(self) -> bool:
        return self.num_running > 0  # no refill while a batch is in flight

    def finish_can_admit(self) -> bool:
        return False   # no refill until the batch is done, and its last finish ends any run

    @property
    def decode_runs_through_finishes(self) -> bool:
        return self.options.variant == "ft"   # hf: a finish changes the padded rows

    @property
    def may_hold_decoders(self) -> bool:
        return self.options.variant == "ft"   # hf: outputs and padding follow the whole batch


    @property
    def num_padding_rows(self) -> int:
        return len(self.batch_members) - len(self.running) if self.options.variant == "hf" else 0

    def next_wakeup_s(self, now_s: float) -> float | None:
        """When an idle engine should look again although nothing arrives (the max_wait timer)."""
        if self.num_running or not self.waiting or len(self.waiting) >= self.max_batch_size:
            return None
        return self.waiting.peek().arrival_s + self.options.max_wait_s

    def schedule(self, now_s: float, batch: Batch | None = None) -> Batch:
        batch = Batch() if batch is None else batch
        if not self.num_running and not self._form_batch(now_s):
            return batch
        self.schedule_every_running(batch)
        batch.num_padding_rows = self.num_padding_rows
        return batch

    def _form_batch(self, now_s: float) -> bool:
        wake = self.next_wakeup_s(now_s)
        if wake is not None and now_s < wake:
            return False  # still waiting for a fuller batch
        self.batch_members = []
        while self.waiting and self.num_running < self.max_batch_size:
            request = self.waiting.peek()
            if not self.kv.allocate_up_to(request, self.max_model_len):
                break  # each member reserves a whole context
            self.waiting.pop()
            self.admit(request, now_s)
            self.batch_members.append(request)
        return self.num_running > 0

    def update_from_output(self, batch: Batch, now_s: float) -> list[Request]:
        """hf: every output returns at the batch's end, so the batch's members are reported
        finished together then (their blocks are freed at their own last token)."""
        finished = super().update_from_output(batch, now_s)
        if self.options.variant == "hf":
            return list(self.batch_members) if finished and not self.num_running else []
        return finished

    def finish(self, finished: list[Request], now_s: float) -> None:
        super().finish(finished, now_s)
        if self.options.variant == "hf" and not self.num_running:
            for request in self.batch_members:  # non-streaming: everything returns at batch end
                request.first_token_s = request.last_token_s = request.finish_s = now_s
                request.itl_sq_sum_s2 = request.max_itl_s = 0.0
                if request.itl_gaps_s is not None:
                    request.itl_gaps_s.clear()   # one response chunk: no inter-token gaps
