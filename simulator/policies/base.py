"""What every policy shares: the queues, admission and preemption, and the step's end.

A policy forms each step in ``schedule(now_s, batch)``: it adds its running and waiting requests
to ``batch`` by its own step rules and the request rules of simulator/core/rules.py. A fast path
(simulator/fastpath/) may hand it a batch that already holds decode rows for running requests it
holds outside ``running`` (``num_held`` counts them): the policy then schedules its own requests
around them, with the token budget and seats they use already taken.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import ClassVar

from simulator.core import rules
from simulator.core.batch import Batch
from simulator.core.request import Request, RequestStatus
from simulator.kv.block_pool import KVCache
from simulator.kv.hybrid_pool import HybridKVCache
from simulator.policies.queues import FCFSQueue
from simulator.policies.speculative import SpecDecoder


@dataclass(frozen=True, eq=False)
class SchedulerContext:
    """Engine facts a scheduler needs besides its own options."""
    max_model_len: int
    block_size: int
    # vLLM's defaults depend on the GPU (semantics §8); the builder resolves them from hardware.
    default_max_num_seqs: int = 256
    default_max_num_batched_tokens: int = 2048
    speculative: object | None = None      # engine.speculative (policies/speculative.py)
    acceptance_rng: object | None = None   # the run's generator, for the acceptance draws


class SchedulerError(ValueError):
    """An impossible scheduler configuration, reported before the run."""


class Scheduler:
    family: ClassVar[str] = "base"
    Options: ClassVar[type]
    async_scheduling = False   # True: the engine keeps two batches in flight (semantics §1.6)
    supports_priority = False  # scheduling_policy "priority" (vLLM V1's request queue)
    # One token budget handed out over the running list in its order (vLLM V1): a request's
    # place decides whether it is served. False: every running decoder gets its token.
    serves_running_in_order = False
    # A multi-step decode advance may carry on past a request's last step (it leaves, the rest
    # decode on) when nothing can be admitted; False for policies with their own finish rules.
    decode_runs_through_finishes = True
    checks_pool_at_startup = False   # vLLM's presets refuse a pool below one max_model_len request
    prefix_cache_class: ClassVar[type[KVCache] | None] = None   # the pool of enable_prefix_caching
    supports_speculative = False   # engine.speculative (docs/speculative-decoding-semantics.md)
    # engine.pipeline_parallel_size > 1: a batch in flight per stage (docs/pipeline-parallel-semantics.md)
    supports_pipeline_parallel = False
    # Runs hybrid models: their state blocks come from the KV pool (docs/hybrid-state-semantics.md)
    supports_state_pool: ClassVar[bool] = False

    def __init__(self, options, kv_cache: KVCache, context: SchedulerContext):
        self.kv = kv_cache
        self.max_model_len = context.max_model_len
        self.options = self.resolve_defaults(options, context)
        if self.options.scheduling_policy == "priority" and not self.supports_priority:
            raise SchedulerError(f"schedulers.{self.options.label}.scheduling_policy: 'priority' is "
                                 f"not modelled for {self.options.preset}; allowed: 'fcfs' (priority: "
                                 f"vllm_v1)")
        self.waiting = self.make_waiting_queue()
        self.running: list[Request] = []
        self.num_held = 0   # running requests a fast path holds outside ``running``
        self.num_preemptions = 0
        self._running_seq = itertools.count(1)
        self.kv_pulls: list[Request] = []   # P/D: pulls started this schedule, for the engine
        self.spec = self._spec_decoder(context)
        self.check_config()

    def _spec_decoder(self, context: SchedulerContext) -> SpecDecoder | None:
        if context.speculative is None:
            return None
        if not self.supports_speculative:
            raise SchedulerError(f"engine.speculative: speculative decoding is not modelled for "
                                 f"{self.options.preset!r}; allowed only with vllm_v1 and the "
                                 f"presets that delegate to it")
        return SpecDecoder(context.speculative, context.acceptance_rng)

    # -- hooks a policy may override ---------------------------------------------------------
    @classmethod
    def kv_cache_class(cls, options) -> type[KVCache]:
        """The KV pool these options run on: the policy's prefix cache where its options turn
        prefix caching on, else plain counted blocks."""
        caching = cls.prefix_cache_class is not None and getattr(options, "enable_prefix_caching", False)
        return cls.prefix_cache_class if caching else KVCache

    @classmethod
    def make_kv_cache(cls, options, num_gpu_blocks: int, block_size: int, layout=None) -> KVCache:
        """The pool of a run; ``layout`` (cost_models.hybrid_layout.HybridLayout): a hybrid
        model's, whose state blocks come from the same pool (rule H3)."""
        if layout is not None:
            return HybridKVCache.of_layout(num_gpu_blocks, block_size, layout)
        return cls.kv_cache_class(options)(num_gpu_blocks, block_size)

    @classmethod
    def resolve_class(cls, options) -> type["Scheduler"]:
        """The class that implements these options (a preset may delegate to another policy)."""
        return cls

    def make_waiting_queue(self):
        """The admission order (simulator/policies/queues.py)."""
        return FCFSQueue()

    def resolve_defaults(self, options, context: SchedulerContext):
        """Fill knobs left unset with vLLM's defaults (semantics §8)."""
        budget = options.max_num_batched_tokens or context.default_max_num_batched_tokens
        if not getattr(options, "enable_chunked_prefill", True) and not options.max_num_batched_tokens:
            budget = max(budget, context.max_model_len)  # chunking off raises it (trap 11)
        max_num_seqs = options.max_num_seqs or min(context.default_max_num_seqs, budget)
        return replace(options, max_num_seqs=max_num_seqs, max_num_batched_tokens=budget)

    def check_config(self) -> None:
        """Raise SchedulerError for settings the real engine refuses at startup."""

    def check_token_budget(self, chunked_prefill: bool) -> None:
        """[CFG] startup checks shared by the budgeted presets (rule 1.2; V0's SchedulerConfig
        has the same): every seat can decode in one step, and with chunking off a whole prompt
        (or a resumed prompt plus its outputs) always fits the budget."""
        o = self.options
        if o.max_num_batched_tokens < o.max_num_seqs:
            raise SchedulerError(f"schedulers.{o.label}.max_num_batched_tokens: {o.max_num_batched_tokens}"
                                 f" must be >= max_num_seqs ({o.max_num_seqs})")
        if not chunked_prefill and o.max_num_batched_tokens < self.max_model_len:
            raise SchedulerError(f"schedulers.{o.label}.max_num_batched_tokens: {o.max_num_batched_tokens}"
                                 f" must be >= max_model_len ({self.max_model_len}) with chunked prefill off")

    def check_pool_holds_max_model_len(self, num_memory_blocks: int, where: str) -> None:
        """[CFG] vLLM refuses at start-up a KV cache whose memory cannot hold one request of
        max_model_len tokens (V1's check_enough_kv_cache_memory, V0's cache-size check). It
        checks the memory, before num_gpu_blocks_override: ``num_memory_blocks`` is what the
        memory holds (``where`` says how), whatever num_gpu_blocks the scenario gives."""
        if not self.checks_pool_at_startup:
            return
        need = self.kv.blocks_for(self.max_model_len)   # a hybrid pool: its state blocks too
        if need > num_memory_blocks:
            raise SchedulerError(
                f"engine.max_model_len: {self.max_model_len} tokens need {need} KV blocks of "
                f"{self.kv.block_size}, more than the {num_memory_blocks} {where}; "
                f"{self.options.preset} refuses this at start-up: lower max_model_len to at most "
                f"{self.kv.tokens_in(num_memory_blocks)} or raise gpu_memory_utilization")

    def schedule(self, now_s: float, batch: Batch | None = None) -> Batch:
        """The next step: ``batch`` (new if None) with this policy's requests added."""
        raise NotImplementedError

    def next_wakeup_s(self, now_s: float) -> float | None:
        """When an idle engine must look again although nothing arrives (None: only on arrival)."""
        return None

    def admission_headroom_blocks(self) -> int:
        """Blocks that must stay free when a request is admitted (a block-manager watermark)."""
        return 0

    def blocks_to_finish(self, request: Request) -> int:
        """KV blocks one request needs at its peak with the cache to itself (paged: P+O-1 tokens,
        rule 2.2 example, and with speculation its last verify's drafts and lookahead, plus any
        admission watermark, since a preempted request is re-admitted with its outputs); a
        policy that reserves more up front overrides this."""
        peak = request.num_prompt_tokens + rules.output_limit(request, self.max_model_len) - 1
        if self.spec is not None:   # its last verify step's drafts and lookahead (rule S6)
            extra = self.spec.num_spec_tokens + self.spec.num_lookahead_tokens
            peak = min(peak + extra, self.max_model_len)
        return self.kv.blocks_for(peak) + self.admission_headroom_blocks()

    def max_request_tokens(self) -> int:
        """The longest prompt this policy can ever admit (impossible requests are caught up front)."""
        return self.max_model_len - 1

    # -- what a fast path asks ---------------------------------------------------------------
    @property
    def may_hold_decoders(self) -> bool:
        """Whether a fast path may hold steady decoders outside ``running`` and add them to each
        step as decode rows: true where nothing but their own token and blocks is decided about
        them while they decode (no preemption picks them by a key of its own, no tokens in
        flight)."""
        return not self.async_scheduling

    def decodes_running_next(self) -> bool:
        """Whether the coming step gives every running decoder its token (False where a step can
        hold prefills only: vLLM V0)."""
        return True

    def admission_blocked(self) -> bool:
        """True when the coming steps cannot admit a waiting request as long as only decodes run
        (nothing frees a seat or a block): the condition for advancing several steps at once.
        Policies answer for their own admission rules; False is always safe."""
        return False

    def finish_can_admit(self) -> bool:
        """Whether a request finishing now could let a waiting one in at the next step (a
        multi-step advance must then stop at the finish)."""
        return bool(self.waiting)

    # -- shared --------------------------------------------------------------------------------
    @property
    def num_running(self) -> int:
        """``len(running)`` as vLLM counts it (trap 5), held decoders included."""
        return len(self.running) + self.num_held

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + self.num_running

    def add(self, request: Request) -> None:
        request.status = RequestStatus.WAITING
        self.waiting.push(request)

    def update_from_output(self, batch: Batch, now_s: float) -> list[Request]:
        """Every listed request that caught up samples one token (rule 1.3.1); those that stop
        (rule 1.3.2) finish and free their KV (rule 1.3.3). Returns them."""
        if self.spec is not None:
            return self._update_with_spec(batch, now_s)
        finished = []
        running, max_model_len = RequestStatus.RUNNING, self.max_model_len
        for request, samples in zip(batch.requests, batch.samples):
            if not samples:
                continue  # a partial prefill chunk emits nothing (trap 1)
            if request.num_stale_samples:
                # Scheduled before a preemption: discarded, even if the request is running
                # again (steps end in order, so a request's stale rows end first).
                request.num_stale_samples -= 1
                batch.num_discarded += 1
                continue
            if request.num_output_placeholders:
                request.num_output_placeholders -= 1
            if request.status is not running:
                batch.num_discarded += 1
                continue  # preempted while this step was in flight: the token is discarded
            request.record_token(now_s)
            if rules.is_stopped(request, max_model_len):
                finished.append(request)
        if finished:
            self.finish(finished, now_s)
        return finished

    def _update_with_spec(self, batch: Batch, now_s: float) -> list[Request]:
        """Speculative decoding's step end: each sampling request emits 1 + its accepted drafts
        as one chunk, none past its stop (rules S3, S4), and, unless it stops, holds new drafts
        (S1). Async scheduling is refused with speculation, so no token is in flight."""
        finished = []
        spec, max_model_len, running = self.spec, self.max_model_len, RequestStatus.RUNNING
        for request, samples in zip(batch.requests, batch.samples):
            if not samples:
                continue
            if request.status is not running:
                batch.num_discarded += 1
                continue
            count = spec.verify(request)
            room = rules.output_limit(request, max_model_len) - request.num_output_tokens
            request.record_chunk(count if count <= room else room, now_s)
            if rules.is_stopped(request, max_model_len):
                finished.append(request)
            else:
                spec.propose(request)
        if finished:
            self.finish(finished, now_s)
        return finished

    def finish(self, finished: list[Request], now_s: float) -> None:
        """Finished listed requests leave ``running`` and release their seats and blocks."""
        self.release(finished, now_s)
        done = set(finished)
        self.running = [r for r in self.running if r not in done]

    def release(self, finished: list[Request], now_s: float) -> None:
        """Finished requests free their blocks now; seats and blocks are usable from the next
        schedule() (trap 9). Every finished request passes here, held ones too."""
        for request in finished:
            request.status = RequestStatus.FINISHED
            request.finish_s = now_s
            if not request.do_remote_decode:   # P/D: a prefill keeps them for the pull
                self.kv.free(request)

    # -- P/D disaggregation (docs/disaggregation-semantics.md) -------------------------------------
    supports_remote_kv = False   # the decode side's pull (WAITING_FOR_REMOTE_KVS): vLLM V1 only

    def finish_sending(self, request: Request) -> None:
        """P/D, prefill side: the decode side has read a finished request's KV; its blocks are
        freed now (vLLM frees them on finished_sending, rule D3)."""
        request.do_remote_decode = False
        self.kv.free(request)

    def finish_receiving(self, request: Request) -> None:
        """P/D, decode side: the prompt's KV has arrived. Its blocks count as computed, less
        the last token when they hold all of it: that one is computed again for the logits the
        first sample needs (vLLM's _update_waiting_for_remote_kv, rule D4)."""
        held = min(self.kv.num_blocks_of(request) * self.kv.block_size, request.num_tokens)
        request.num_computed_tokens = held - 1 if held == request.num_tokens else held
        request.status = RequestStatus.WAITING

    def admit(self, request: Request, now_s: float) -> None:
        if request.scheduled_s is None:
            request.scheduled_s = now_s
        self.enter_running(request)

    def enter_running(self, request: Request) -> None:
        """Append to ``running`` (admission or resume: the tail, rule 2.5)."""
        request.status = RequestStatus.RUNNING
        request.running_seq = next(self._running_seq)
        self.running.append(request)

    def preempt(self, victim: Request) -> None:
        """Recompute preemption: drop KV, keep outputs, back to the head of waiting (rule 2.5).
        The caller has taken the victim out of ``running``."""
        self.kv.free(victim)
        victim.reset_for_recompute()
        self.waiting.push_preempted(victim)
        self.num_preemptions += 1

    def schedule_decodes(self, batch: Batch, requests) -> int:
        """One decode token for each of ``requests`` (running decoders, in order), with a new
        block when the token needs one (rule 2.2); on a shortage the running tail is preempted
        until the block fits or the requester itself goes (V0 and Sarathi, semantics §3-§4).
        Returns the number scheduled."""
        kv, running, preempted = self.kv, self.running, RequestStatus.PREEMPTED
        num_scheduled = 0
        for request in requests:
            if request.status is preempted:
                continue  # preempted by an earlier decode of this step
            while not kv.allocate(request, 1):
                victim = running.pop()
                self.preempt(victim)
                batch.num_preempted += 1
                if victim is request:
                    return num_scheduled
            batch.add(request, 1)
            num_scheduled += 1
        return num_scheduled

    def schedule_every_running(self, batch: Batch) -> None:
        """Every running request advances one iteration with all the tokens it wants (Orca,
        static batching: their KV was reserved at admission, so nothing is allocated)."""
        for request in self.running:
            batch.add(request, rules.tokens_wanted(request))
