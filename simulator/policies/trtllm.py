"""TensorRT-LLM in-flight batching: a capacity scheduler, then a token-budget micro-batch
(docs/trtllm-semantics.md; rule numbers T1-T8 there)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from simulator.core import rules
from simulator.core.batch import Batch
from simulator.core.request import Request, RequestStatus
from simulator.kv.prefix_cache import PrefixCachingKVCache
from simulator.policies.base import Scheduler, SchedulerContext, SchedulerError
from simulator.policies.options import (Bool, Fraction, PositiveInt, SchedulerOptions,
                                        options_config)
from simulator.policies.registry import register_scheduler

DEFAULT_MAX_BATCH_SIZE = 2048    # T1: TensorRT-LLM's BuildConfig default
DEFAULT_MAX_NUM_TOKENS = 8192    # T1: TensorRT-LLM's BuildConfig default
DEFAULT_TOKENS_PER_BLOCK = 32    # T7: TensorRT-LLM's default KV block size


@options_config
@dataclass(frozen=True)
class TrtllmOptions(SchedulerOptions):
    max_batch_size: PositiveInt | None = None      # T1: alias of max_num_seqs
    max_num_tokens: PositiveInt | None = None      # T1: alias of max_num_batched_tokens
    enable_chunked_context: Bool = False           # T4: TensorRT-LLM's default is off
    capacity_scheduler_policy: Literal["GUARANTEED_NO_EVICT", "MAX_UTILIZATION"] = "GUARANTEED_NO_EVICT"
    enable_block_reuse: Bool = True                # T6: KvCacheConfig default
    # T7/T8: the pool is built from engine.block_size / gpu_memory_utilization; these may only
    # restate them (None: not checked), since one pool serves every scheduler of a scenario.
    tokens_per_block: PositiveInt | None = None
    free_gpu_memory_fraction: Fraction | None = None

    @property
    def enable_chunked_prefill(self) -> bool:
        """vLLM's name, read by the shared default rule (base.resolve_defaults)."""
        return self.enable_chunked_context

    @property
    def enable_prefix_caching(self) -> bool:
        """The common name base.kv_cache_class and the summaries read."""
        return self.enable_block_reuse


@register_scheduler("trtllm", description="TensorRT-LLM in-flight batching: capacity scheduler "
                    "(GUARANTEED_NO_EVICT reserves prompt + max_tokens; MAX_UTILIZATION pauses "
                    "the newest), then max_num_tokens over running then new requests")
