"""The running requests that decode one token every step, kept as one cohort.

A decoding request's state moves the same way every step: one more computed token, one more
output, one more gap since its last token, a new KV block every block_size steps. Updating ~100
request objects per step is most of a large simulation's time, so a scheduler may hand its
steady decoders to a cohort: the cohort counts its own steps, records their end times, and keeps
per member only what it had when it joined. Members' request fields are stale while they are in
the cohort; ``materialise`` brings a member up to date (at its finish, or for every member when
the scheduler needs per-request decisions again, ``dissolve``). Members' stale fields keep
computed = tokens - 1 and outputs >= 1, so a member still reads as a decoder (Request.is_prefill).

New blocks are taken eagerly, at the step whose token needs one. While blocks are only counted
(KVCache.counts_only) a member's needs repeat every block_size steps from its first, so the
cohort keeps how many members need a block at each step phase (step mod block_size) and takes a
step's blocks as one count; a member is credited its share when it leaves. Once blocks have
identities (a prefix cache with hashes), the blocks go one by one in running order (which block
is taken decides what is evicted later), from a sorted list of (cohort step, join key, request).
A member leaves at the step that emits its last token (rule 1.3.2), from a sorted list too; so a
step costs O(1) plus its leavers (and its new blocks once they have identities), and a whole
multi-step advance is priced and carried out from these lists in one pass (``run``, when the
cost model gives its decode-step terms; else priced by ``plan_run``, carried out by
``carry_out``) without touching other members.

Exactness: the fields a member gets on leaving equal those of stepping it one token at a time,
except ``itl_sq_sum_s2``, summed here by differences of running sums (the std ITL it gives
agrees to 10 ns in tests/test_fast_forward.py, which runs scenarios with and without the cohort).
"""
from __future__ import annotations

import math
from bisect import bisect_left, insort
from operator import itemgetter

from simulator.request import Request

_KEEP_STEPS = 4096   # step records kept before old ones are dropped (DecodeCohort._drop_old_steps)
_base_of = itemgetter(5)   # a member record's base


