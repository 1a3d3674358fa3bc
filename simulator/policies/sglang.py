"""SGLang's scheduler: prefill batches apart from decode batches, admission against the
new-token-ratio estimate, retraction, and the radix prefix cache (docs/sglang-semantics.md).

Rule numbers (S1..S9, R1..R5) are those of docs/sglang-semantics.md. The token pool is the
engine's KV pool: page_size is engine.block_size and max_total_tokens is
(num_gpu_blocks - 1) x block_size (S1).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated, Literal

from cost_models.options import Constraint
from simulator.core import rules
from simulator.core.batch import Batch
from simulator.core.request import Request, RequestStatus
from simulator.kv.radix_cache import RadixKVCache
from simulator.policies.base import Scheduler, SchedulerError
from simulator.policies.options import (Bool, Fraction, NonNegativeFloat, PositiveInt,
                                        SchedulerOptions, options_config)
from simulator.policies.queues import FCFSQueue
from simulator.policies.registry import register_scheduler

CLIP_MAX_NEW_TOKENS = 4096   # schedule_policy.py: the estimate's cap on one request's outputs
RETRACT_DECODE_STEPS = 20    # global_config.retract_decode_steps: headroom after a retraction
ChunkSize = Annotated[int, Constraint(strict=True, ge=-1, description="-1 or 0: chunking off")]


@options_config
@dataclass(frozen=True)
class SglangOptions(SchedulerOptions):
    max_running_requests: PositiveInt | None = None   # None: max_num_seqs, else 2048 (S2)
    chunked_prefill_size: ChunkSize | None = None     # None: 8192; -1 or 0: off (S3)
    max_prefill_tokens: PositiveInt = 16384
    schedule_policy: Literal["fcfs", "lpm", "dfs-weight"] = "fcfs"
    enable_mixed_chunk: Bool = False
    schedule_conservativeness: NonNegativeFloat = 1.0
    init_new_token_ratio: Fraction = 0.7          # SGLANG_INIT_NEW_TOKEN_RATIO
    min_new_token_ratio_factor: Fraction = 0.14   # SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
    new_token_ratio_decay_steps: PositiveInt = 600
    disable_radix_cache: Bool = False
    page_size: PositiveInt | None = None          # must equal engine.block_size (S1)

    @property
    def enable_prefix_caching(self) -> bool:
        """The common name the rest of servesim reads (summaries, tests)."""
        return not self.disable_radix_cache


@register_scheduler("sglang", description="SGLang: prefill batches apart from decode batches "
                    "(mixed with enable_mixed_chunk), new-token-ratio admission, retraction, "
                    "radix prefix cache; schedule_policy fcfs/lpm/dfs-weight")
class SglangScheduler(Scheduler):
    family = "continuous"
    Options = SglangOptions
    prefix_cache_class = RadixKVCache
    # Retraction picks its victim by a key of its own over every running request (S8).
    may_hold_decoders = False

    def make_waiting_queue(self):
        return FCFSQueue()   # lpm reorders it in place each step (S9)

    def resolve_defaults(self, options, context):
        """SGLang's names win; the common ones fill what they leave unset (S2, S3)."""
        seats = options.max_running_requests or options.max_num_seqs or 2048
        chunk = options.chunked_prefill_size
        chunk = 8192 if chunk is None else (chunk if chunk > 0 else 0)
        budget = chunk or options.max_prefill_tokens
        return replace(options, max_running_requests=seats, max_num_seqs=seats,
                       chunked_prefill_size=chunk, max_num_batched_tokens=budget)

    def check_config(self) -> None:
        o = self.options
        if o.page_size is not None and o.page_size != self.kv.block_size:
            raise SchedulerError(f"schedulers.{o.label}.page_size: {o.page_size} must equal "
                                 f"engine.block_size ({self.kv.block_size}): one KV pool")
        if 0 < o.chunked_prefill_size < self.kv.block_size:
            raise SchedulerError(f"schedulers.{o.label}.chunked_prefill_size: "
                                 f"{o.chunked_prefill_size} must be >= page_size "
                                 f"({self.kv.block_size}), or -1 for no chunking: a cut prompt "
                                 f"is whole pages")
        self.init_ratio = min(o.init_new_token_ratio * o.schedule_conservativeness, 1.0)
        self.min_ratio = min(self.init_ratio * o.min_new_token_ratio_factor, 1.0)
        self.ratio_decay = (self.init_ratio - self.min_ratio) / o.new_token_ratio_decay_steps
        self.new_token_ratio = self.init_ratio
        self.chunked: Request | None = None   # the request whose prompt is mid-chunk (S3)

    def blocks_to_finish(self, request: Request) -> int:
        """Its peak KV, or what S5.1 asks of an empty engine to admit it (prompt + clipped
        outputs + 1 tokens available), whichever is more."""
        gate = request.num_prompt_tokens + self._clipped_new(request) + 1
        return max(super().blocks_to_finish(request), self.kv.blocks_for(gate))

    def decodes_running_next(self) -> bool:
        return False   # a coming step may be prefill-only (S4): never promised

    # -- the step (S4) ----------------------------------------------------------------------
    def schedule(self, now_s: float, batch: Batch | None = None) -> Batch:
        batch = Batch() if batch is None else batch
        if not self.running:
            self.new_token_ratio = self.init_ratio   # an idle engine starts over (S6)
        decoders = [r for r in self.running if r is not self.chunked and rules.decodes_next(r)]
        mixed = self.options.enable_mixed_chunk and bool(decoders)
        if mixed:   # decode pages first, so the prefill is admitted against what is left
            decoders = self._schedule_decodes(batch, decoders, decay=False)
            if not self._schedule_prefill(batch, now_s, len(decoders)) and not batch.num_preempted:
                self._decay()   # no prefill formed: it was a plain decode step (S6)
        elif not self._schedule_prefill(batch, now_s, 0) and decoders:
            self._schedule_decodes(batch, decoders, decay=True)
        return batch

    def update_from_output(self, batch: Batch, now_s: float) -> list[Request]:
        """The step's end (rule 1.3); then each prefill row still running offers its computed
        pages to the radix tree (R3: cache_unfinished_req after a prefill batch, chunks too)."""
        finished = super().update_from_output(batch, now_s)
        running = RequestStatus.RUNNING
        for request, n, context in zip(batch.requests, batch.new_tokens, batch.context_tokens):
            if request.status is running and (context < request.num_prompt_tokens or n > 1):
                self.kv.cache_unfinished(request)
        return finished

    # -- prefill: PrefillAdder (S5) -----------------------------------------------------------
    def _schedule_prefill(self, batch: Batch, now_s: float, num_mixed: int) -> bool:
        """One prefill batch: the chunked request first, then waiting in policy order, while
        seats, the chunk and input budgets and the token estimate last. True if any."""
        o = self.options
        rem_input = o.max_prefill_tokens - num_mixed
        rem_chunk = o.chunked_prefill_size - num_mixed if o.chunked_prefill_size else None
        rem_total = self._available_tokens() - self._running_reservation()
        added = 0
        if self.chunked is not None:
            request = self.chunked
            wanted = rules.tokens_wanted(request)
            n = wanted if rem_chunk is None else min(wanted, rem_chunk)   # no page rounding (S3)
            if n <= 0 or not self.kv.allocate(request, n):
                return False   # no room this step: the decoders run, the chunk waits
            self.chunked = request if n < wanted else None
            rem_total, rem_input, rem_chunk = self._charge(request, n, rem_total, rem_input, rem_chunk)
            batch.add(request, n)
            added += 1
        if self.chunked is None and self.waiting:
            self._order_waiting()
        while (self.chunked is None and self.waiting and self.num_running < o.max_running_requests
               and rem_total > 0 and rem_input > 0 and (rem_chunk is None or rem_chunk > 0)):
            request = self.waiting.peek()
            num_hit = self.kv.lookup_prefix(request)
            extend = request.num_tokens - num_hit
            if extend + self._clipped_new(request) >= rem_total:
                break   # NO_TOKEN (S5.1)
            if self._paged(extend) > rem_input and added:
                break   # OTHER: the input budget is for one big prompt at most (S5.2)
            n = self._chunk_len(extend, rem_chunk)
            if n <= 0 or not self.kv.allocate(request, n, num_hit_tokens=num_hit):
                break
            if n < extend:
                self.chunked = request   # cut: it leads the next prefill batch (S3)
            self.waiting.pop()
            self.kv.record_admission(request, num_hit)
            if request.num_preemptions == 0:
                request.num_cached_tokens = num_hit
            self.admit(request, now_s)
            request.num_computed_tokens = num_hit
            rem_total, rem_input, rem_chunk = self._charge(request, n, rem_total, rem_input, rem_chunk)
            batch.add(request, n)
            added += 1
        return added > 0

    def _chunk_len(self, extend: int, rem_chunk: int | None) -> int:
        """The whole extend if it fits the chunk budget, else the budget rounded down to whole
        pages (S3)."""
        if rem_chunk is None or extend <= rem_chunk:
            return extend
        return rem_chunk // self.kv.block_size * self.kv.block_size

    def _charge(self, request, n, rem_total, rem_input, rem_chunk):
        """update_prefill_budget: the page-rounded extend, plus the clipped outputs unless the
        prompt is cut (S5.3)."""
        paged = self._paged(n)
        reserve = 0 if self.chunked is request else self._clipped_new(request)
        return (rem_total - paged - reserve, rem_input - paged,
                None if rem_chunk is None else rem_chunk - paged)

    def _paged(self, num_tokens: int) -> int:
        return -(-num_tokens // self.kv.block_size) * self.kv.block_size

    def _clipped_new(self, request: Request) -> int:
        """Outputs still to come, clipped at CLIP_MAX_NEW_TOKENS (S5)."""
        left = rules.output_limit(request, self.max_model_len) - request.num_output_tokens
        return min(max(left, 0), CLIP_MAX_NEW_TOKENS)

    def _running_reservation(self) -> float:
        """What the running requests are expected to still decode: their clipped remaining
        outputs times new_token_ratio (S5, S6)."""
        return sum(self._clipped_new(r) for r in self.running if r is not self.chunked) \
            * self.new_token_ratio

    def _available_tokens(self) -> int:
        kv = self.kv
        free = kv.num_available_blocks if isinstance(kv, RadixKVCache) else kv.num_free_blocks
        return free * kv.block_size

    # -- decode (S6-S8) -----------------------------------------------------------------------
    def _schedule_decodes(self, batch: Batch, decoders: list[Request], decay: bool) -> list:
        """update_running_batch: retract until every decoder's next page fits (S7), else decay
        the ratio (S6); then one token each. Returns the decoders scheduled."""
        if self._decode_pages(decoders) > self._available_tokens() // self.kv.block_size:
            decoders = self._retract(batch, decoders)
        elif decay:
            self._decay()
        for request in decoders:
            if not self.kv.allocate(request, 1):
                raise AssertionError("SGLang decode out of memory after retraction")
            batch.add(request, 1)
        return decoders

    def _decay(self) -> None:
        self.new_token_ratio = max(self.new_token_ratio - self.ratio_decay, self.min_ratio)

    def _decode_pages(self, decoders: list[Request]) -> int:
        return sum(self.kv.blocks_for_step(r, 1) for r in decoders)

    def _retract(self, batch: Batch, decoders: list[Request]) -> list[Request]:
        """retract_decode (S8): victims with the fewest outputs, then the longest prompt, until
        the rest fit (one always stays); the ratio is reset from what the rest have decoded."""
        order = sorted(decoders, key=self.retract_key, reverse=True)
        pages, first = self.kv.block_size, True
        while len(order) > 1 and (first or self._decode_pages(order)
                                  > self._available_tokens() // pages):
            first = False   # at least one victim, even when one would have been enough
            victim = order.pop()
            self.running.remove(victim)
            self.preempt(victim)
            batch.num_preempted += 1
        if self.chunked is not None and self._decode_pages(order) > self._available_tokens() // pages:
            # The last decoder cannot grow past a half-prefilled prompt: servesim retracts the
            # chunked request too rather than stall both (SGLang would fail the step).
            self.running.remove(self.chunked)
            self.preempt(self.chunked)
            self.chunked = None
            batch.num_preempted += 1
        decoded = sum(r.num_output_tokens for r in order)
        wanted = sum(rules.output_limit(r, self.max_model_len) for r in order)
        self.new_token_ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(order)) / wanted)
        kept = set(order)
        return [r for r in decoders if r in kept]

    @staticmethod
    def retract_key(request: Request) -> tuple[int, int]:
        """S8's order: the last in it (fewest outputs, then longest prompt) goes first."""
        return request.num_output_tokens, -request.num_prompt_tokens

    def preempt(self, victim: Request) -> None:
        """A retracted request goes to the back of the waiting queue (S8)."""
        super().preempt(victim)
        self.waiting.remove(victim)
        self.waiting.push(victim)

    # -- schedule policies (S9) ---------------------------------------------------------------
    def _order_waiting(self) -> None:
        """calc_priority: lpm sorts waiting by longest cached prefix (stable: ties keep the
        queue's order) and falls back to fcfs above 128 waiting requests; dfs-weight walks the
        tree (RadixKVCache.dfs_weight_order); fcfs, or no tree, keeps the queue's order."""
        queue, policy = self.waiting, self.options.schedule_policy
        if policy == "fcfs" or not isinstance(self.kv, RadixKVCache):
            return
        if policy == "lpm" and len(queue) > 128:
            return
        requests = list(queue)
        hits = [self.kv.lookup_prefix(r) for r in requests]
        if policy == "lpm":
            order = sorted(range(len(requests)), key=lambda i: -hits[i])
        else:
            order = self.kv.dfs_weight_order(requests)
        queue.clear()
        queue.extend(requests[i] for i in order)
