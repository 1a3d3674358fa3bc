"""The running requests that decode one token every step, kept as one cohort.

A decoding request's state moves the same way every step: one more computed token, one more
output, one more gap since its last token, a new KV block every block_size steps. Updating ~100
request objects per step is most of a large simulation's time, so a scheduler may hand its
steady decoders to a cohort: the cohort counts its own steps, records their end times, and keeps
per member only what it had when it joined. Members' request fields are stale while they are in
the cohort; ``materialise`` brings a member up to date (at its finish, or for every member when
the scheduler needs per-request decisions again, ``dissolve``). Members' stale fields keep
computed = tokens - 1 and outputs >= 1, so a member still reads as a decoder (Request.is_prefill).

New blocks are taken eagerly, at the step whose token needs one, in running order (a prefix
cache's evictions depend on that order), and a member leaves at the step that emits its last
token (rule 1.3.2). Both are kept as sorted lists of (cohort step, join key, request), so a step
costs O(its new blocks and leavers), and a whole multi-step advance is planned from them
(``plan_run``) without touching the other members.

Exactness: the fields a member gets on leaving equal those of stepping it one token at a time,
except ``itl_sq_sum_s2``, summed here by differences of running sums (the std ITL it gives
agrees to 10 ns in tests/test_fast_forward.py, which runs scenarios with and without the cohort).
"""
from __future__ import annotations

import math
from bisect import bisect_left, insort

from simulator.decode_pricing import DecodeSegment
from simulator.request import Request

_KEEP_STEPS = 4096   # step records kept before old ones are dropped (DecodeCohort._drop_old_steps)


