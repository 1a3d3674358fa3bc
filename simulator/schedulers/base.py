"""What every scheduler shares: queues, the step-end bookkeeping, recompute preemption."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import ClassVar

from simulator.batch import Batch
from simulator.cohort_step import CohortStep
from simulator.decode_cohort import DecodeCohort
from simulator.kv_cache import KVCache
from simulator.request import Request, RequestStatus


def _decodes_next(r: Request) -> bool:
    """The request's next step is a decode (and no token of it is in flight)."""
    return (r.num_computed_tokens == r.num_prompt_tokens + r.num_output_tokens - 1
            and r.num_output_tokens > 0 and not r.num_output_placeholders)


@dataclass(frozen=True, eq=False)   # compared by identity (runner.PreparedRun)
class SchedulerContext:
    """Engine facts a scheduler needs besides its own options."""
    max_model_len: int
    block_size: int
    # vLLM's defaults depend on the GPU (semantics §8); the builder resolves them from hardware.
    default_max_num_seqs: int = 256
    default_max_num_batched_tokens: int = 2048


class SchedulerError(ValueError):
    """An impossible scheduler configuration, reported before the run."""


class Scheduler:
    family: ClassVar[str] = "base"
    Options: ClassVar[type]
    async_scheduling = False   # True: the engine keeps two batches in flight (semantics §1.6)
    supports_priority = False  # scheduling_policy "priority" (vLLM V1's request queue)
    # A multi-step decode advance may carry on past a request's last step (it leaves, the rest
    # decode on) when nothing can be admitted; False for policies with their own finish rules.
    decode_runs_through_finishes = True
    cohort: DecodeCohort | None = None   # steady decoders kept as one (enable_cohort)
    # False when a request's fields may still change after Scheduler.finish (a result writer
    # then reads the requests only once the run is over, not as they finish).
    finished_requests_final = True
    # True when the cohort's members must lead the running order (a budget handed out in
    # running order, as in vLLM V1); False when every decoder gets its token whatever its place.
    cohort_leads_running = True

    def __init__(self, options, kv_cache: KVCache, context: SchedulerContext):
        self.kv = kv_cache
        self.max_model_len = context.max_model_len
        self.options = self.resolve_defaults(options, context)
        if self.options.scheduling_policy == "priority" and not self.supports_priority:
            raise SchedulerError(f"schedulers.{self.options.label}.scheduling_policy: 'priority' is "
                                 f"not modelled for {self.options.preset}; allowed: 'fcfs' (priority: "
                                 f"vllm_v1)")
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.num_preemptions = 0
        self.check_config()

    # -- hooks a policy may override ---------------------------------------------------------
    @classmethod
    def make_kv_cache(cls, options, num_gpu_blocks: int, block_size: int) -> KVCache:
        return KVCache(num_gpu_blocks, block_size)

    @classmethod
    def resolve_class(cls, options) -> type["Scheduler"]:
        """The class that implements these options (a preset may delegate to another policy)."""
        return cls

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

    def schedule(self, now_s: float) -> Batch:
        raise NotImplementedError

    def next_wakeup_s(self, now_s: float) -> float | None:
        """When an idle engine must look again although nothing arrives (None: only on arrival)."""
        return None

    def admission_headroom_blocks(self) -> int:
        """Blocks that must stay free when a request is admitted (a block-manager watermark)."""
        return 0

    def blocks_to_finish(self, request: Request) -> int:
        """KV blocks one request needs at its peak with the cache to itself (paged: P+O-1 tokens,
        rule 2.2 example, plus any admission watermark, since a preempted request is re-admitted
        with its outputs); a policy that reserves more up front overrides this."""
        peak = min(request.num_prompt_tokens + request.max_output_tokens - 1, self.max_model_len)
        return self.kv.blocks_for(peak) + self.admission_headroom_blocks()

    def admission_blocked(self) -> bool:
        """True when the coming steps cannot admit a waiting request as long as only decodes run
        (nothing frees a seat or a block): the condition for advancing several steps at once.
        Policies answer for their own admission rules; False is always safe."""
        return False

    def enable_cohort(self) -> bool:
        """Keep steady decoders as a DecodeCohort (the engine asks when nothing else reads the
        requests mid-run); True if this policy does (keeps_cohort)."""
        if not self.keeps_cohort():
            return False
        self.cohort = DecodeCohort(self.kv, self.max_model_len)
        return True

    def keeps_cohort(self) -> bool:
        """Whether this policy, as configured, handles a cohort's rows in schedule() (see
        VllmV1Scheduler, schedule_decodes_with_cohort, schedule_every_running)."""
        return False

    def non_members(self) -> list[Request]:
        """The running requests outside the decode cohort, in running order."""
        cohort = self.cohort
        if cohort is None or not cohort.members:
            return self.running
        return cohort.outside(self.running)

    def schedule_decodes_with_cohort(self, batch: Batch, decoders: list[Request]) -> int:
        """schedule_decodes for policies where every decoder gets a token (V0, Sarathi): the
        cohort's members as one block of rows, the other ``decoders`` (running decoders outside
        the cohort, in running order) one by one, when all their new blocks are free; else the
        cohort is dissolved and every decoder goes one by one, in running order."""
        cohort = self.cohort
        if cohort is not None and cohort.members:
            kv = self.kv
            due = sum(1 for r in decoders if r.num_computed_tokens >= kv.num_token_slots_of(r)) if decoders else 0
            if cohort.begin_step(reserve_blocks=due):
                batch.cohort_rows = cohort.decode_rows()
                return len(cohort.members) + (self.schedule_decodes(batch, decoders) if decoders else 0)
            chosen = set(cohort.members).union(decoders)
            cohort.dissolve()
            decoders = [r for r in self.running if r in chosen]
        return self.schedule_decodes(batch, decoders)

    def schedule_every_running(self, batch: Batch) -> None:
        """Every running request advances one iteration (Orca, static batching): a cohort's
        members as one block of rows (their KV was reserved at admission, so they never take a
        block), the others with all their remaining tokens."""
        listed, cohort = self.running, self.cohort
        if cohort is not None and cohort.members:
            if cohort.begin_step():
                batch.cohort_rows = cohort.decode_rows()
                listed = self.non_members()
            else:
                cohort.dissolve()
        for request in listed:
            self.schedule_tokens(batch, request, request.num_remaining_tokens)

    def finish_can_admit(self) -> bool:
        """Whether a request finishing now could let a waiting one in at the next step (a
        multi-step advance must then stop at the finish)."""
        return bool(self.waiting)

    def decode_run_state(self) -> tuple | DecodeCohort | None:
        """(steps to finish, context) per running request, when every running request is certain
        to decode one token per step until its last (1 = the next step) with no admission (the
        cohort itself when every running request is a member); None when unsure (someone is
        not decoding, or a request may be admitted)."""
        if not self.running or not self.admission_blocked():
            return None
        if self.cohort is not None:   # the cohort plans its own runs (DecodeCohort.plan_run)
            return self.cohort if len(self.cohort.members) == len(self.running) else None
        steps, contexts, max_model_len = [], [], self.max_model_len
        for r in self.running:
            num_tokens = r.num_prompt_tokens + r.num_output_tokens
            computed = r.num_computed_tokens
            if computed != num_tokens - 1 or r.num_output_tokens == 0:
                return None  # not decoding (a 1-token last prefill chunk is not a decode)
            # rule 1.3.2 (ignore_eos): max_tokens reached, or the context is full.
            steps.append(min(r.max_output_tokens - r.num_output_tokens, max_model_len - num_tokens))
            contexts.append(computed)
        return steps, contexts

    def max_request_tokens(self) -> int:
        """The longest prompt this policy can ever admit (impossible requests are caught up front)."""
        return self.max_model_len - 1

    # -- shared --------------------------------------------------------------------------------
    def add(self, request: Request) -> None:
        request.status = RequestStatus.WAITING
        self.waiting.append(request)

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.running)

    def on_step_end(self, batch: Batch | CohortStep, now_s: float) -> list[Request]:
        """Every request that caught up samples one token (rule 1.3.1); finished ones free KV."""
        if batch.__class__ is CohortStep:
            return self._end_cohort_step(batch, now_s)
        cohort = self.cohort
        finished = cohort.end_step(now_s) if batch.cohort_rows is not None else []
        max_model_len = self.max_model_len
        running = RequestStatus.RUNNING
        for request, samples in zip(batch.requests, batch.samples):
            if not samples:
                continue  # a partial prefill chunk emits nothing (trap 1)
            if request.num_output_placeholders:
                request.num_output_placeholders -= 1
            if request.status is not running:
                continue  # preempted while this step was in flight: the token is discarded
            num_tokens = request.num_prompt_tokens + request.num_output_tokens
            request.record_token(now_s)
            # rule 1.3.2 (ignore_eos): max_tokens reached, or the context is full.
            if (request.num_output_tokens >= request.max_output_tokens
                    or num_tokens + 1 >= max_model_len):
                finished.append(request)
        if finished:
            self.finish(finished, now_s)
        if cohort is not None:
            self._join_cohort(batch.requests)
        return finished

    def _end_cohort_step(self, step: CohortStep, now_s: float) -> list[Request]:
        """on_step_end for a CohortStep: its one request is running (the step preempted
        nobody) and has no tokens in flight (a cohort means no async scheduling)."""
        cohort = self.cohort
        finished = cohort.end_step(now_s) if step.cohort_rows is not None else []
        if step.sample:
            request = step.request
            num_tokens = request.num_prompt_tokens + request.num_output_tokens
            request.record_token(now_s)
            # rule 1.3.2 (ignore_eos): max_tokens reached, or the context is full.
            if (request.num_output_tokens >= request.max_output_tokens
                    or num_tokens + 1 >= self.max_model_len):
                finished.append(request)
        if finished:
            self.finish(finished, now_s)
        self._join_cohort((step.request,))
        return finished

    def _join_cohort(self, listed) -> None:
        """Requests that decode from now on join the cohort: where members lead the running
        order, only while every running request before them is a member; else any of this
        step's ``listed`` requests that now decodes."""
        cohort, running = self.cohort, self.running
        if self.cohort_leads_running:
            # _decodes_next written out: every admission passes here once it has sampled
            num_members = len(cohort.members)
            while num_members < len(running):
                r = running[num_members]
                if (r.num_computed_tokens != r.num_prompt_tokens + r.num_output_tokens - 1
                        or r.num_output_tokens == 0 or r.num_output_placeholders):
                    return
                cohort.join(r)
                num_members += 1
            return
        members = cohort.members
        for r in listed:
            if r.status is RequestStatus.RUNNING and r not in members and _decodes_next(r):
                cohort.join(r)

    def finish(self, finished: list[Request], now_s: float) -> None:
        for request in finished:
            request.status = RequestStatus.FINISHED
            request.finish_s = now_s
            self.kv.free(request)
        if len(finished) <= 8:   # list.remove scans in C (8: a step's usual few, not tuned)
            for request in finished:
                self.running.remove(request)
        else:
            done = set(finished)
            self.running = [r for r in self.running if r not in done]

    def admit(self, request: Request, now_s: float) -> None:
        request.status = RequestStatus.RUNNING
        if request.scheduled_s is None:
            request.scheduled_s = now_s
        self.running.append(request)

    def preempt(self, victim: Request) -> None:
        """Recompute preemption: drop KV, keep outputs, back to the head of waiting (rule 2.5)."""
        self.kv.free(victim)
        victim.reset_for_recompute()
        self.waiting.appendleft(victim)
        self.num_preemptions += 1

    def schedule_decodes(self, batch: Batch, requests) -> int:
        """One decode token for each of ``requests`` (running decoders, in order), with a new
        block when the token starts one; on a shortage the running tail is preempted until the
        block fits or the requester itself goes (V0 and Sarathi, semantics §3-§4). Returns the
        number scheduled. Every decode of every step passes here: the block test and the batch
        append are inlined (KVCache.allocate and Batch.add say the same)."""
        kv, running, preempted = self.kv, self.running, RequestStatus.PREEMPTED
        count_only = type(kv) is KVCache
        held, bs = kv._num_blocks, kv.block_size
        add_request, add_new, add_ctx, add_samples = (
            batch.requests.append, batch.new_tokens.append, batch.context_tokens.append,
            batch.samples.append)
        num_scheduled = 0
        for request in requests:
            if request.status is preempted:
                continue  # preempted by an earlier decode of this step
            computed = request.num_computed_tokens
            if not count_only or computed >= held.get(request, 0) * bs:
                while not kv.allocate(request, 1):
                    victim = running.pop()
                    self.preempt(victim)
                    batch.num_preempted += 1
                    if victim is request:
                        return num_scheduled
            add_request(request)
            add_new(1)
            add_ctx(computed)
            add_samples(computed + 1 >= request.num_prompt_tokens + request.num_output_tokens
                        + request.num_output_placeholders)
            request.num_computed_tokens = computed + 1
            num_scheduled += 1
        return num_scheduled

    @staticmethod
    def schedule_tokens(batch: Batch, request: Request, num_tokens: int) -> None:
        """Add to the batch and advance C at schedule time, as vLLM V1 does (rule 1.2)."""
        batch.add(request, num_tokens)
        request.num_computed_tokens += num_tokens
