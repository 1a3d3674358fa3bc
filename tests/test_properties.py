"""Properties every scheduler must keep on random small workloads (hypothesis: fresh examples on
every run under the default ``ci`` profile, a fixed sequence under ``repro``; tests/conftest.py).

Each example draws a scheduler configuration (the five presets plus vLLM V0 with chunking, V1
with chunking off, V1 with the priority policy, V1 with the older admission, V1 on a hybrid
model's pool of 1-2 attention and 1-3 state groups: docs/hybrid-state-semantics.md), the engine limits
(block size, max_model_len, max_num_seqs, token budget, all respecting the startup checks of
rule 1.2 [CFG]), a KV cache from tight (exactly what the longest request needs under the policy)
to roomy, and up to 24 requests with random gaps, lengths and priorities. ``Probe`` wraps the
scheduler's ``schedule``/``update_from_output``/``preempt`` and checks every step; the run's end is
checked against per-request expectations. Every probed (step-by-step) run is also run on the
engine's default path (decode fast-forward on) and must match it exactly. Hand-worked cases on
the same Probe: tests/test_properties_cases.py; the scenario path (validate_scenario + prepare +
simulate): tests/test_properties_refusal.py and tests/test_properties_scenarios.py.

Token accounting (checked exactly): every scheduled token is executed, since a batch is what the
engine runs (rolled-back tokens, rule 2.5 priority, are removed from the batch first). A request
that finishes has C = P + O - 1 (its last step sampled the O-th token, rule 1.3.1; the last
token never gets KV, rule 2.2 example). A preemption resets C to 0 (rule 2.5), discarding the C
it held when its step began: tokens of earlier steps, executed but lost. So
    sum over steps of scheduled tokens = sum over requests of (P + O - 1)
                                         + sum over preemptions of the victim's C at step start.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cost_models.unit import UnitCostModel
from simulator.engine.simulation import Simulation
from simulator.kv.block_pool import KVCache
from simulator.kv.hybrid_pool import HybridKVCache
from simulator.results.step_table import StepTable
from simulator.core.request import Request, RequestStatus
from simulator.policies.base import SchedulerContext, SchedulerError
from simulator.policies.registry import get_preset
from simulator.policies.speculative import SpeculativeOptions

# Examples per CI run: 18 configs x 60 here, 50 in tests/test_properties_refusal.py and 8 presets
# x 100 in tests/test_properties_scenarios.py: 1,930 in all. Randomness, database and deadline are
# the profile's (tests/conftest.py): fresh examples each run, a fixed sequence under "repro".
PROPERTY = settings(max_examples=60,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
ROOMY_BLOCKS = 1 << 20   # a pool no drawn request outgrows

CONFIGS = {
    "static": {"preset": "static"},
    "static_hf": {"preset": "static", "variant": "hf"},
    "orca": {"preset": "orca"},
    "orca_reserve_request": {"preset": "orca", "reserve": "request"},
    "vllm_v0": {"preset": "vllm_v0"},
    "vllm_v0_chunked": {"preset": "vllm_v0", "enable_chunked_prefill": True},
    "sarathi": {"preset": "sarathi"},
    "vllm_v1": {"preset": "vllm_v1"},
    "vllm_v1_no_chunking": {"preset": "vllm_v1", "enable_chunked_prefill": False},
    "vllm_v1_priority": {"preset": "vllm_v1", "scheduling_policy": "priority"},
    "vllm_v1_older": {"preset": "vllm_v1", "reserve_full_isl": False},
    "vllm_v1_async": {"preset": "vllm_v1", "async_scheduling": True},
    "vllm_v1_no_prefix_cache": {"preset": "vllm_v1", "enable_prefix_caching": False},
    # Speculative decoding (docs/speculative-decoding-semantics.md): k and the acceptance drawn.
    "vllm_v1_spec_ngram": {"preset": "vllm_v1", "enable_prefix_caching": False, "speculative": "ngram"},
    "vllm_v1_spec_eagle": {"preset": "vllm_v1", "speculative": "eagle"},   # lookahead slots (S6)
    # A hybrid model's pool: attention and state blocks from one pool (hybrid-state-semantics H3-H6).
    "vllm_v1_hybrid": {"preset": "vllm_v1", "enable_prefix_caching": False, "hybrid": True},
    "sglang": {"preset": "sglang"},
    "sglang_mixed_chunk": {"preset": "sglang", "enable_mixed_chunk": True, "chunked_prefill_size": 16,
                           "new_token_ratio_decay_steps": 1},
}
BUDGETED = {"vllm_v0", "sarathi", "vllm_v1"}   # presets with a per-step token budget


@dataclass(frozen=True)
class Case:
    options: dict
    block_size: int
    max_model_len: int
    num_gpu_blocks: int
    step_time_s: float
    prefill_step_time_s: float | None
    requests: tuple[tuple[float, int, int, int], ...]   # (arrival_s, prompt, max_output, priority)
    speculative: SpeculativeOptions | None = None


def _context(max_model_len: int, block_size: int, speculative) -> SchedulerContext:
    # A fresh generator per scheduler: the probed and the default run draw the same acceptances.
    return SchedulerContext(max_model_len=max_model_len, block_size=block_size,
                            speculative=speculative,
                            acceptance_rng=np.random.default_rng(7) if speculative else None)


def build_scheduler(options: dict, num_gpu_blocks: int, block_size: int, max_model_len: int,
                    speculative: SpeculativeOptions | None = None):
    options = dict(options)
    groups = options.pop("hybrid", None)   # (attention groups, state groups) of a hybrid pool
    preset = get_preset(options["preset"])
    opts = preset.cls.Options(**{**preset.defaults, **options})
    kv = (HybridKVCache(num_gpu_blocks, block_size, num_attention_groups=groups[0],
                        num_state_groups=groups[1]) if groups else KVCache(num_gpu_blocks, block_size))
    return preset.cls.resolve_class(opts)(opts, kv, _context(max_model_len, block_size, speculative))


def _speculative(draw, method: str | None) -> SpeculativeOptions | None:
    if method is None:
        return None
    k = draw(st.integers(1, 4))
    rates = sorted(draw(st.lists(st.sampled_from([0.0, 0.3, 0.7, 1.0]), min_size=k, max_size=k)),
                   reverse=True)
    return SpeculativeOptions(method=method, num_speculative_tokens=k, acceptance_rates=tuple(rates))


@st.composite
def cases(draw, config: str) -> Case:
    options = dict(CONFIGS[config])
    spec = _speculative(draw, options.pop("speculative", None))
    block_size = draw(st.sampled_from([1, 2, 4, 16]))
    max_model_len = draw(st.integers(8, 80))
    options["max_num_seqs"] = draw(st.integers(1, 6))
    if options["preset"] in BUDGETED:
        # [CFG] startup checks: budget >= max_num_seqs; with chunking off (V0's default) also
        # budget >= max_model_len (rule 1.2; V0's SchedulerConfig has the same check).
        chunking = options.get("enable_chunked_prefill", options["preset"] == "vllm_v1")
        low = max(options["max_num_seqs"],
                  0 if chunking or options["preset"] == "sarathi" else max_model_len)
        options["max_num_batched_tokens"] = draw(st.integers(low, low + 64))
    if options["preset"] == "vllm_v1":
        options["long_prefill_token_threshold"] = draw(st.sampled_from([0, 0, 3, 10]))
        options["watermark"] = draw(st.sampled_from([0.0, 0.0, 0.05]))
    if options["preset"] == "static":
        options["max_wait_s"] = draw(st.sampled_from([0.0, 0.5, 3.0]))
    if options.get("hybrid"):
        options["hybrid"] = (draw(st.integers(1, 2)), draw(st.integers(1, 3)))
    probe = build_scheduler(options, ROOMY_BLOCKS, block_size, max_model_len, spec)
    max_prompt = min(probe.max_request_tokens(), max_model_len)
    rows = draw(st.lists(st.tuples(st.sampled_from([0.0, 0.0, 0.5, 1.0, 2.5, 6.0]),
                                   st.integers(1, max_prompt), st.integers(1, 40), st.integers(0, 2)),
                         min_size=1, max_size=24))
    arrivals = np.cumsum([gap for gap, *_ in rows]).tolist()
    requests = tuple((a, p, o, prio) for a, (_, p, o, prio) in zip(arrivals, rows))
    need = smallest_pool(lambda blocks: build_scheduler(options, blocks, block_size, max_model_len, spec),
                         [Request(0, 0.0, p, o) for _, p, o, _ in requests])
    total = need + draw(st.integers(0, 3 * need))
    return Case(options, block_size, max_model_len, total + 1,   # + the null block (rule 2.1)
                draw(st.sampled_from([1.0, 0.5])), draw(st.sampled_from([None, 1.5])), requests, spec)


def smallest_pool(make, requests: list[Request], limit: int = ROOMY_BLOCKS) -> int:
    """The fewest usable blocks with which ``make(num_gpu_blocks)`` passes the policy's start-up
    checks and holds every request alone (its ``blocks_to_finish``, watermark included). Both
    only get easier as the pool grows, so bisect."""
    def fits(total: int) -> bool:
        try:
            scheduler = make(total + 1)   # + the null block (rule 2.1)
        except SchedulerError:
            return False
        return all(scheduler.blocks_to_finish(r) <= scheduler.kv.num_total_blocks for r in requests)
    assert fits(limit), "no pool holds these requests"
    low, high = 1, limit
    while low < high:
        mid = (low + high) // 2
        low, high = (low, mid) if fits(mid) else (mid + 1, high)
    return low


def expected_outputs(prompt: int, max_output: int, max_model_len: int) -> int:
    """Rule 1.3.2: stop at max_tokens or when num_tokens reaches max_model_len (>= 1 token)."""
    return max(1, min(max_output, max_model_len - prompt))


class Probe:
    """Checks the scheduler's state around every step; counts executed and lost tokens."""

    def __init__(self, scheduler, case: Case):
        self.s, self.case = scheduler, case
        self.max_seats = getattr(scheduler, "max_batch_size", scheduler.options.max_num_seqs)
        budgeted = case.options["preset"] in BUDGETED
        self.budget = scheduler.options.max_num_batched_tokens if budgeted else None
        self.executed_tokens = self.lost_tokens = 0
        # Decided in a schedule() that produced no step: the engine counts them in the next step.
        self.carried_preemptions = 0
        self.rows: list[tuple[int, int, int]] = []      # (tokens, seqs, preemptions) per executed step
        self.finishes: Counter[int] = Counter()
        self.start_c: dict[Request, int] = {}
        self._schedule, self._update_from_output, self._preempt = (
            scheduler.schedule, scheduler.update_from_output, scheduler.preempt)
        scheduler.schedule, scheduler.update_from_output, scheduler.preempt = (
            self.schedule, self.update_from_output, self.preempt)

    def check_pool(self) -> None:
        kv, running = self.s.kv, self.s.running
        kv.check_invariants()
        assert 0.0 <= kv.usage <= 1.0
        assert len(running) <= self.max_seats                         # trap 5
        assert set(running).isdisjoint(self.s.waiting)
        assert sum(kv.num_blocks_of(r) for r in running) == kv.num_used_blocks   # only running hold KV
        if isinstance(kv, HybridKVCache):   # a state slot exactly while holding blocks (rule H4)
            holders = [r for r in running if kv.num_blocks_of(r)]
            assert kv.num_state_slots_used == len(holders) <= kv.num_state_slots
            state_blocks = kv.num_state_slots_used * kv.state_blocks_per_request
            attention_blocks = sum(kv.token_slots_of(r) for r in holders) // kv.block_size
            assert state_blocks + attention_blocks * kv.num_attention_groups == kv.num_used_blocks

    def schedule(self, now_s: float):
        self.start_c = {r: r.num_computed_tokens for r in self.s.running}
        batch = self._schedule(now_s)
        self.check_pool()
        if self.budget is not None:
            assert batch.total_tokens <= self.budget                  # rule 1.2 budget
        running = set(self.s.running)
        assert len(set(batch.requests)) == len(batch)                   # once per step
        for r, n, context in zip(batch.requests, batch.new_tokens, batch.context_tokens):
            assert r in running and r.arrival_s <= now_s and n >= 1
            # C advanced at schedule time by n, never past the tokens the request has (rule 1.2),
            # counting async placeholders for tokens still in flight (§1.6) and the drafts it
            # verifies (rule S2).
            assert context + n == r.num_computed_tokens <= (r.num_tokens + r.num_output_placeholders
                                                            + r.num_scheduled_spec_tokens)
            # Slots for C + n (rule 2.2 step 1, trap 2), capped at max_model_len.
            assert self.s.kv.token_slots_of(r) >= min(r.num_computed_tokens, self.case.max_model_len)
        if not batch:
            self.carried_preemptions += batch.num_preempted
        else:
            self.executed_tokens += batch.total_tokens
            pad = batch.num_padding_rows
            preempted = batch.num_preempted + self.carried_preemptions
            self.carried_preemptions = 0
            self.rows.append((batch.total_tokens + pad, len(batch) + pad, preempted))
        return batch

    def preempt(self, victim: Request) -> None:
        assert victim in self.start_c, "a victim must have been running when the step began"
        self.lost_tokens += self.start_c[victim]
        self._preempt(victim)

    def update_from_output(self, batch, now_s: float):
        finished = self._update_from_output(batch, now_s)
        for r in finished:
            self.finishes[r.request_id] += 1
            assert self.s.kv.num_blocks_of(r) == 0 and r not in self.s.running
        self.check_pool()
        return finished


