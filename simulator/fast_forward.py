"""Advance several identical decode steps in one event, with results equal to stepping one by one.

When every running request is decoding, no admission can happen, nobody finishes, no arrival comes
before a step starts and the free blocks cover every new block, the next steps differ only in
their contexts (each +1 per step). The engine then computes those steps' durations with the cost
model, logs each step, and updates each request once. Floating-point operations are done in the
same order as the step-by-step path (times accumulated step by step, per-request ITL sums added
gap by gap), so the output files are byte-identical; tests/test_fast_forward.py checks that.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cost_models.batch_shape import BatchShape


@dataclass
class DecodeRun:
    """The plan for m identical decode steps starting at ``start_s``."""
    end_s: list[float]          # end time of each step (accumulated like SimPy's clock)
    kv_usage: list[float]       # usage logged after each step
    new_blocks: np.ndarray      # blocks each request holds after the run

    @property
    def num_steps(self) -> int:
        return len(self.end_s)


def plan_decode_run(scheduler, cost_model, start_s: float, max_steps: int,
                    next_arrival_s: float) -> DecodeRun | None:
    """Up to ``max_steps`` steps, stopping before a step that would start at or after the next
    arrival or would need more blocks than are free."""
    running = scheduler.running
    kv = scheduler.kv
    context = np.fromiter((r.num_computed_tokens for r in running), np.int64, len(running))
    held = np.fromiter((kv.num_blocks_of(r) for r in running), np.int64, len(running))
    ones = np.ones(len(running), np.int64)
    samples = np.ones(len(running), bool)
    pad = getattr(scheduler, "num_padding_rows", 0)
    ends, usages = [], []
    now_s = start_s
    free, total = kv.num_free_blocks, kv.num_total_blocks
    blocks = held
    for i in range(max_steps):
        if now_s >= next_arrival_s:
            break
        need = -(-(context + (i + 1)) // kv.block_size)
        new_blocks = np.maximum(need, held)
        if int((new_blocks - held).sum()) > free:
            break
        shape = BatchShape(ones, context + i, samples).with_padding_rows(pad)
        now_s = now_s + cost_model.step_time_s(shape)
        blocks = new_blocks
        ends.append(now_s)
        usages.append(1.0 - (free - int((blocks - held).sum())) / total)
    if not ends:
        return None
    return DecodeRun(ends, usages, blocks)


def apply_decode_run(scheduler, run: DecodeRun, start_s: float) -> None:
    """Update every running request as if it had decoded ``run.num_steps`` times."""
    m = run.num_steps
    later_gaps = [b - a for a, b in zip(run.end_s, run.end_s[1:])]
    max_later_gap = max(later_gaps, default=-math.inf)
    last_s = run.end_s[-1]
    kv = scheduler.kv
    _allocate_in_step_order(scheduler, m)
    bs = kv.block_size
    for request, blocks in zip(scheduler.running, run.new_blocks.tolist()):
        computed = request.num_computed_tokens
        request.num_computed_tokens = computed + m
        request.num_output_tokens += m
        if (computed + m) // bs != computed // bs:
            # A block filled up: counts first, so a prefix cache hashes exactly the blocks the
            # single steps would have (they call the cache at every block boundary too).
            kv.allocate_up_to(request, computed + m)
        assert kv.num_blocks_of(request) == blocks
        # The first gap runs from the request's own last token (it may have sat out a step).
        first_gap = run.end_s[0] - request.last_token_s
        itl_sum, itl_sq = request.itl_sum_s + first_gap, request.itl_sq_sum_s2 + first_gap * first_gap
        for gap in later_gaps:   # added one by one, in order, as record_token would
            itl_sum += gap
            itl_sq += gap * gap
        request.itl_sum_s, request.itl_sq_sum_s2 = itl_sum, itl_sq
        request.max_itl_s = max(request.max_itl_s, first_gap, max_later_gap)
        if request.itl_gaps_s is not None:
            request.itl_gaps_s.append(first_gap)
            request.itl_gaps_s.extend(later_gaps)
        request.last_token_s = last_s


def _allocate_in_step_order(scheduler, m: int) -> None:
    """Take new blocks in the order single steps would (step by step, running order within a
    step): with prefix caching, which block a request gets decides what is evicted later."""
    kv, bs = scheduler.kv, scheduler.kv.block_size
    needs = []
    for index, request in enumerate(scheduler.running):
        computed, slots = request.num_computed_tokens, kv.num_token_slots_of(request)
        step = slots + 1 - computed          # the step whose token needs slot `slots`
        while step <= m:
            needs.append((step, index, request, computed + step))
            step += bs
    for _, _, request, total in sorted(needs, key=lambda t: (t[0], t[1])):
        kv.allocate_up_to(request, total)


def delay_reaching(now_s: float, target_s: float) -> float | None:
    """A delay d with now_s + d == target_s exactly (SimPy adds delays to its clock), if one exists."""
    d = target_s - now_s
    for candidate in (d, math.nextafter(d, math.inf), math.nextafter(d, -math.inf)):
        if now_s + candidate == target_s and candidate >= 0:
            return candidate
    return None
