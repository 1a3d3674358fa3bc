"""vLLM V1: one token budget, running requests in admission order, then waiting (semantics §1, §2)."""
from __future__ import annotations

from dataclasses import dataclass

from simulator.batch import Batch
from simulator.cohort_step import CohortStep
from simulator.kv_cache import KVCache
from simulator.prefix_cache import PrefixCachingKVCache
from simulator.request import Request
from simulator.schedulers.base import Scheduler
from simulator.schedulers.options import Bool, Fraction, NonNegativeInt, SchedulerOptions, options_config
from simulator.schedulers.registry import register_scheduler
from simulator.schedulers.request_queue import PriorityRequestQueue


@options_config
@dataclass(frozen=True)
class VllmV1Options(SchedulerOptions):
    enable_chunked_prefill: Bool = True
    long_prefill_token_threshold: NonNegativeInt = 0
    reserve_full_isl: Bool = True        # newer V1 admission gate (rule 2.3); older V1: False
    watermark: Fraction = 0.0
    enable_prefix_caching: Bool = True   # vLLM's default for generative models (rule 2.4)
    # Schedule step k+1 while step k runs (§1.6). Newer vLLM turns it on by default (PR #27614,
    # late 2025); the CPU backend forces it off. None: off here unless the scenario asks for it.
    async_scheduling: Bool | None = None


@register_scheduler("vllm_v1", description="vLLM V1: token budget over running (admission order) "
                    "then waiting; chunked prefill; recompute preemption of the running tail")