def _simulate(case: Case, probed: bool):
    scheduler = build_scheduler(case.options, case.num_gpu_blocks, case.block_size, case.max_model_len,
                                case.speculative)
    requests = [Request(i, a, p, o, priority=prio) for i, (a, p, o, prio) in enumerate(case.requests)]
    for r in requests:
        r.itl_gaps_s = []
    probe = Probe(scheduler, case) if probed else None
    step_log = StepTable()
    cost = UnitCostModel(case.step_time_s, case.prefill_step_time_s)
    # The probe must see every step, so no decode fast-forward; the unprobed run uses the default.
    sim_options = {"fast_path": False} if probed else {}
    Simulation(requests, [scheduler], cost, step_log, **sim_options).run()
    return scheduler, probe, requests, step_log.to_columns()


def request_tuples(requests: list[Request]) -> list[tuple]:
    return [(r.request_id, r.arrival_s, r.scheduled_s, r.first_token_s, r.last_token_s, r.finish_s,
             r.num_output_tokens, r.num_preemptions, r.itl_sum_s, r.max_itl_s, tuple(r.itl_gaps_s or ()))
            for r in requests]


def run_case(case: Case):
    """The probed step-by-step run, after checking the default engine path gives the same run."""
    scheduler, probe, requests, steps = _simulate(case, probed=True)
    _, _, plain_requests, plain_steps = _simulate(case, probed=False)
    assert request_tuples(plain_requests) == request_tuples(requests)
    assert all(np.array_equal(plain_steps[k], steps[k]) for k in steps), "step logs differ"
    return scheduler, probe, requests, steps


