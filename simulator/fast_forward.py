"""Advance several identical decode steps in one event, with results equal to stepping one by one.

When every running request is decoding, no admission can happen, nobody finishes, no arrival comes
before a step starts and the free blocks cover every new block, the next steps differ only in
their contexts (each +1 per step). The engine then computes those steps' durations with the cost
model, logs each step, and updates each request once. Step times are accumulated step by step as
SimPy would, and the cost models price a decode step by the same formula on both paths
(``decode_step_time_s``), so the output files are byte-identical; tests/test_fast_forward.py
checks that. The one exception is each request's sum of squared gaps (std ITL when gaps are not
kept), grouped per run here: equal to about 1e-15 relative.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cost_models.batch_shape import BatchShape
from simulator.kv_cache import KVCache


@dataclass
class DecodeRun:
    """The plan for m identical decode steps starting at ``start_s``."""
    end_s: list[float]          # end time of each step (accumulated like SimPy's clock)
    kv_usage: list[float]       # usage logged after each step

    @property
    def num_steps(self) -> int:
        return len(self.end_s)


def plan_decode_run(scheduler, cost_model, start_s: float, max_steps: int,
                    next_arrival_s: float) -> DecodeRun | None:
    """Up to ``max_steps`` steps, stopping before a step that would start at or after the next
    arrival or would need more blocks than are free.

    Costs O(steps) scalar work for the durations and O(requests + new blocks) numpy work for the
    blocks: decode steps are priced from (rows, total context) alone, and each request's new
    blocks fall at fixed steps (its first free slot runs out, then every block_size steps).
    """
    running, kv = scheduler.running, scheduler.kv
    n = len(running)
    context = np.fromiter((r.num_computed_tokens for r in running), np.int64, n)
    ends = _decode_step_ends(cost_model, context, getattr(scheduler, "num_padding_rows", 0),
                             start_s, max_steps, next_arrival_s)
    if not ends:
        return None
    held = np.fromiter((kv.num_blocks_of(r) for r in running), np.int64, n)
    bs, free = kv.block_size, kv.num_free_blocks
    # Step i (0-based) computes the token at position context + i: a request needs its next
    # block at the step first = held * block_size - context, then every block_size steps.
    first = held * bs - context
    m = len(ends)
    per_request = np.maximum(0, -(-(m - first) // bs))
    num_new = int(per_request.sum())
    new_by_step = np.zeros(m, np.int64)
    if num_new:
        offsets = np.arange(num_new) - np.repeat(np.cumsum(per_request) - per_request, per_request)
        new_by_step = np.bincount(np.repeat(first, per_request) + bs * offsets, minlength=m)
    new_so_far = np.cumsum(new_by_step)
    if num_new > free:  # stop before the first step that needs more blocks than are free
        m = int(np.searchsorted(new_so_far, free, side="right"))
        if m == 0:
            return None
        del ends[m:]
    usages = (1.0 - (free - new_so_far[:m]) / kv.num_total_blocks).tolist()
    return DecodeRun(ends, usages)


def _decode_step_ends(cost_model, context: np.ndarray, pad: int, start_s: float, max_steps: int,
                      next_arrival_s: float) -> list[float]:
    """End times of up to ``max_steps`` decode steps, each context one longer than the last."""
    rows = len(context) + pad
    longest = int(context.max())
    context_sum = int(context.sum()) + pad * longest    # padded rows sit at the longest context
    price = getattr(cost_model, "decode_step_time_s", None)
    if price is None:  # a plug-in model with only step_time_s: price each step's shape
        ones, samples = np.ones(len(context), np.int64), np.ones(len(context), bool)

        def price(num_rows, ctx_sum, longest_ctx):
            return cost_model.step_time_s(BatchShape(ones, context + (longest_ctx - longest), samples)
                                          .with_padding_rows(pad))
    ends, now_s = [], start_s
    for i in range(max_steps):
        if now_s >= next_arrival_s:
            break
        now_s = now_s + price(rows, context_sum + i * rows, longest + i)
        ends.append(now_s)
    return ends


def apply_decode_run(scheduler, run: DecodeRun, start_s: float) -> None:
    """Update every running request as if it had decoded ``run.num_steps`` times.

    O(1) per request: the gaps after a request's first one are the same for every request, so
    their squares are summed once. The sum of squares is the one figure not bit-identical to
    stepping (the additions are grouped differently); the ITL sum is last - first token, exact.
    """
    m = run.num_steps
    ends = run.end_s
    later_gaps = [b - a for a, b in zip(ends, ends[1:])]
    max_later_gap = max(later_gaps, default=-math.inf)
    later_sq = 0.0
    for gap in later_gaps:
        later_sq += gap * gap
    last_s = ends[-1]
    kv = scheduler.kv
    _allocate_in_step_order(scheduler, m)
    bs = kv.block_size
    hashes_blocks = type(kv).allocate_up_to is not KVCache.allocate_up_to
    for request in scheduler.running:
        computed = request.num_computed_tokens
        request.num_computed_tokens = computed + m
        request.num_output_tokens += m
        if hashes_blocks and (computed + m) // bs != computed // bs:
            # A block filled up: a prefix cache hashes exactly the blocks the single steps
            # would have (they call the cache at every block boundary too).
            kv.allocate_up_to(request, computed + m)
        # The first gap runs from the request's own last token (it may have sat out a step).
        first_gap = ends[0] - request.last_token_s
        request.itl_sq_sum_s2 += first_gap * first_gap + later_sq
        max_gap = first_gap if first_gap > max_later_gap else max_later_gap
        if max_gap > request.max_itl_s:
            request.max_itl_s = max_gap
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