class DecodeCohort:
    def __init__(self, kv, max_model_len: int):
        self.kv = kv
        self.max_model_len = max_model_len
        self.num_steps = 0                   # cohort steps done
        # Per cohort step j >= first (older steps are dropped once no member needs them, so
        # memory does not grow with steps): its end time, its gap ends[j] - ends[j - 1], and
        # the running sum of squared gaps.
        self.first = 0
        self.ends: list[float] = []
        self.gaps: list[float] = [math.nan]
        self.sq_prefix: list[float] = [0.0]
        self.members: list[Request] = []     # in running order
        # request -> (join step, computed, outputs, last token s, key, base, last step)
        self._joined: dict[Request, tuple] = {}
        self._next_key = 0
        # Sorted (cohort step needing a block, key, request), one per member; _next_block
        # maps a member to its entry's step, so a leaver's entry is taken out at once.
        self._block_due: list[tuple] = []
        self._next_block: dict[Request, int] = {}
        # Sorted (cohort step of the last token, key, request): members leave only from its
        # front (end_step) or all at once (dissolve), so every entry is current.
        self._finishes: list[tuple] = []
        self._bases: list[tuple] = []        # sorted (context minus join step, key): the longest
        self.base_sum = 0                    # sum of (context minus join step) over members

    def __len__(self) -> int:
        return len(self.members)

    def __contains__(self, request: Request) -> bool:
        return request in self._joined

    # -- membership ---------------------------------------------------------------------------
    def join(self, request: Request) -> None:
        """A running request that decodes from the next step on (computed = tokens - 1)."""
        g, computed, outputs = self.num_steps, request.num_computed_tokens, request.num_output_tokens
        key = self._next_key
        self._next_key += 1
        steps_left = min(request.max_output_tokens - outputs,
                         self.max_model_len - request.num_prompt_tokens - outputs)
        base = computed - g
        last_step = g + steps_left - 1
        self._joined[request] = (g, computed, outputs, request.last_token_s, key, base, last_step)
        self.members.append(request)
        self.base_sum += base
        insort(self._bases, (base, key))
        insort(self._finishes, (last_step, key, request))
        next_block = g + self.kv.num_token_slots_of(request) - computed
        self._next_block[request] = next_block
        insort(self._block_due, (next_block, key, request))

    def materialise(self, request: Request) -> None:
        """Bring a member's fields up to date and take it out of the cohort."""
        g0, computed, outputs, last_token_s, key, base, _ = self._joined.pop(request)
        due = self._block_due
        del due[bisect_left(due, (self._next_block.pop(request), key))]
        self.members.remove(request)
        self.base_sum -= base
        del self._bases[bisect_left(self._bases, (base, key))]
        k = self.num_steps - g0
        if k == 0:
            return
        request.num_computed_tokens = computed + k
        request.num_output_tokens = outputs + k
        j0, j = g0 - self.first, self.num_steps - 1 - self.first   # list indices
        first_gap = self.ends[j0] - last_token_s
        later = self.gaps[j0 + 1:j + 1]
        request.itl_sq_sum_s2 += first_gap * first_gap + (self.sq_prefix[j] - self.sq_prefix[j0])
        max_gap = max(first_gap, max(later)) if later else first_gap
        if max_gap > request.max_itl_s:
            request.max_itl_s = max_gap
        if request.itl_gaps_s is not None:
            request.itl_gaps_s.append(first_gap)
            request.itl_gaps_s.extend(later)
        request.last_token_s = self.ends[j]
        # A prefix cache hashes blocks as they fill: generated tokens are not shareable, so
        # only its count of full blocks moves, brought up to date here.
        self.kv.allocate_up_to(request, computed + k)

    def dissolve(self) -> None:
        """Materialise every member (the scheduler goes back to per-request steps)."""
        for request in list(self.members):
            self.materialise(request)
        self._finishes.clear()

    # -- steps --------------------------------------------------------------------------------
    def begin_step(self, reserve_blocks: int = 0) -> bool:
        """Take the blocks this step's tokens need, in running order; False (nothing taken)
        when fewer blocks are free than that plus ``reserve_blocks`` (what the step's other
        requests need first): the scheduler must then preempt, member by member."""
        due_list, g = self._block_due, self.num_steps
        end = 0
        while end < len(due_list) and due_list[end][0] <= g:
            end += 1
        if end + reserve_blocks > self.kv.num_free_blocks:
            return False
        if not end:
            return True
        due = due_list[:end]
        del due_list[:end]
        block_size, append_block, next_block = self.kv.block_size, self.kv.append_block, self._next_block
        for _, key, request in due:   # sorted by (step, key), and keys follow running order
            append_block(request)
            next_block[request] = g + block_size
            insort(due_list, (g + block_size, key, request))
        return True

    def decode_rows(self) -> tuple[int, int, int]:
        """The members as BatchShape.decode_rows: (count, total context, longest context)
        before the coming step, from the running sums, without a per-member array."""
        g, n = self.num_steps, len(self.members)
        return n, self.base_sum + n * g, self._bases[-1][0] + g

    def end_step(self, now_s: float) -> list[Request]:
        """Every member sampled one token at ``now_s``; the members that emitted their last
        token leave, materialised, in running order."""
        g = self.num_steps
        if g > self.first:
            gap = now_s - self.ends[-1]
            self.gaps.append(gap)
            self.sq_prefix.append(self.sq_prefix[-1] + gap * gap)
        self.ends.append(now_s)
        self.num_steps = g + 1
        if len(self.ends) > _KEEP_STEPS:
            self._drop_old_steps()
        finishes = self._finishes
        end = 0
        while end < len(finishes) and finishes[end][0] <= g:
            end += 1
        if not end:
            return []
        finished = [item[2] for item in finishes[:end]]
        del finishes[:end]
        for request in finished:
            self.materialise(request)
        return finished

    def _drop_old_steps(self) -> None:
        """Forget steps before the oldest member joined (members join in list order)."""
        oldest = self._joined[self.members[0]][0] if self.members else self.num_steps - 1
        drop = oldest - self.first
        if drop > 0:
            del self.ends[:drop], self.gaps[:drop], self.sq_prefix[:drop]
            self.first = oldest

    # -- multi-step advances ------------------------------------------------------------------
    def plan_run(self, cost_model, start_s: float, next_arrival_s: float,
                 through_finishes: bool) -> tuple[list[float], list[int]] | None:
        """End times and row counts of the coming decode steps, every running request being a
        member: up to the last leaver (or the first, unless ``through_finishes``), none starting
        at or after the next arrival, none that could need more blocks than are free (blocks
        freed by leavers are not counted). Steps between two leavers share their rows and are
        priced together (decode_pricing.DecodeSegment). O(steps + leavers + new blocks)."""
        g, finishes = self.num_steps, self._finishes
        if not finishes:
            return None
        limit = (finishes[-1][0] if through_finishes else finishes[0][0]) - g + 1
        ends, rows_by_step = [], []
        now_s, rows, base_sum, left, i = start_s, len(self.members), self.base_sum, 0, 0
        gone: set[int] = set()
        top = len(self._bases) - 1
        while i < limit and now_s < next_arrival_s:
            while finishes[left][0] < g + i:     # members whose last step has passed
                gone.add(finishes[left][1])
                base_sum -= self._joined[finishes[left][2]][5]
                rows -= 1
                left += 1
            while self._bases[top][1] in gone:
                top -= 1
            stop = min(limit, finishes[left][0] - g + 1)   # the rows change after this step
            # Step i prices rows decodes over base_sum + rows * (g + i), the longest at base + g + i.
            segment = DecodeSegment(rows, 0, base_sum + rows * g, self._bases[top][0] + g)
            seg_ends = segment.ends(cost_model, None, None, now_s, i, stop, next_arrival_s)
            ends.extend(seg_ends)
            rows_by_step.extend([rows] * len(seg_ends))
            if len(seg_ends) < stop - i:
                break   # the next arrival came first
            now_s, i = seg_ends[-1], stop
        if not ends:
            return None
        m = self._steps_with_free_blocks(len(ends))
        if m == 0:
            return None
        return ends[:m], rows_by_step[:m]

    def _steps_with_free_blocks(self, m: int) -> int:
        """How many of the coming m steps fit the free blocks (new blocks in step order, each
        member's up to its last step)."""
        g, bs, free = self.num_steps, self.kv.block_size, self.kv.num_free_blocks
        due = self._block_due
        end = bisect_left(due, (g + m,))
        if m <= bs and end <= free:
            return m   # each member takes at most one block in m <= block_size steps
        steps = []
        for step, _, request in due[:end]:
            steps.extend(range(step, min(g + m, self._joined[request][6] + 1), bs))
        if len(steps) <= free:
            return m
        steps.sort()
        return steps[free] - g