def check_requests(case: Case, requests: list[Request], probe: Probe, check_gaps: bool) -> None:
    mml = case.max_model_len
    assert probe.finishes == Counter({r.request_id: 1 for r in requests})   # each finishes once
    for r in requests:
        assert r.status is RequestStatus.FINISHED
        out = expected_outputs(r.num_prompt_tokens, r.max_output_tokens, mml)
        assert r.num_output_tokens == out, (r, out)
        if r.num_output_tokens < r.max_output_tokens and r.num_prompt_tokens < mml:
            assert r.num_tokens == mml                                 # capped by the context
        assert r.arrival_s <= r.scheduled_s < r.first_token_s <= r.last_token_s == r.finish_s
        ttft_s, e2el_s = r.first_token_s - r.arrival_s, r.last_token_s - r.arrival_s
        assert 0 < ttft_s <= e2el_s
        assert min(r.itl_gaps_s, default=0.0) >= 0.0                   # token times non-decreasing
        if check_gaps == "one_chunk":      # static hf: the whole output returns at batch end
            assert r.itl_gaps_s == [] and r.first_token_s == r.last_token_s
        elif check_gaps:
            # One gap per chunk: a verify step's tokens come as one (rule S8).
            chunks = len(r.itl_gaps_s) + 1
            assert chunks == r.num_output_tokens or case.speculative and chunks <= r.num_output_tokens
            assert math.isclose(sum(r.itl_gaps_s), r.last_token_s - r.first_token_s, abs_tol=1e-9)
    if case.speculative is None:
        finished_c = sum(r.num_prompt_tokens + r.num_output_tokens - 1 for r in requests)
        assert probe.executed_tokens == finished_c + probe.lost_tokens
        return
    # Speculation: rejected drafts are executed but C drops by them (rule S3); the last step's
    # accepted tokens past the stop keep their KV (rule S4), at most k of them.
    k, stats = case.speculative.num_speculative_tokens, probe.s.spec.stats
    for r in requests:
        assert 0 <= r.num_computed_tokens - (r.num_prompt_tokens + r.num_output_tokens - 1) <= k
    rejected = stats.num_draft_tokens - stats.num_accepted_tokens
    assert probe.executed_tokens == (sum(r.num_computed_tokens for r in requests) + probe.lost_tokens
                                     + rejected)