class DecodeCohort:
    def __init__(self, kv, max_model_len: int):
        self.kv = kv
        self.max_model_len = max_model_len
        self.num_steps = 0                   # cohort steps done
        # Per cohort step j >= first (older steps are dropped once no member needs them, so
        # memory does not grow with steps): its end time, its gap ends[j] - ends[j - 1], and
        # the running sum of squared gaps.
        self.first = 0
        self._drop_at = _KEEP_STEPS          # len(ends) at which old steps are next looked at
        self.ends: list[float] = []
        self.gaps: list[float] = [math.nan]
        self.sq_prefix: list[float] = [0.0]
        # The steps whose gap is larger than every later gap, and those gaps (decreasing): the
        # largest gap since step a is the first entry at or after a (a member's max ITL). Below
        # them a sentinel (step -1, an infinite gap) that no gap displaces: the stack is never
        # empty, so a step tests its top without a length check.
        self._max_steps: list[int] = [-1]
        self._max_gaps: list[float] = [math.inf]
        # The members in running order (joins append; a dict, so a leaver goes in O(1)):
        # request -> (join step, computed, outputs, last token s, key, base, last step,
        #             cohort step of its first new block).
        self.members: dict[Request, tuple] = {}
        self._next_key = 0
        self._counted = kv.counts_only   # blocks are counts: take them per step phase
        self._taken_through = -1         # the last step whose blocks were taken
        bs = kv.block_size
        # Counted blocks: members due a block at steps = p (mod bs), from their first due step
        # on; members whose first block is further than a block_size away wait in _later,
        # sorted (first due step, key, request).
        self._due_at_phase = [0] * bs
        self._later: list[tuple] = []
        kv.deferred_blocks = self
        # Blocks with identities: sorted (cohort step needing a block, key, request), one per
        # member; _next_block maps a member to its entry's step, so a leaver's entry goes at once.
        self._block_due: list[tuple] = []
        self._next_block: dict[Request, int] = {}
        # Sorted (cohort step of the last token, key, request): members leave only from its
        # front (end_step) or all at once (dissolve), so every entry is current.
        self._finishes: list[tuple] = []
        # A member's base is its context minus its join step: the longest context is the largest
        # base plus the step. The largest is kept as members join and found again (one pass over
        # the members) only after the member holding it leaves: a sorted list of every base cost
        # two ordered insertions per request.
        self._max_base: int | None = None   # None: to be found again (_largest_base)
        self.base_sum = 0                    # sum of bases over members

    def __len__(self) -> int:
        return len(self.members)

    def __contains__(self, request: Request) -> bool:
        return request in self.members

    def outside(self, running: list[Request]) -> list[Request]:
        """The running requests that are not members, in running order (every step of some
        policies). Every member is running, so len(running) - len(members) are not; they are
        looked for from the tail, where a policy that keeps arrival order puts its newest."""
        missing = len(running) - len(self.members)
        if missing <= 0:
            return []
        joined, found = self.members, []
        for request in reversed(running):
            if request not in joined:
                found.append(request)
                if len(found) == missing:
                    break
        found.reverse()
        return found

    # -- membership ---------------------------------------------------------------------------
    def join(self, request: Request) -> None:
        """A running request that decodes from the next step on (computed = tokens - 1)."""
        g, computed, outputs = self.num_steps, request.num_computed_tokens, request.num_output_tokens
        key = self._next_key
        self._next_key += 1
        # min() written out (every admission joins; the builtin's call costs more than the test)
        steps_left = request.max_output_tokens - outputs
        context_left = self.max_model_len - request.num_prompt_tokens - outputs
        if context_left < steps_left:
            steps_left = context_left
        base = computed - g
        last_step = g + steps_left - 1
        kv = self.kv
        next_block = g + kv._num_blocks.get(request, 0) * kv.block_size - computed   # num_token_slots_of
        if not self.members:
            self._max_base = base
        elif self._max_base is not None and base > self._max_base:
            self._max_base = base
        self.members[request] = (g, computed, outputs, request.last_token_s, key, base, last_step,
                                 next_block)
        self.base_sum += base
        insort(self._finishes, (last_step, key, request))
        if not self._counted:
            self._next_block[request] = next_block
            insort(self._block_due, (next_block, key, request))
        elif next_block < g + self.kv.block_size:
            self._due_at_phase[next_block % self.kv.block_size] += 1
        else:
            insort(self._later, (next_block, key, request))

    def materialise(self, request: Request, finishing: bool = False) -> None:
        """Bring a member's fields up to date and take it out of the cohort (``finishing``: it
        emitted its last token and is about to free its blocks)."""
        g0, computed, outputs, last_token_s, key, base, _, first_block = self.members.pop(request)
        if self._counted:
            self._credit_blocks(request, key, first_block)
        else:
            due = self._block_due
            del due[bisect_left(due, (self._next_block.pop(request), key))]
        self.base_sum -= base
        if base == self._max_base:
            self._max_base = None
        k = self.num_steps - g0
        if k == 0:
            return
        request.num_computed_tokens = computed + k
        request.num_output_tokens = outputs + k
        j0, j = g0 - self.first, self.num_steps - 1 - self.first   # list indices
        first_gap = self.ends[j0] - last_token_s
        request.itl_sq_sum_s2 += first_gap * first_gap + (self.sq_prefix[j] - self.sq_prefix[j0])
        max_gap = first_gap
        if k > 1:   # gaps of steps g0 + 1 .. num_steps - 1: the largest is a _max_steps entry
            later_max = self._max_gaps[bisect_left(self._max_steps, g0 + 1)]
            if later_max > max_gap:
                max_gap = later_max
        if max_gap > request.max_itl_s:
            request.max_itl_s = max_gap
        if request.itl_gaps_s is not None:
            request.itl_gaps_s.append(first_gap)
            request.itl_gaps_s.extend(self.gaps[j0 + 1:j + 1])
        request.last_token_s = self.ends[j]
        if not finishing:
            # A prefix cache hashes blocks as they fill: generated tokens are not shareable, so
            # only its count of full blocks moves (which a preemption reads), brought up to date
            # here; a finishing request's count is dropped with its blocks.
            self.kv.allocate_up_to(request, computed + k)

    def dissolve(self) -> None:
        """Materialise every member (the scheduler goes back to per-request steps)."""
        for request in list(self.members):
            self.materialise(request)
        self._finishes.clear()

    def _credit_blocks(self, request: Request, key: int, first_block: int) -> None:
        """A leaving member's counted blocks: one at first_block and every block_size steps
        after, through the last step whose blocks were taken."""
        later = self._later
        if later:   # usually empty: a prompt's last block has room for less than a block_size
            i = bisect_left(later, (first_block, key))
            if i < len(later) and later[i][1] == key:
                del later[i]   # its first block was not due yet
                return
        bs, taken_through = self.kv.block_size, self._taken_through
        self._due_at_phase[first_block % bs] -= 1
        if first_block <= taken_through:
            self.kv.credit_counted(request, (taken_through - first_block) // bs + 1)

    def settle_blocks(self) -> None:
        """Blocks are about to get identities: credit every member the blocks counted so far
        and take later ones one by one (KVCache.deferred_blocks)."""
        if not self._counted:
            return
        bs, taken_through = self.kv.block_size, self._taken_through
        for request in self.members:
            *_, key, _, _, first_block = self.members[request]
            next_block = first_block
            if first_block <= taken_through:
                taken = (taken_through - first_block) // bs + 1
                self.kv.credit_counted(request, taken)
                next_block = first_block + taken * bs
            self._next_block[request] = next_block
            self._block_due.append((next_block, key, request))
        self._block_due.sort()
        self._due_at_phase = [0] * bs
        self._later.clear()
        self._counted = False

    # -- steps --------------------------------------------------------------------------------
    def begin_step(self, reserve_blocks: int = 0) -> bool:
        """Take the blocks this step's tokens need, in running order; False (nothing taken)
        when fewer blocks are free than that plus ``reserve_blocks`` (what the step's other
        requests need first): the scheduler must then preempt, member by member."""
        if self._counted:
            return self._take_counted_blocks(reserve_blocks)
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

    def _take_counted_blocks(self, reserve_blocks: int) -> bool:
        g, bs, later = self.num_steps, self.kv.block_size, self._later
        while later and later[0][0] < g + bs:   # its first block is due within a block_size
            self._due_at_phase[later.pop(0)[0] % bs] += 1
        need = self._due_at_phase[g % bs]
        if need + reserve_blocks > self.kv.num_free_blocks:
            return False
        self.kv.take_counted(need)
        self._taken_through = g
        return True

    def decode_rows(self) -> tuple[int, int, int]:
        """The members as BatchShape.decode_rows: (count, total context, longest context)
        before the coming step, from the running sums, without a per-member array."""
        g, n = self.num_steps, len(self.members)
        return n, self.base_sum + n * g, self._largest_base() + g

    def _largest_base(self) -> int:
        """The largest base among the members (there is at least one)."""
        largest = self._max_base
        if largest is None:
            largest = self._max_base = max(map(_base_of, self.members.values()))
        return largest

    def end_step(self, now_s: float) -> list[Request]:
        """Every member sampled one token at ``now_s``; the members that emitted their last
        token leave, materialised, in running order."""
        g = self.num_steps
        if g > self.first:
            gap = now_s - self.ends[-1]
            self.gaps.append(gap)
            self.sq_prefix.append(self.sq_prefix[-1] + gap * gap)
            _push_gap(self._max_steps, self._max_gaps, g, gap)
        self.ends.append(now_s)
        self.num_steps = g + 1
        if len(self.ends) > self._drop_at:
            self._drop_old_steps()
        finishes = self._finishes
        return self._leavers(g) if finishes and finishes[0][0] <= g else []

    def carry_out(self, ends_s: list[float], leave) -> tuple[list[float], list[int]] | None:
        """Carry out decode steps priced beforehand (plan_run), ending at ``ends_s``: run()'s
        state changes. Returns each step's KV usage and member count after it, or None
        (nothing done) when blocks have identities: they go one by one (begin_step)."""
        if not self._counted:
            return None
        done = self.run(None, -math.inf, ends_s[-1], True, leave, planned_ends=ends_s)
        if done is None or len(done[0]) < len(ends_s):
            raise AssertionError("a planned decode run ran out of KV blocks")  # plan_run's bug
        return done[1], done[2]

    def run(self, terms_of, start_s: float, next_arrival_s: float, through_finishes: bool,
            leave, planned_ends: list[float] | None = None,
            ) -> tuple[list[float], list[float], list[int]] | None:
        """Plan and carry out the coming decode steps in one pass (blocks counted): what
        plan_run then carry_out do, step by step as begin_step and end_step would. Steps are
        priced from ``terms_of(rows, longest) -> terms`` (cost_models.base: the one decode-step
        expression; None: the model will not price these rows so). Stops before a step that
        starts at or after the next arrival, that needs more blocks than are free, or that the
        model will not price; after the last leaver (the first, unless ``through_finishes``).
        ``leave(requests, end_s)`` is told of each step's leavers. Returns the steps' end times,
        KV usage and member count after each, or None when not even one step can be taken
        (nothing changed). ``planned_ends``: carry out steps priced beforehand (plan_run),
        ending at these times, instead of pricing them."""
        if planned_ends is not None:
            next_arrival_s = planned_ends[-1]   # stops right after the last planned step
        finishes = self._finishes
        if not self._counted or not finishes or start_s >= next_arrival_s:
            return None
        kv, g = self.kv, self.num_steps
        bs, total, due_at_phase, later = kv.block_size, kv.num_total_blocks, self._due_at_phase, self._later
        ends, gaps, sq_prefix = self.ends, self.gaps, self.sq_prefix
        max_steps, max_gaps = self._max_steps, self._max_gaps
        limit = finishes[-1][0] if through_finishes else finishes[0][0]   # the last step allowed
        rows = len(self.members)
        terms = terms_of(rows, self._largest_base() + limit) if planned_ends is None else (0,) * 7
        if terms is None:
            return None
        base, a, b, q, c1, c2, c3 = terms
        # The coming step's total context + rows, as a float (exact below 2**53): the pricing's
        # products are then float by float, the interpreter's fast path, with the same values.
        pairs, rows_f = float(self.base_sum + rows * g + rows), float(rows)
        g0, n0 = g, len(ends)
        free, next_leave, now_s = kv.num_free_blocks, finishes[0][0], start_s
        free_usage = 1.0 - free / total   # KV usage while no block is taken
        last_s, sq = (ends[-1], sq_prefix[-1]) if ends else (None, None)
        usage: list[float] = []
        num_running: list[int] = []
        while True:
            while later and later[0][0] < g + bs:   # first blocks due within a block_size
                due_at_phase[later.pop(0)[0] % bs] += 1
            need = due_at_phase[g % bs]
            if need:
                if need > free:
                    break
                free -= need
                free_usage = 1.0 - free / total
            if planned_ends is None:
                # cost_models.base's expression (the hot loop of every decode run: written out)
                ap, bp = a * pairs, b * pairs + q
                now_s = now_s + (((base + (bp if bp > ap else ap)) + c1) + c2 + c3)
                pairs += rows_f
            else:
                now_s = planned_ends[g - g0]
            if last_s is not None:
                gap = now_s - last_s
                gaps.append(gap)
                sq += gap * gap
                sq_prefix.append(sq)
                # _push_gap, written out: calling it here costs ~0.9% of a 3k-request sarathi
                # run's instructions, as much as replacing the top in place saves
                if max_gaps[-1] <= gap:   # usually the step before's
                    max_gaps[-1] = gap
                    max_steps[-1] = g
                    while max_gaps[-2] <= gap:
                        del max_gaps[-2], max_steps[-2]
                else:
                    max_steps.append(g)
                    max_gaps.append(gap)
            else:
                sq = sq_prefix[-1]
            ends.append(now_s)
            last_s = now_s
            if next_leave == g:
                kv.num_free_blocks, self.num_steps, self._taken_through = free, g + 1, g
                leave(self._leavers(g), now_s)
                free, rows = kv.num_free_blocks, len(self.members)
                free_usage = 1.0 - free / total
                usage.append(free_usage)
                num_running.append(rows)
                g += 1
                if g > limit or not rows:
                    break
                next_leave = finishes[0][0]
                if planned_ends is None:
                    terms = terms_of(rows, self._largest_base() + limit)
                if terms is None:
                    break
                base, a, b, q, c1, c2, c3 = terms
                pairs, rows_f = float(self.base_sum + rows * g + rows), float(rows)
            else:
                usage.append(free_usage)
                num_running.append(rows)
                g += 1
                if g > limit:
                    break
            if now_s >= next_arrival_s:
                break
        if len(ends) == n0:
            return None
        out_ends = ends[n0:]
        kv.num_free_blocks, self.num_steps, self._taken_through = free, g, g - 1
        if len(ends) > self._drop_at:
            self._drop_old_steps()
        return out_ends, usage, num_running

    def _leavers(self, g: int) -> list[Request]:
        """The members whose last token is step g's, taken out materialised, in running order."""
        finishes, finished = self._finishes, []
        while finishes and finishes[0][0] <= g:   # usually one: no slice or comprehension
            request = finishes.pop(0)[2]
            self.materialise(request, finishing=True)
            finished.append(request)
        return finished

    def _drop_old_steps(self) -> None:
        """Forget steps before the oldest member joined (members join in list order). Looked
        at again once _KEEP_STEPS more steps are kept: while a long-lived member holds the old
        steps, not at every step."""
        oldest = next(iter(self.members.values()))[0] if self.members else self.num_steps - 1
        drop = oldest - self.first
        if drop > 0:
            del self.ends[:drop], self.gaps[:drop], self.sq_prefix[:drop]
            self.first = oldest
            stale = bisect_left(self._max_steps, oldest)
            del self._max_steps[1:stale], self._max_gaps[1:stale]   # the sentinel stays
        self._drop_at = len(self.ends) + _KEEP_STEPS

    # -- multi-step advances ------------------------------------------------------------------
    def plan_run(self, cost_model, start_s: float, next_arrival_s: float,
                 through_finishes: bool) -> list[float] | None:
        """End times of the coming decode steps, every running request being a member: up to
        the last leaver (or the first, unless ``through_finishes``), none starting at or after
        the next arrival, none that could need more blocks than are free (blocks freed by
        leavers are not counted). Step i computes a row per member still in (those whose last
        step is >= i). Steps between two leavers share their rows and are priced together
        (decode_pricing.DecodeSegment). O(steps + leavers + new blocks)."""
        from simulator.decode_pricing import DecodeSegment   # here: run() needs none of it
        g, finishes = self.num_steps, self._finishes
        if not finishes or start_s >= next_arrival_s:
            return None
        bases = sorted((record[5], record[4]) for record in self.members.values())   # (base, key)
        limit = (finishes[-1][0] if through_finishes else finishes[0][0]) - g + 1
        ends: list[float] = []
        now_s, rows, base_sum, left, i, top = start_s, len(self.members), self.base_sum, 0, 0, len(bases) - 1
        gone: set[int] = set()
        while True:
            stop = min(limit, finishes[left][0] - g + 1)   # the rows change after this step
            # Step i prices rows decodes over base_sum + rows * (g + i), the longest at base + g + i.
            segment = DecodeSegment(rows, 0, base_sum + rows * g, bases[top][0] + g)
            seg_ends = segment.ends(cost_model, None, None, now_s, i, stop, next_arrival_s)
            if ends:
                ends.extend(seg_ends)
            else:
                ends = seg_ends   # the first segment's own list (most runs have one)
            if stop >= limit or len(seg_ends) < stop - i or seg_ends[-1] >= next_arrival_s:
                break   # the last leaver, or the next arrival comes first
            now_s, i = seg_ends[-1], stop
            while finishes[left][0] < g + i:     # members whose last step has passed
                gone.add(finishes[left][1])
                base_sum -= self.members[finishes[left][2]][5]
                rows -= 1
                left += 1
            while bases[top][1] in gone:
                top -= 1
        if not ends:
            return None
        m = self._steps_with_free_blocks(len(ends))
        if m == 0:
            return None
        if m < len(ends):
            del ends[m:]
        return ends

    def _steps_with_free_blocks(self, m: int) -> int:
        """How many of the coming m steps fit the free blocks (new blocks in step order, each
        member's up to its last step)."""
        g, bs, free = self.num_steps, self.kv.block_size, self.kv.num_free_blocks
        if len(self.members) * -(-m // bs) <= free:
            return m   # each member takes at most one block per block_size steps
        if self._counted:
            return self._counted_steps_with_free_blocks(m)
        due = self._block_due
        end = bisect_left(due, (g + m,))
        if m <= bs and end <= free:
            return m   # each member takes at most one block in m <= block_size steps
        steps = []
        for step, _, request in due[:end]:
            steps.extend(range(step, min(g + m, self.members[request][6] + 1), bs))
        if len(steps) <= free:
            return m
        steps.sort()
        return steps[free] - g

    def _counted_steps_with_free_blocks(self, m: int) -> int:
        """_steps_with_free_blocks from the per-phase counts: step by step, members leave the
        counts after their last step and late first blocks join them when due."""
        g, bs, free = self.num_steps, self.kv.block_size, self.kv.num_free_blocks
        due_at_phase, finishes, joined = list(self._due_at_phase), self._finishes, self.members
        later = [(first, last) for first, key, request in self._later
                 if first <= (last := joined[request][6])]
        waiting_keys = {key for _, key, _ in self._later}
        left, used = 0, 0
        for i in range(m):
            step = g + i
            while finishes[left][0] < step:     # left after its last step
                last, key, request = finishes[left]
                first = joined[request][7]
                if key not in waiting_keys or first <= last:
                    due_at_phase[first % bs] -= 1
                left += 1
            while later and later[0][0] < step + bs:
                due_at_phase[later.pop(0)[0] % bs] += 1
            used += due_at_phase[step % bs]
            if used > free:
                return i
        return m


def _push_gap(max_steps: list[int], max_gaps: list[float], g: int, gap: float) -> None:
    """Step g's gap onto the stack of gaps larger than every later one: the entries it is no
    smaller than leave (the top is replaced in place, the usual case: the step before's)."""
    if max_gaps[-1] <= gap:
        max_gaps[-1] = gap
        max_steps[-1] = g
        while max_gaps[-2] <= gap:
            del max_gaps[-2], max_steps[-2]
    else:
        max_steps.append(g)
        max_gaps.append(gap)
