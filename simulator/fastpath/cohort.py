"""Steady decoders held as one cohort, outside the policy's running list.

A decoding request's state moves the same way every step: one more computed token, one more
output, one more gap since its last token, a new KV block every block_size steps. Updating every
such request at every step is most of a large simulation's time, so the cohort holds them: it
counts its own steps, records their end times (step_ends.py), and keeps per member only what
it had when it joined. Members' request fields are stale while they are held;
``_materialise`` brings a member up to date (at its finish, or for every member when the
policy needs per-request decisions again, ``dissolve``).

The cohort drives the policy (``schedule``, ``update_from_output``, the engine's two calls per
step) and asks it only narrow questions: whether the coming step gives every running decoder its
token (``decodes_running_next``), whether anything can be admitted (``admission_blocked``), and
which requests decode next (``rules.decodes_next``). Its members are running requests the policy
counts in ``num_held`` but does not list; a step adds them as decode rows, and the policy
schedules its own requests around them. What a member does is computed from the request rules of
simulator/core/rules.py: its last step from ``rules.output_limit``, its blocks from
``rules.kv_tokens_needed``, its token times by ``Request.record_tokens``.

Blocks are counted (the cohort holds members only while ``KVCache.counts_only``): a member's
needs (``KVCache.blocks_per_token_block`` blocks: one per attention group of a hybrid model's
pool, whose state blocks a member already holds) repeat every block_size steps from its first, so the cohort keeps how many members need a
block at each step phase (step mod block_size), takes a step's blocks as one count, and credits
each member its share when it leaves. A member leaves at the step of its last token, from a sorted
list, so a step costs O(1) plus its leavers, and a run of decode steps (``decode_run``) is priced
and carried out in one pass without touching other members.

Exactness: the fields a member gets on leaving equal those of stepping it one token at a time,
except ``itl_sq_sum_s2``, summed here by differences of running sums (the std ITL agrees to
100 ns in tests/test_fast_paths.py, which runs scenarios with and without the fast path).
"""
from __future__ import annotations

from bisect import bisect_left, insort
from operator import attrgetter, itemgetter

from simulator.core import rules
from simulator.core.batch import Batch
from simulator.core.request import Request, RequestStatus
from simulator.fastpath.pricing import DecodePricer
from simulator.fastpath.step_ends import StepEnds

_PRICED_AHEAD = 4    # steps a run prices at first, doubled while its rows stay the same
_base_of = itemgetter(5)   # a member record's base
_running_seq = attrgetter("running_seq")