def check_step_log(scheduler, probe: Probe, requests: list[Request], steps: dict) -> None:
    tokens, seqs, preempted = (list(c) for c in zip(*probe.rows))
    assert steps["num_tokens"].tolist() == tokens and steps["num_seqs"].tolist() == seqs
    assert steps["num_preemptions"].tolist() == preempted
    total = scheduler.num_preemptions
    assert total == sum(r.num_preemptions for r in requests)
    # A schedule() whose only candidate preempted itself yields no step (the engine schedules
    # again at once) and its preemption is logged with the next step: none is left over at the end.
    assert sum(preempted) == total and probe.carried_preemptions == 0
    assert np.all(steps["end_s"] > steps["start_s"])
    assert np.all(steps["start_s"][1:] >= steps["end_s"][:-1])           # steps never overlap
    assert steps["num_running"].max() <= probe.max_seats
    assert np.all((steps["kv_usage"] >= 0) & (steps["kv_usage"] <= 1))
    assert scheduler.kv.num_free_blocks == scheduler.kv.num_total_blocks   # everything freed


@pytest.mark.parametrize("config", sorted(CONFIGS))
@PROPERTY
@given(data=st.data())
def test_every_step_keeps_limits_and_every_request_finishes_exactly(config, data):
    case = data.draw(cases(config))
    scheduler, probe, requests, steps = run_case(case)
    check_requests(case, requests, probe, check_gaps="one_chunk" if config == "static_hf" else True)
    check_step_log(scheduler, probe, requests, steps)
    # Coverage, shown by --hypothesis-show-statistics.
    event("preempted" if scheduler.num_preemptions else "no preemption")
    event("capped by max_model_len" if any(r.num_output_tokens < r.max_output_tokens for r in requests)
          else "no cap")
    event("KV full at some step" if steps["kv_usage"].max() == 1.0 else "KV never full")
