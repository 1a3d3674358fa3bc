"""The running requests that decode one token every step, kept as one cohort.

A decoding request's state moves the same way every step: one more computed token, one more
output, one more gap since its last token, a new KV block every block_size steps. Updating ~100
request objects per step is most of a large simulation's time, so a scheduler may hand its
steady decoders to a cohort: the cohort counts its own steps, records their end times, and keeps
per member only what it had when it joined. Members' request fields are stale while they are in
the cohort; ``materialise`` brings a member up to date (at its finish, or when the scheduler
needs per-request decisions again, ``dissolve``). New blocks are taken eagerly, at the step
whose token needs one, in running order (a prefix cache's evictions depend on that order), and
a member leaves at the step that emits its last token (rule 1.3.2).

Members' stale fields keep computed = tokens - 1 and outputs >= 1, so a member still reads as a
decoder to code that asks (Request.is_prefill).

Exactness: the fields a member gets on leaving equal those of stepping it one token at a time,
except ``itl_sq_sum_s2``, summed here by prefix differences (equal to ~1e-12 relative);
tests/test_fast_forward.py runs scenarios with and without the cohort.
"""
from __future__ import annotations

import heapq
import math

import numpy as np

from simulator.request import Request


class DecodeCohort:
    def __init__(self, kv, max_model_len: int):
        self.kv = kv
        self.max_model_len = max_model_len
        self.num_steps = 0                 # cohort steps done
        self.ends: list[float] = []        # end time of each cohort step
        self.gaps: list[float] = [math.nan]  # gaps[j] = ends[j] - ends[j - 1]
        self.sq_prefix: list[float] = [0.0]  # sum of gaps[1..j] squared
        self.members: list[Request] = []   # in running order
        self.bases = np.zeros(0, np.int64)  # per member: context minus the step it joined at
        self.last_steps = np.zeros(0, np.int64)  # per member: the cohort step of its last token
        self._joined: dict[Request, tuple] = {}  # request -> (join step, computed, outputs, last token s, key)
        self._next_key = 0
        self._block_heap: list[tuple] = []   # (cohort step needing a block, key, request)
        self._finish_heap: list[tuple] = []  # (cohort step of the last token, key, request)

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
        self._joined[request] = (g, computed, outputs, request.last_token_s, key)
        self.members.append(request)
        self.bases = np.append(self.bases, computed - g)
        self.last_steps = np.append(self.last_steps, g + steps_left - 1)
        heapq.heappush(self._finish_heap, (g + steps_left - 1, key, request))
        slots = self.kv.num_token_slots_of(request)
        heapq.heappush(self._block_heap, (g + slots - computed, key, request))

    def materialise(self, request: Request) -> None:
        """Bring a member's fields up to date and take it out of the cohort."""
        g0, computed, outputs, last_token_s, _ = self._joined.pop(request)
        index = self.members.index(request)
        del self.members[index]
        self.bases = np.delete(self.bases, index)
        self.last_steps = np.delete(self.last_steps, index)
        k = self.num_steps - g0
        if k == 0:
            return
        request.num_computed_tokens = computed + k
        request.num_output_tokens = outputs + k
        first_gap = self.ends[g0] - last_token_s
        later = self.gaps[g0 + 1:self.num_steps]
        request.itl_sq_sum_s2 += first_gap * first_gap + (self.sq_prefix[self.num_steps - 1]
                                                          - self.sq_prefix[g0])
        max_gap = max(first_gap, max(later)) if later else first_gap
        if max_gap > request.max_itl_s:
            request.max_itl_s = max_gap
        if request.itl_gaps_s is not None:
            request.itl_gaps_s.append(first_gap)
            request.itl_gaps_s.extend(later)
        request.last_token_s = self.ends[self.num_steps - 1]
        # A prefix cache hashes blocks as they fill: generated tokens are not shareable, so
        # only its count of full blocks moves, brought up to date here.
        self.kv.allocate_up_to(request, computed + k)

    def dissolve(self) -> None:
        """Materialise every member (the scheduler goes back to per-request steps)."""
        for request in list(self.members):
            self.materialise(request)
        self._block_heap.clear()
        self._finish_heap.clear()

    # -- steps --------------------------------------------------------------------------------
    def begin_step(self, reserve_blocks: int = 0) -> bool:
        """Take the blocks this step's tokens need, in running order; False (nothing taken)
        when fewer blocks are free than that plus ``reserve_blocks`` (what the step's other
        requests need first): the scheduler must then preempt, member by member."""
        heap, g = self._block_heap, self.num_steps
        due = []
        while heap and heap[0][0] <= g:
            item = heapq.heappop(heap)
            if item[2] in self._joined and self._joined[item[2]][4] == item[1]:
                due.append(item)
        if len(due) + reserve_blocks > self.kv.num_free_blocks:
            for item in due:
                heapq.heappush(heap, item)
            return False
        block_size, append_block = self.kv.block_size, self.kv.append_block
        for _, key, request in due:   # heap order: (step, key), and keys follow running order
            append_block(request)
            heapq.heappush(heap, (g + block_size, key, request))
        return True

    def context_array(self) -> np.ndarray:
        """Each member's context before the coming step, in running order."""
        return self.bases + self.num_steps

    def end_step(self, now_s: float) -> list[Request]:
        """Every member sampled one token at ``now_s``; the members that emitted their last
        token leave, materialised, in running order."""
        g = self.num_steps
        self.ends.append(now_s)
        if g:
            gap = now_s - self.ends[g - 1]
            self.gaps.append(gap)
            self.sq_prefix.append(self.sq_prefix[-1] + gap * gap)
        self.num_steps = g + 1
        heap, finished = self._finish_heap, []
        while heap and heap[0][0] <= g:
            _, key, request = heapq.heappop(heap)
            if request in self._joined and self._joined[request][4] == key:
                finished.append(request)
        for request in finished:
            self.materialise(request)
        return finished

    def run_state(self) -> tuple[np.ndarray, np.ndarray]:
        """(steps to finish, context) per member, as Scheduler.decode_run_state gives them."""
        g = self.num_steps
        return self.last_steps - g + 1, self.bases + g
