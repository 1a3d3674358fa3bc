"""Drive a scheduler by hand, one step at a time, for hand-worked cases."""
from __future__ import annotations

from simulator.core.request import Request
from simulator.policies.base import SchedulerContext
from simulator.policies.registry import get_preset


def make_scheduler(preset: str, *, num_gpu_blocks: int = 1000, block_size: int = 4,
                   max_model_len: int = 64, **options):
    p = get_preset(preset)
    opts = p.cls.Options(preset=preset, **{**p.defaults, **options})
    cls = p.cls.resolve_class(opts)
    return cls(opts, cls.make_kv_cache(opts, num_gpu_blocks, block_size),
               SchedulerContext(max_model_len=max_model_len, block_size=block_size))


def req(rid: int, prompt: int, output: int, arrival_s: float = 0.0, priority: int = 0) -> Request:
    return Request(rid, arrival_s, prompt, output, priority=priority)


class Driver:
    """Unit-time steps: step k runs over [k-1, k)."""

    def __init__(self, scheduler):
        self.s = scheduler
        self.now = 0.0
        self.finished: list[Request] = []

    def add(self, *requests: Request) -> None:
        for r in requests:
            self.s.add(r)

    def step(self) -> dict[int, int]:
        batch = self.s.schedule(self.now)
        scheduled = {r.request_id: n for r, n in batch.num_scheduled_tokens.items()}
        self.now += 1.0
        self.finished += self.s.update_from_output(batch, self.now)
        self.s.kv.check_invariants()
        return scheduled

    def run(self, max_steps: int = 10_000) -> int:
        steps = 0
        while self.s.num_unfinished and steps < max_steps:
            self.step()
            steps += 1
        return steps
