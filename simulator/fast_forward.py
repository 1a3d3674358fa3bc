"""Advance several decode steps in one event, with results equal to stepping one by one.

When every running request is decoding and no request can be admitted, the coming steps differ
only in their contexts (each +1 per step) and in who has left: a request leaves at the end of the
step that emits its last token. The engine then plans the run (durations from the cost model,
blocks by arithmetic), sleeps once, and replays the run's few events in step order: new blocks
(in the order single steps would take them, which decides what a prefix cache evicts later) and
finishes (freeing blocks, as single steps would). Every other request is updated once. When the
running requests form a decode cohort (simulator/decode_cohort.py), the cohort plans and carries out
the run itself, touching only its leavers and new blocks.

A run stops before a step that would start at or after the next arrival, or that could need more
blocks than are free; it stops after the first finish when that could let a request in (someone
waits, or a closed-loop client sends at once) or when the policy has its own finish rules.

Step times are accumulated step by step as SimPy would, and the cost models price a decode step
by the same formula on both paths (``decode_step_time_s``), so the output files are
byte-identical; tests/test_fast_forward.py checks that on random scenarios. The one exception is
each request's sum of squared gaps (std ITL when gaps are not kept), grouped per run here: the
std ITL agrees to 10 ns (the same test).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import accumulate

import numpy as np

from simulator.decode_pricing import DecodeSegment
from simulator.kv_cache import KVCache


@dataclass
class DecodeRun:
    """The plan for m decode steps starting at ``start_s``. The per-request arrays are those
    of plan_decode_run; a decode cohort's run (DecodeCohort.plan_run) needs none."""
    end_s: list[float]          # end time of each step (accumulated like SimPy's clock)
    num_rows: list[int] | None  # rows each step computes (padding included); None for a
                                # cohort run: its members still in, known once it has run
    last_step: np.ndarray | None = None        # per request: the 0-based step of its last token
    first_new_block: np.ndarray | None = None  # per request: the step it next needs a block at
    new_blocks: np.ndarray | None = None       # per request: blocks it takes during the run
    new_by_step: np.ndarray | None = None      # blocks taken at each step

    @property
    def num_steps(self) -> int:
        return len(self.end_s)


def plan_decode_run(scheduler, cost_model, start_s: float, steps_to_finish: list[int],
                    contexts: list[int], next_arrival_s: float,
                    through_finishes: bool) -> DecodeRun | None:
    """The longest exact run from ``start_s`` (None if not even one step is); the lists are
    Scheduler.decode_run_state's."""
    running, kv = scheduler.running, scheduler.kv
    context = np.array(contexts, np.int64)
    last_step = np.array(steps_to_finish, np.int64) - 1
    max_steps = int(last_step.max() if through_finishes else last_step.min()) + 1
    ends, rows = _step_ends(cost_model, context, last_step, getattr(scheduler, "num_padding_rows", 0),
                            start_s, max_steps, next_arrival_s)
    if not ends:
        return None
    held = np.array([kv.num_blocks_of(r) for r in running], np.int64)
    # Step i (0-based) computes the token at position context + i: a request needs its next
    # block at the step first = held * block_size - context, then every block_size steps, while
    # it runs. Blocks freed by finishes are not counted: the run only stops earlier for it.
    first = held * kv.block_size - context
    new_blocks, new_by_step = _new_blocks(first, last_step, len(ends), kv.block_size)
    if int(new_blocks.sum()) > kv.num_free_blocks:
        # stop before the first step that could need more blocks than are free
        m = int(np.searchsorted(np.cumsum(new_by_step), kv.num_free_blocks, side="right"))
        if m == 0:
            return None
        del ends[m:], rows[m:]
        new_blocks, new_by_step = _new_blocks(first, last_step, m, kv.block_size)
    return DecodeRun(ends, rows, last_step, first, new_blocks, new_by_step)