class VllmV1Scheduler(Scheduler):
    family = "chunked_prefill"
    supports_priority = True
    Options = VllmV1Options

    @classmethod
    def make_kv_cache(cls, options, num_gpu_blocks: int, block_size: int) -> KVCache:
        if options.enable_prefix_caching:
            return PrefixCachingKVCache(num_gpu_blocks, block_size)
        return KVCache(num_gpu_blocks, block_size)

    def check_config(self) -> None:  # [CFG] startup checks, rule 1.2
        o = self.options
        self._threshold = o.long_prefill_token_threshold
        self._watermark_blocks = int(o.watermark * self.kv.num_total_blocks)   # _admission_fits
        if o.scheduling_policy == "priority":
            self.waiting = PriorityRequestQueue()
        self.async_scheduling = bool(o.async_scheduling)
        self.check_token_budget(o.enable_chunked_prefill)

    def _cap(self, n: int) -> int:
        threshold = self._threshold
        return threshold if 0 < threshold < n else n

    def keeps_cohort(self) -> bool:
        # FCFS only: the priority policy may preempt any member; async scheduling keeps
        # placeholders per request.
        return self.options.scheduling_policy == "fcfs" and not self.async_scheduling

    def schedule(self, now_s: float) -> Batch | CohortStep:
        cohort = self.cohort
        if cohort is not None and len(self.waiting) == 1 and len(cohort.members) == len(self.running):
            step = self._cohort_step(now_s)
            if step is not None:
                return step
        batch = Batch()
        budget, first = self.options.max_num_batched_tokens, 0
        num_members = len(cohort.members) if cohort is not None else 0
        if num_members:
            # The members lead the running order and each takes one token: all of them fit
            # the budget and their new blocks are free, or the step goes request by request
            # (a shortage preempts from the tail, which a member may be).
            if num_members <= budget and cohort.begin_step():
                batch.cohort_rows = cohort.decode_rows()
                budget -= num_members
                first = num_members
            else:
                cohort.dissolve()
        if first < len(self.running):   # else every running request is a member
            budget = self._schedule_running(batch, budget, first)
        if batch.num_preempted == 0:  # Phase B is skipped in a step that preempted (trap 4)
            self._schedule_waiting(batch, budget, now_s)
        if self.async_scheduling:  # tokens this step will sample count before they exist
            for request, samples in zip(batch.requests, batch.samples):
                if samples:
                    request.num_output_placeholders += 1
        return batch

    def _schedule_running(self, batch: Batch, budget: int, first: int = 0) -> int:
        """Phase A over running[first:] (the cohort's members, if any, come before ``first``)."""
        running, kv, max_ctx, threshold = self.running, self.kv, self.max_model_len - 1, self._threshold
        held, block_size = kv._num_blocks, kv.block_size
        hashing = self.options.enable_prefix_caching
        hash_every_step = self.async_scheduling
        add_request, add_new, add_ctx, add_samples = (
            batch.requests.append, batch.new_tokens.append, batch.context_tokens.append,
            batch.samples.append)
        i = first
        while i < len(running) and budget > 0:
            request = running[i]
            computed = request.num_computed_tokens
            pending = request.num_output_placeholders
            if pending and request.num_output_tokens + pending >= request.max_output_tokens:
                i += 1
                continue  # async: never schedule past max_tokens (§1.6)
            target = request.num_prompt_tokens + request.num_output_tokens + pending
            n = target - computed
            if 0 < threshold < n:
                n = threshold
            n = min(n, budget, max_ctx - computed)
            if n <= 0:
                i += 1
                continue
            # Fast path: the request's blocks already cover C + n (most decode steps) and no
            # block becomes full for the prefix cache to hash (with async scheduling the hashes
            # trail the placeholders, so every step goes through the cache).
            if (computed + n > held.get(request, 0) * block_size
                    or hashing and (hash_every_step
                                    or (computed + n) // block_size != computed // block_size)):
                while not kv.allocate(request, n):
                    victim = self._pick_victim()
                    budget += self._preempt_running(batch, victim)
                    if victim is request:
                        return budget  # the requester preempted itself: Phase A ends (rule 1.2 A4)
                    if running.index(request) < i:
                        i -= 1  # a scheduled request before us left the list
            add_request(request)
            add_new(n)
            add_ctx(computed)
            add_samples(computed + n >= target)
            request.num_computed_tokens = computed + n   # C advances at schedule time (§1.2)
            budget -= n
            i += 1
        return budget

    def admission_blocked(self) -> bool:
        budget_left = self.options.max_num_batched_tokens - len(self.running)
        if budget_left < 0:
            return False  # not every running request is scheduled each step
        if not self.waiting or len(self.running) >= self.options.max_num_seqs or budget_left == 0:
            return True
        if self.options.enable_prefix_caching:
            return False  # hits can change as blocks are evicted: not worth proving stable
        return not self._head_admissible(budget_left)

    def _head_admissible(self, budget: int) -> bool:
        """Phase B's test for the head, without side effects. Free blocks only shrink while
        decodes run, so a head refused now stays refused."""
        head = self._peek_waiting()
        n = self._cap(head.num_tokens)
        if not self.options.enable_chunked_prefill and n > budget:
            return False
        return self._admission_fits(head, 0) and self.kv.can_fit(head, min(n, budget))

    def _pick_victim(self) -> Request:
        if self.options.scheduling_policy == "priority":
            return max(self.running, key=lambda r: (r.priority, r.arrival_s))
        return self.running[-1]  # fcfs: the tail, latest admitted or resumed (trap 6)

    def _preempt_running(self, batch: Batch, victim: Request) -> int:
        """Preempt; roll back the victim's tokens if already scheduled this step (rule 2.5)."""
        refunded = 0
        if victim in batch:
            refunded = batch.remove(victim)
        self.running.remove(victim)
        self.preempt(victim)
        batch.num_preempted += 1
        return refunded

    def _cohort_step(self, now_s: float) -> CohortStep | Batch | None:
        """schedule() when every running request is a cohort member and one request waits: the
        members' rows, then Phase B for the one, as a CohortStep (a Batch when it is not
        admitted). None, with nothing changed, when the members do not all fit: schedule() then
        goes request by request."""
        cohort, budget = self.cohort, self.options.max_num_batched_tokens
        num_members, rows = len(cohort.members), None
        if num_members:
            if num_members > budget or not cohort.begin_step():
                return None
            rows = cohort.decode_rows()
            budget -= num_members
        if budget > 0 and len(self.running) < self.options.max_num_seqs:
            admitted = self._admit_head(budget, now_s)
            if admitted is not None:
                return CohortStep(rows, *admitted)
        batch = Batch()   # the members' decodes only
        batch.cohort_rows = rows
        return batch

    def _schedule_waiting(self, batch: Batch, budget: int, now_s: float) -> None:
        max_num_seqs, waiting, running = self.options.max_num_seqs, self.waiting, self.running
        while waiting and budget > 0:
            if len(running) >= max_num_seqs:
                break
            admitted = self._admit_head(budget, now_s)
            if admitted is None:
                break
            request, n, num_hit, samples = admitted
            # Batch.add from C = num_hit, written out
            batch.requests.append(request)
            batch.new_tokens.append(n)
            batch.context_tokens.append(num_hit)
            batch.samples.append(samples)
            budget -= n

    def _admit_head(self, budget: int, now_s: float) -> tuple[Request, int, int, bool] | None:
        """Phase B for the head of waiting with ``budget`` tokens left: admit it and schedule its
        tokens (C advances at schedule time, rule 1.2). Returns (request, tokens scheduled,
        context before them, whether it samples), or None when it stays waiting (which ends
        Phase B). _peek_waiting, _cap and Request.num_tokens written out: every admission
        passes here."""
        o, kv = self.options, self.kv
        request = self.waiting[0]   # the deque's head, or the heap's minimum (rule 1.4)
        num_hit = kv.lookup_prefix(request) if request.num_computed_tokens == 0 else 0
        n = request.num_prompt_tokens + request.num_output_tokens - num_hit
        threshold = self._threshold
        if 0 < threshold < n:   # _cap
            n = threshold
        if not o.enable_chunked_prefill and n > budget:
            return None  # head-of-line: smaller requests behind are not tried (rule 1.2 B5)
        if n > budget:
            n = budget
        if not self._admission_fits(request, num_hit):
            return None
        if not kv.allocate(request, n, num_hit_tokens=num_hit):
            return None  # waiting requests never preempt (rule 1.2 B7)
        self._pop_waiting(request)
        kv.record_admission(request, num_hit)
        request.num_cached_tokens = num_hit
        self.admit(request, now_s)
        request.num_computed_tokens = num_hit + n
        return request, n, num_hit, num_hit + n >= (request.num_prompt_tokens + request.num_output_tokens
                                                    + request.num_output_placeholders)

    def _admission_fits(self, request: Request, num_hit: int) -> bool:
        """Newer V1 gates (rule 2.3): room for the whole prompt, plus watermark if others run."""
        headroom = self._watermark_blocks if self.running else 0
        if not self.options.reserve_full_isl:
            return headroom == 0 or self.kv.num_free_blocks >= headroom
        total = request.num_prompt_tokens + request.num_output_tokens   # num_tokens
        if total > self.max_model_len:   # min() written out: every admission passes here
            total = self.max_model_len
        return self.kv.blocks_to_admit(request, total, num_hit) + headroom <= self.kv.num_free_blocks

    def _peek_waiting(self) -> Request:
        return self.waiting[0]   # the deque's head, or the heap's minimum (rule 1.4)

    def _pop_waiting(self, request: Request) -> None:
        if self.waiting[0] is request:
            self.waiting.popleft()
        else:
            self.waiting.remove(request)