class DecodeCohort:
    def __init__(self, policy, cost_model):
        self.policy = policy
        self.kv = kv = policy.kv
        self.max_model_len = policy.max_model_len
        self.pricer = DecodePricer(cost_model)
        self.num_steps = 0                   # cohort steps done
        self.steps = StepEnds()
        # The members in joining order: request -> (join step, computed, outputs, last token s,
        # key, base, last step, cohort step of its first new block).
        self.members: dict[Request, tuple] = {}
        self._next_key = 0
        self._taken_through = -1         # the last step whose blocks were taken
        # Members due a block at steps = p (mod bs), from their first due step on; members whose
        # first block is further than a block_size away wait in _later, sorted (first, key, request).
        self._due_at_phase = [0] * kv.block_size
        self._later: list[tuple] = []
        # Sorted (cohort step of the last token, key, request).
        self._finishes: list[tuple] = []
        # A member's base is its context minus its join step: the longest context is the largest
        # base plus the step. The largest is kept as members join, found again only after the
        # member holding it leaves.
        self._max_base: int | None = None
        self.base_sum = 0
        kv.counted_holder = self

    # -- the engine's calls ---------------------------------------------------------------------
    def schedule(self, now_s: float) -> Batch:
        """The next step: the members' decode rows, when the policy gives every running decoder
        its token and their blocks (and those of the listed decoders) are free, then the
        policy's own requests. Otherwise the members stall (a prefill-only step) or, when they
        cannot all decode, go back to the policy first."""
        policy, batch = self.policy, Batch()
        if self.members:
            if not self.kv.counts_only:
                self.dissolve()   # blocks have identities now: which one each takes matters
            elif policy.decodes_running_next():
                if (len(self.members) <= policy.options.max_num_batched_tokens
                        and self._take_blocks(self._listed_decoder_blocks())):
                    batch.decode_rows = self.decode_rows()
                else:
                    self.dissolve()
        return policy.schedule(now_s, batch)

    def update_from_output(self, batch: Batch, now_s: float) -> list[Request]:
        """The step's end: the members' token (leavers first), then the policy's listed
        requests; requests that now decode steadily join."""
        finished = self._end_step(now_s) if batch.decode_rows is not None else []
        finished += self.policy.update_from_output(batch, now_s)
        if self.kv.counts_only:   # else which block each takes matters: no one is held
            self._join_decoders(batch)
        return finished

    def can_run(self) -> bool:
        """Whether the coming steps are all the members' decodes: every running request is a
        member, blocks are counted, and nothing can be admitted while they decode."""
        policy = self.policy
        return (bool(self.members) and not policy.running and self.kv.counts_only
                and policy.admission_blocked())

    # -- membership -----------------------------------------------------------------------------
    def _join_decoders(self, batch: Batch) -> None:
        """Requests that decode from now on join: where the policy serves its running list in
        order, only from the list's head (members come first); else any of this step's."""
        policy = self.policy
        running = policy.running
        if policy.serves_running_in_order:
            joined = 0
            while joined < len(running) and self._join(running[joined]):
                joined += 1
            if joined:
                del running[:joined]
            return
        joined = {r for r in batch.requests if r.status is RequestStatus.RUNNING and self._join(r)}
        if joined:
            policy.running = [r for r in running if r not in joined]

    def _join(self, request: Request) -> bool:
        """Take in a request that decodes steadily from the next step on (rules.decodes_next)
        and whose blocks cover that step's slots but at most one block's worth more: from then
        on it needs one block every block_size steps. False (nothing done) for any other."""
        if not rules.decodes_next(request):
            return False
        g, computed, outputs = self.num_steps, request.num_computed_tokens, request.num_output_tokens
        bs = self.kv.block_size
        # The step of its next block: each decode needs one more slot than the one before, so
        # the first step whose slots (rules.kv_tokens_needed) exceed the blocks it holds.
        next_block = g + self.kv.token_slots_of(request) - rules.kv_tokens_needed(computed, 1, 0, None) + 1
        if next_block < g:
            return False
        key = self._next_key
        self._next_key += 1
        last_step = g + rules.output_limit(request, self.max_model_len) - outputs - 1
        base = computed - g
        if not self.members or (self._max_base is not None and base > self._max_base):
            self._max_base = base
        self.members[request] = (g, computed, outputs, request.last_token_s, key, base, last_step,
                                 next_block)
        self.base_sum += base
        self.policy.num_held += 1
        insort(self._finishes, (last_step, key, request))
        if next_block < g + bs:
            self._due_at_phase[next_block % bs] += 1
        else:
            insort(self._later, (next_block, key, request))
        return True

    def _materialise(self, request: Request, finishing: bool = False) -> None:
        """Bring a member's fields up to date and take it out (``finishing``: it sampled its last
        token and is about to free its blocks)."""
        g0, computed, outputs, last_token_s, key, base, _, first_block = self.members.pop(request)
        self.policy.num_held -= 1
        self._credit_blocks(request, key, first_block)
        self.base_sum -= base
        if base == self._max_base:
            self._max_base = None
        k = self.num_steps - g0
        if k == 0:
            return
        request.num_computed_tokens = computed + k   # one token scheduled per step (rule 1.2)
        first_s, last_s, sq_sum_s2, later_max_s, later_gaps = self.steps.tokens(
            g0, self.num_steps, request.itl_gaps_s is not None)
        request.record_tokens(k, first_s, last_s, sq_sum_s2, later_max_s, later_gaps)
        if not finishing:
            # A prefix cache counts a request's full blocks (a preemption reads them): brought up
            # to date here; a finishing request's count goes with its blocks.
            self.kv.allocate_up_to(request, computed + k)

    def dissolve(self) -> None:
        """Every member back to the policy's running list, in running order."""
        members = list(self.members)
        for request in members:
            self._materialise(request)
        self._finishes.clear()
        policy = self.policy
        policy.running = sorted(members + policy.running, key=_running_seq)

    def _credit_blocks(self, request: Request, key: int, first_block: int) -> None:
        """A leaving member's counted blocks: one at first_block and every block_size steps
        after, through the last step whose blocks were taken."""
        later = self._later
        if later:
            i = bisect_left(later, (first_block, key))
            if i < len(later) and later[i][1] == key:
                del later[i]   # its first block was not due yet
                return
        bs, taken_through = self.kv.block_size, self._taken_through
        self._due_at_phase[first_block % bs] -= 1
        if first_block <= taken_through:
            self.kv.credit_counted(request, ((taken_through - first_block) // bs + 1)
                                   * self.kv.blocks_per_token_block)

    def credit_counted_blocks(self) -> None:
        """Blocks are about to get identities (a prefix cache's first hash): every member is
        credited the blocks counted so far, and none later (the cohort dissolves at its next
        step, before it would take more)."""
        for request, record in self.members.items():
            self._credit_blocks(request, record[4], record[7])
        self._taken_through = -1

    # -- steps ----------------------------------------------------------------------------------
    def _listed_decoder_blocks(self) -> int:
        """Blocks the policy's listed decoders need this step: they are served next to the
        members, so all must fit for no one to be preempted."""
        kv, running = self.kv, self.policy.running
        return sum(kv.blocks_for_step(r, 1) for r in running if rules.decodes_next(r)) if running else 0

    def _take_blocks(self, reserve_blocks: int) -> bool:
        """Take the blocks this step's member tokens need; False (nothing taken) when fewer are
        free than that plus ``reserve_blocks``."""
        g = self.num_steps
        if self._later:
            self._move_due_blocks(g)
        need = self._due_at_phase[g % self.kv.block_size] * self.kv.blocks_per_token_block
        if need + reserve_blocks > self.kv.num_free_blocks:
            return False
        self.kv.take_counted(need)
        self._taken_through = g
        return True

    def decode_rows(self) -> tuple[int, int, int]:
        """The members as BatchShape.decode_rows: (count, total context, longest context)."""
        g, n = self.num_steps, len(self.members)
        return n, self.base_sum + n * g, self._largest_base() + g

    def _largest_base(self) -> int:
        largest = self._max_base
        if largest is None:
            largest = self._max_base = max(map(_base_of, self.members.values()))
        return largest

    def _end_step(self, now_s: float) -> list[Request]:
        """Every member sampled one token at ``now_s``; those that stop leave, released."""
        g = self.num_steps
        self.num_steps = g + 1
        if self.steps.record(g, now_s):
            self._forget_old_steps()
        return self._leavers(g, now_s) if self._finishes[0][0] <= g else []

    def _leavers(self, g: int, now_s: float) -> list[Request]:
        """The members whose last token is step g's: materialised, and released by the policy."""
        finishes, finished = self._finishes, []
        while finishes and finishes[0][0] <= g:
            request = finishes.pop(0)[2]
            self._materialise(request, finishing=True)
            finished.append(request)
        self.policy.release(finished, now_s)
        return finished

    def _forget_old_steps(self) -> None:
        """Steps before the oldest member joined are read by no one (members join in list order)."""
        oldest = next(iter(self.members.values()))[0] if self.members else self.num_steps - 1
        self.steps.forget_before(oldest)

    # -- runs of decode steps -------------------------------------------------------------------
    def decode_run(self, start_s: float, next_arrival_s: float, through_finishes: bool, leave):
        """The coming decode steps (``can_run``) planned and carried out in one pass, as the
        steps one by one would: none starting at or after the next arrival, none needing more
        blocks than are free, none after the last leaver (the first, unless
        ``through_finishes``). ``leave(requests, end_s)`` is told of each step's leavers.
        Returns the steps' end times, KV usage and member count after each, or None when not
        even one step can be taken (nothing changed)."""
        if start_s >= next_arrival_s:
            return None
        finishes, kv = self._finishes, self.kv
        bs, total, due_at_phase = kv.block_size, kv.num_total_blocks, self._due_at_phase
        per_block = kv.blocks_per_token_block
        limit = finishes[-1][0] if through_finishes else finishes[0][0]   # the last step allowed
        first_step, free, now_s = self.num_steps, kv.num_free_blocks, start_s
        record_end = self.steps.record
        usage: list[float] = []
        num_running: list[int] = []
        times: list[float] = []   # priced durations of the coming steps, last step first
        ahead = _PRICED_AHEAD
        while True:
            g = self.num_steps
            if self._later:
                self._move_due_blocks(g)
            need = due_at_phase[g % bs] * per_block
            if need > free:
                break
            free -= need
            if not times:   # the rows stay the same through the next leaver's step
                times = self.pricer.step_times(*self.decode_rows(),
                                               min(ahead, min(limit, finishes[0][0]) - g + 1))
                times.reverse()
                ahead *= 2
            now_s = now_s + times.pop()
            forget = record_end(g, now_s)
            self.num_steps = g + 1
            if finishes[0][0] == g:
                kv.num_free_blocks, self._taken_through = free, g
                leave(self._leavers(g, now_s), now_s)
                free = kv.num_free_blocks
                times, ahead = [], _PRICED_AHEAD
            usage.append(1.0 - free / total)
            num_running.append(len(self.members))
            if g >= limit or not self.members or now_s >= next_arrival_s:
                break
        if self.num_steps == first_step:
            return None
        kv.num_free_blocks, self._taken_through = free, self.num_steps - 1
        ends = self.steps.since(first_step)
        if forget:
            self._forget_old_steps()
        return ends, usage, num_running

    def _move_due_blocks(self, g: int) -> None:
        """Members whose first block comes due within a block_size of step g join the counts."""
        later, bs = self._later, self.kv.block_size
        while later and later[0][0] < g + bs:
            self._due_at_phase[later.pop(0)[0] % bs] += 1
