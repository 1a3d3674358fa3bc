"""Stop a run that can make no progress, with a diagnosis, instead of spinning."""
from __future__ import annotations


class NoProgressError(RuntimeError):
    """The run cannot finish: the message says which request is stuck and why."""


def diagnose_stall(scheduler, now_s: float) -> str:
    kv = scheduler.kv
    head = scheduler.waiting.peek() if scheduler.waiting else None
    where = f"at t={now_s:.6g}s: {scheduler.num_running} running, {len(scheduler.waiting)} waiting"
    if head is None:
        return f"no progress {where}: the scheduler returned an empty batch"
    need = kv.blocks_for(min(head.num_tokens, scheduler.max_model_len))
    headroom = scheduler.admission_headroom_blocks()
    watermark = f" plus a watermark of {headroom} kept free" if headroom else ""
    return (f"no progress {where}: request {head.request_id} ({head.num_tokens} tokens) needs "
            f"{need} KV blocks{watermark}; {kv.num_free_blocks} of {kv.num_total_blocks} are free and "
            f"max_num_seqs={scheduler.options.max_num_seqs}; raise num_gpu_blocks / "
            f"gpu_memory_utilization or shorten requests")


class ProgressWatchdog:
    """Without preemption every step advances some request, so a run always ends. A run stuck
    preempting and recomputing without sampling a token is a livelock: stop it."""

    MAX_STEPS_WITHOUT_TOKEN = 20_000
    MIN_PREEMPTIONS = 100

    def __init__(self):
        self.steps_without_token = 0
        self.preemptions = 0

    def observe(self, num_sampled: int, num_preempted: int, scheduler) -> None:
        """A step sampled ``num_sampled`` tokens and preempted ``num_preempted`` requests. A step
        that samples while steps_without_token is 0 changes nothing (preemptions is 0 too): the
        engine skips the call then."""
        if num_sampled:
            self.steps_without_token = 0
            self.preemptions = 0
            return
        self.steps_without_token += 1
        self.preemptions += num_preempted
        if (self.steps_without_token > self.MAX_STEPS_WITHOUT_TOKEN
                and self.preemptions >= self.MIN_PREEMPTIONS):
            raise NoProgressError(
                f"livelock: {self.steps_without_token} steps without a sampled token and "
                f"{self.preemptions} preemptions ({scheduler.num_running} running, "
                f"{len(scheduler.waiting)} waiting, KV usage {scheduler.kv.usage:.2f})")