def _new_blocks(first: np.ndarray, last_step: np.ndarray, m: int, bs: int) -> tuple:
    """Blocks each request takes in an m-step run, and blocks taken at each step."""
    per_request = np.maximum(0, -(-(np.minimum(m, last_step + 1) - first) // bs))
    num_new = int(per_request.sum())
    if not num_new:
        return per_request, np.zeros(m, np.int64)
    offsets = np.arange(num_new) - np.repeat(np.cumsum(per_request) - per_request, per_request)
    return per_request, np.bincount(np.repeat(first, per_request) + bs * offsets, minlength=m)


def _step_ends(cost_model, context: np.ndarray, last_step: np.ndarray, pad: int, start_s: float,
               max_steps: int, next_arrival_s: float) -> tuple[list[float], list[int]]:
    """End times and row counts of up to ``max_steps`` steps, none starting at or after the
    next arrival; a request's row goes after its last step. Padded rows (static HF batching)
    sit at the longest context. Steps between two departures have the same rows, so a model
    that prices many decode steps at once (``decode_step_times_s``) prices them together."""
    order = np.argsort(last_step, kind="stable")
    leave_steps = last_step[order].tolist()
    leave_ctx = context[order].tolist()
    longest_from = list(accumulate(reversed(leave_ctx), max))[::-1]  # longest of order[k:]
    ends, rows_by_step = [], []
    now_s, left, rows, context_sum, i = start_s, 0, len(leave_ctx), sum(leave_ctx), 0
    while i < max_steps and now_s < next_arrival_s:
        while leave_steps[left] < i:   # rows whose last step has passed
            context_sum -= leave_ctx[left]
            rows -= 1
            left += 1
        segment = DecodeSegment(rows, pad, context_sum, longest_from[left])
        stop = min(max_steps, leave_steps[left] + 1)   # the rows change after this step
        seg_ends = segment.ends(cost_model, context, last_step, now_s, i, stop, next_arrival_s)
        ends.extend(seg_ends)
        rows_by_step.extend([rows + pad] * len(seg_ends))
        if len(seg_ends) < stop - i:
            break  # the next arrival came first
        now_s, i = seg_ends[-1], stop
    return ends, rows_by_step


@dataclass
class RunSteps:
    """What the engine logs per step of an applied run."""
    kv_usage: list[float]
    num_running: list[int]


def apply_decode_run(scheduler, run: DecodeRun, on_finished) -> RunSteps:
    """Carry out the run: finishes in step order, then every survivor at once.

    ``on_finished(requests, now_s)`` is told of each step's finishes. O(1) per request besides
    its finish: the gaps after a request's first one are the run's step gaps, whose running sums
    of squares and maxima are computed once. A prefix cache also gets its new blocks one by one
    in step order (which block is taken decides what is evicted); a count-only cache gets each
    request's blocks at once and its usage per step by arithmetic.
    """
    if scheduler.cohort is not None:
        return _apply_cohort_run(scheduler, run, on_finished)
    m, ends, kv = run.num_steps, run.end_s, scheduler.kv
    gaps = _RunGaps(ends)
    running = list(scheduler.running)
    last_step = run.last_step.tolist()
    leaving: dict[int, list] = {}
    for index, step in enumerate(last_step):
        if step < m:
            leaving.setdefault(step, []).append(running[index])
    if type(kv) is KVCache:
        steps = _count_only_steps(kv, run, running, leaving)
        kv.grow_counts(running, run.new_blocks.tolist())   # finishes free them at their step
        for step, finished in sorted(leaving.items()):
            _finish(scheduler, finished, step, gaps, on_finished)
        _advance_all(scheduler.running, m, gaps, kv)
        return steps
    events = _block_events(running, run.first_new_block.tolist(), last_step, m, kv.block_size)
    usage, num_running = [], []
    e, total = 0, kv.num_total_blocks
    for step in range(m):
        while e < len(events) and events[e][0] == step:
            _, _, request, tokens = events[e]
            kv.allocate_up_to(request, tokens)
            e += 1
        finished = leaving.get(step)
        if finished:
            _finish(scheduler, finished, step, gaps, on_finished)
        usage.append(1.0 - kv.num_free_blocks / total)
        num_running.append(len(scheduler.running))
    _advance_all(scheduler.running, m, gaps, kv)
    return RunSteps(usage, num_running)


def _apply_cohort_run(scheduler, run: DecodeRun, on_finished) -> RunSteps:
    """Every running request is a cohort member: the cohort steps m times (new blocks and
    leavers are its only per-request work)."""
    cohort, kv = scheduler.cohort, scheduler.kv

    def leave(finished: list, end_s: float) -> None:
        scheduler.finish(finished, end_s)
        on_finished(finished, end_s)

    steps = cohort.carry_out(run.end_s, leave)
    if steps is not None:
        return RunSteps(*steps)
    usage, num_running, total = [], [], kv.num_total_blocks
    for end_s in run.end_s:
        if not cohort.begin_step():
            raise AssertionError("a planned decode run ran out of KV blocks")  # DecodeCohort.plan_run's bug
        finished = cohort.end_step(end_s)
        if finished:
            scheduler.finish(finished, end_s)
            on_finished(finished, end_s)
        usage.append(1.0 - kv.num_free_blocks / total)
        num_running.append(len(scheduler.running))
    return RunSteps(usage, num_running)


def _count_only_steps(kv: KVCache, run: DecodeRun, running: list, leaving: dict) -> RunSteps:
    """Per-step usage and running count of a run on a count-only cache, before carrying it out:
    free blocks fall by each step's new blocks and rise by what each step's finishes held."""
    m = run.num_steps
    freed = np.zeros(m, np.int64)
    left = np.zeros(m, np.int64)
    index_of = {id(r): i for i, r in enumerate(running)}
    for step, finished in leaving.items():
        left[step] = len(finished)
        freed[step] = sum(kv.num_blocks_of(r) + int(run.new_blocks[index_of[id(r)]]) for r in finished)
    free_after = kv.num_free_blocks - np.cumsum(run.new_by_step) + np.cumsum(freed)
    usage = (1.0 - free_after / kv.num_total_blocks).tolist()
    return RunSteps(usage, (len(running) - np.cumsum(left)).tolist())


def _finish(scheduler, finished: list, step: int, gaps: "_RunGaps", on_finished) -> None:
    end_s = gaps.ends[step]
    _advance_all(finished, step + 1, gaps, scheduler.kv)
    scheduler.finish(finished, end_s)
    on_finished(finished, end_s)


def _block_events(running, first_new_block, last_step, m: int, bs: int) -> list[tuple]:
    """(step, running index, request, tokens to hold) for each new block, in the order single
    steps take them: step by step, running order within a step."""
    events = []
    for index, request in enumerate(running):
        step, stop = first_new_block[index], min(m, last_step[index] + 1)
        computed = request.num_computed_tokens
        while step < stop:
            events.append((step, index, request, computed + step + 1))
            step += bs
    events.sort(key=lambda t: (t[0], t[1]))
    return events


class _RunGaps:
    """The gaps between a run's step ends, with prefix sums of squares and prefix maxima."""

    def __init__(self, ends: list[float]):
        self.ends = ends
        self.later = [b - a for a, b in zip(ends, ends[1:])]
        self.sq_prefix = list(accumulate((g * g for g in self.later), initial=0.0))
        self.max_prefix = list(accumulate(self.later, max, initial=-math.inf))


def _advance_all(requests, m: int, gaps: _RunGaps, kv) -> None:
    """The requests decoded the run's first m steps (their blocks are already taken): one
    update each, the figures they share computed once (the hot loop of a multi-step advance)."""
    bs, hashes = kv.block_size, type(kv).allocate_up_to is not KVCache.allocate_up_to
    first_end, last_s = gaps.ends[0], gaps.ends[m - 1]
    later_sq, max_later = gaps.sq_prefix[m - 1], gaps.max_prefix[m - 1]
    later = gaps.later[:m - 1]
    for request in requests:
        computed = request.num_computed_tokens
        request.num_computed_tokens = computed + m
        request.num_output_tokens += m
        if hashes and (computed + m) // bs != computed // bs:
            # A block filled up: a prefix cache hashes exactly the blocks the single steps
            # would have (they call the cache at every block boundary too).
            kv.allocate_up_to(request, computed + m)
        # The first gap runs from the request's own last token (it may have sat out a step).
        first_gap = first_end - request.last_token_s
        request.itl_sq_sum_s2 += first_gap * first_gap + later_sq
        max_gap = first_gap if first_gap > max_later else max_later
        if max_gap > request.max_itl_s:
            request.max_itl_s = max_gap
        if request.itl_gaps_s is not None:
            request.itl_gaps_s.append(first_gap)
            request.itl_gaps_s.extend(later)
        request.last_token_s = last_s