class TrtllmScheduler(Scheduler):
    family = "continuous"
    serves_running_in_order = True
    Options = TrtllmOptions
    prefix_cache_class = PrefixCachingKVCache

    def resolve_defaults(self, options, context: SchedulerContext):
        """T1: TensorRT-LLM's names and defaults fill vLLM's common fields."""
        for trt, vllm in (("max_batch_size", "max_num_seqs"), ("max_num_tokens", "max_num_batched_tokens")):
            a, b = getattr(options, trt), getattr(options, vllm)
            if a is not None and b is not None and a != b:
                raise SchedulerError(f"schedulers.{options.label}.{trt}: {a} differs from {vllm} "
                                     f"({b}); set one of them")
        options = replace(options, max_num_seqs=options.max_batch_size or options.max_num_seqs,
                          max_num_batched_tokens=options.max_num_tokens or options.max_num_batched_tokens)
        trt_context = replace(context, default_max_num_seqs=DEFAULT_MAX_BATCH_SIZE,
                              default_max_num_batched_tokens=DEFAULT_MAX_NUM_TOKENS)
        resolved = super().resolve_defaults(options, trt_context)
        return replace(resolved, max_batch_size=resolved.max_num_seqs,
                       max_num_tokens=resolved.max_num_batched_tokens)

    def check_config(self) -> None:  # [CFG] T1, T7, T8
        o = self.options
        self.check_token_budget(o.enable_chunked_context)
        if o.tokens_per_block is not None and o.tokens_per_block != self.kv.block_size:
            raise SchedulerError(f"schedulers.{o.label}.tokens_per_block: {o.tokens_per_block} differs "
                                 f"from engine.block_size ({self.kv.block_size}); set engine.block_size "
                                 f"(TensorRT-LLM's default is {DEFAULT_TOKENS_PER_BLOCK})")
        if o.free_gpu_memory_fraction is not None:
            raise SchedulerError(f"schedulers.{o.label}.free_gpu_memory_fraction: "
                                 f"{o.free_gpu_memory_fraction} is not a scheduler knob here; "
                                 f"allowed: unset (size the pool with engine.gpu_memory_utilization)")

    @property
    def no_evict(self) -> bool:
        return self.options.capacity_scheduler_policy == "GUARANTEED_NO_EVICT"

    @property
    def may_hold_decoders(self) -> bool:
        return False   # MAX_UTILIZATION pauses by its own order; keep every request in ``running``

    def reserved_tokens(self, request: Request) -> int:
        """T2: GUARANTEED_NO_EVICT reserves a request's prompt plus its maximum new tokens."""
        total = request.num_prompt_tokens + rules.output_limit(request, self.max_model_len)
        return min(total, self.max_model_len)

    def blocks_to_finish(self, request: Request) -> int:
        if self.no_evict:
            return self.kv.blocks_for(self.reserved_tokens(request))
        return super().blocks_to_finish(request)

    def chunk(self, wanted: int, budget: int) -> int:
        """T4: a context chunk: all of it if it fits the budget; with chunked context on, the
        budget rounded down to whole blocks; otherwise nothing (the request waits)."""
        if wanted <= budget:
            return wanted
        if not self.options.enable_chunked_context:
            return 0
        return budget - budget % self.kv.block_size

    def schedule(self, now_s: float, batch: Batch | None = None) -> Batch:
        batch = Batch() if batch is None else batch
        budget = self.options.max_num_batched_tokens - batch.total_tokens
        budget = self._schedule_running(batch, budget)
        if batch.num_preempted == 0:
            self._schedule_new(batch, budget, now_s)
        return batch

    def _schedule_running(self, batch: Batch, budget: int) -> int:
        """T3/T5: running requests in admission order take the budget (generation rows before
        chunked contexts, T4); under MAX_UTILIZATION a block shortage pauses the newest running
        request (it recomputes later)."""
        order = self.running
        if self.options.enable_chunked_context:   # contexts are chunked with what decodes leave
            order = sorted(order, key=lambda r: rules.tokens_wanted(r) > 1)
        for request in list(order):
            if request.status is not RequestStatus.RUNNING:
                continue   # paused earlier in this step
            n = self.chunk(rules.tokens_wanted(request), budget)
            if n <= 0:
                break   # T3: the first request that does not fit ends the step's selection
            while not self.kv.allocate(request, n, self.max_model_len):
                victim = self.running.pop()     # T5: the most recently admitted
                if victim in batch:
                    budget += batch.remove(victim)
                self.preempt(victim)
                batch.num_preempted += 1
                if victim is request:
                    return budget
            batch.add(request, n)
            budget -= n
        return budget

    def _schedule_new(self, batch: Batch, budget: int, now_s: float) -> None:
        """T2/T3: waiting requests in arrival order while seats, budget and capacity last."""
        kv = self.kv
        while self.waiting and budget > 0 and self.num_running < self.options.max_num_seqs:
            request = self.waiting.peek()
            num_hit = kv.lookup_prefix(request) if request.num_computed_tokens == 0 else 0
            n = self.chunk(request.num_tokens - num_hit, budget)
            if n <= 0:
                break   # T3: the head of line waits; later requests are not tried
            grant = self.reserved_tokens(request) - num_hit if self.no_evict else n
            if not kv.allocate(request, grant, self.max_model_len, num_hit_tokens=num_hit):
                break   # T2: no capacity for the head: it waits, nothing is evicted for it
            self.waiting.pop()
            kv.record_admission(request, num_hit)
            if request.num_preemptions == 0:
                request.num_cached_tokens = num_hit
            self.admit(request, now_s)
            request.num_computed_tokens = num_hit
            batch.add(request, n)
            budget -= n

