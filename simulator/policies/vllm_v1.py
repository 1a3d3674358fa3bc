"""vLLM V1: one token budget, running requests in admission order, then waiting (semantics §1, §2)."""
from __future__ import annotations

from dataclasses import dataclass

from simulator.core import rules
from simulator.core.batch import Batch
from simulator.core.request import Request, RequestStatus
from simulator.kv.prefix_cache import PrefixCachingKVCache
from simulator.policies.base import Scheduler, SchedulerError
from simulator.policies.options import Bool, Fraction, NonNegativeInt, SchedulerOptions, options_config
from simulator.policies.queues import FCFSQueue, PriorityQueue, priority_order
from simulator.policies.registry import register_scheduler

_REMOTE_KVS = RequestStatus.WAITING_FOR_REMOTE_KVS


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
    checks_pool_at_startup = True
    supports_priority = True
    serves_running_in_order = True
    supports_speculative = True
    supports_pipeline_parallel = True   # the batch queue skips requests in flight (rule P3)
    Options = VllmV1Options
    prefix_cache_class = PrefixCachingKVCache
    supports_remote_kv = True
    supports_state_pool = True   # hybrid models' state blocks in the one pool (rule H3)

    def make_waiting_queue(self):
        return PriorityQueue() if self.options.scheduling_policy == "priority" else FCFSQueue()

    def check_config(self) -> None:  # [CFG] startup checks, rule 1.2
        o = self.options
        self._watermark_blocks = int(o.watermark * self.kv.num_total_blocks)
        self.async_scheduling = bool(o.async_scheduling)
        if self.async_scheduling and self.spec is not None:
            raise SchedulerError(f"schedulers.{o.label}.async_scheduling: true is not modelled with "
                                 f"engine.speculative (drafts in flight); allowed: false or unset")
        self.check_token_budget(o.enable_chunked_prefill)

    @property
    def may_hold_decoders(self) -> bool:
        # The priority policy's victim is any running request (rule 2.5), a held one too; a
        # speculating decoder asks for 1 + k tokens and C moves by its draws (rule S1).
        return (super().may_hold_decoders and self.options.scheduling_policy != "priority"
                and self.spec is None)

    def _cap(self, n: int) -> int:
        threshold = self.options.long_prefill_token_threshold
        return threshold if 0 < threshold < n else n   # rule 1.2 A2 / B4

    def schedule(self, now_s: float, batch: Batch | None = None) -> Batch:
        batch = Batch() if batch is None else batch
        budget = self.options.max_num_batched_tokens - batch.total_tokens
        if self.running:
            budget = self._schedule_running(batch, budget)
        if batch.num_preempted == 0:  # Phase B is skipped in a step that preempted (trap 4)
            self._schedule_waiting(batch, budget, now_s)
        if self.async_scheduling:  # tokens this step will sample count before they exist
            for request, samples in zip(batch.requests, batch.samples):
                if samples:
                    request.num_output_placeholders += 1
        return batch

    def _schedule_running(self, batch: Batch, budget: int) -> int:
        """Phase A (rule 1.2): the running list in order while budget is left."""
        running, kv, max_model_len, spec = self.running, self.kv, self.max_model_len, self.spec
        # Slots for the drafter's next proposals, allocated ahead (rule S6; 0 without one).
        lookahead = 0 if spec is None else spec.num_lookahead_tokens
        slot_cap = max_model_len if lookahead else None   # allocate_slots caps at max_model_len
        i = 0
        while i < len(running) and budget > 0:
            request = running[i]
            pending = request.num_output_placeholders
            if pending and request.num_output_tokens + pending >= rules.output_limit(request, max_model_len):
                i += 1
                continue  # async: never schedule past the stop (§1.6)
            n = min(self._cap(rules.tokens_wanted(request)), budget,
                    max_model_len - 1 - request.num_computed_tokens)
            if n <= 0:
                i += 1
                continue
            while not kv.allocate(request, n + lookahead, slot_cap):
                victim = self._pick_victim()
                budget += self._preempt_running(batch, victim)
                if victim is request:
                    return budget  # the requester preempted itself: Phase A ends (rule 1.2 A4)
                if running.index(request) < i:
                    i -= 1  # a scheduled request before us left the list
            batch.add(request, n)
            if spec is not None:
                spec.mark_scheduled(request, n)
            budget -= n
            i += 1
        return budget

    def admission_blocked(self) -> bool:
        budget_left = self.options.max_num_batched_tokens - self.num_running
        if budget_left < 0:
            return False  # not every running request is scheduled each step
        if not self.waiting or self.num_running >= self.options.max_num_seqs or budget_left == 0:
            return True
        if self.options.enable_prefix_caching:
            return False  # hits can change as blocks are evicted: not worth proving stable
        return not self._head_admissible(budget_left)

    def _head_admissible(self, budget: int) -> bool:
        """Phase B's test for the head, without side effects. Free blocks only shrink while
        decodes run, so a head refused now stays refused."""
        head = self.waiting.peek()
        n = self._cap(head.num_tokens)
        if not self.options.enable_chunked_prefill and n > budget:
            return False
        return self._admission_fits(head, 0) and self.kv.can_fit(head, min(n, budget))

    def _pick_victim(self) -> Request:
        if self.options.scheduling_policy == "priority":
            return max(self.running, key=priority_order)   # the last served (rule 2.5)
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

    def _schedule_waiting(self, batch: Batch, budget: int, now_s: float) -> None:
        """Phase B (rule 1.2): the head of waiting while budget and seats are left."""
        o, kv = self.options, self.kv
        skipped: list[Request] = []
        while self.waiting and budget > 0 and self.num_running < o.max_num_seqs:
            request = self.waiting.peek()   # the queue's order (rule 1.4)
            if request.do_remote_prefill or request.status is _REMOTE_KVS:
                if not self._start_pull(request):
                    break
                skipped.append(self.waiting.pop())
                continue
            # A request whose KV arrived from a prefill instance starts where it left off (D4).
            computed = request.num_computed_tokens
            num_hit = kv.lookup_prefix(request) if computed == 0 else 0
            n = self._cap(request.num_tokens - num_hit - computed)
            if not o.enable_chunked_prefill and n > budget:
                break  # head-of-line: smaller requests behind are not tried (rule 1.2 B5)
            n = min(n, budget)
            if not self._admission_fits(request, num_hit):
                break
            if not kv.allocate(request, n, num_hit_tokens=num_hit):
                break  # waiting requests never preempt (rule 1.2 B7)
            self.waiting.pop()
            if computed == 0:
                self._record_lookup(request, num_hit)
                request.num_computed_tokens = num_hit
            self.admit(request, now_s)
            batch.add(request, n)
            budget -= n
        for request in reversed(skipped):   # back at the head, in their order (vLLM prepends)
            self.waiting.push_preempted(request)

    def _start_pull(self, request: Request) -> bool:
        """P/D, decode side (rules D2-D3): a request whose prompt KV is on a prefill instance
        gets blocks for its whole prompt (less local prefix hits) under the admission gate, then
        waits for the pull, holding no seat; one already waiting is passed over. False: no room
        (waiting requests never preempt)."""
        if request.status is _REMOTE_KVS:
            return True
        num_hit = self.kv.lookup_prefix(request)
        if not self._admission_fits(request, num_hit) or not self.kv.allocate(
                request, request.num_tokens - num_hit, num_hit_tokens=num_hit):
            return False
        self._record_lookup(request, num_hit)
        request.do_remote_prefill = False
        request.status = _REMOTE_KVS
        self.kv_pulls.append(request)
        return True

    def _record_lookup(self, request: Request, num_hit: int) -> None:
        """An admission's prefix-cache lookup (a pull's too, rule D2): the cache's metrics, and
        num_cached_tokens, which vLLM sets at the first admission only."""
        self.kv.record_admission(request, num_hit)
        if request.num_preemptions == 0:
            request.num_cached_tokens = num_hit

    def _admission_fits(self, request: Request, num_hit: int) -> bool:
        """Newer V1 gates (rule 2.3): room for the whole prompt, plus watermark if others run."""
        headroom = self._watermark_blocks if self.num_running else 0
        if not self.options.reserve_full_isl:
            return headroom == 0 or self.kv.num_free_blocks >= headroom
        total = min(request.num_tokens, self.max_model_len)
        return self.kv.blocks_to_admit(request, total, num_hit) + headroom <= self.kv.num_free_blocks
