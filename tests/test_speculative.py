"""Speculative decoding, hand-worked (docs/speculative-decoding-semantics.md, rules S1-S9).

Acceptance rates of 0 and 1 make every draw's outcome known (u in [0, 1): u < 1 always, u < 0
never), so the steps below are exact whatever the generator gives.
"""
from __future__ import annotations

import numpy as np
import pytest

from simulator.core import rules
from simulator.core.request import RequestStatus
from simulator.policies.base import SchedulerContext
from simulator.policies.registry import get_preset
from simulator.policies.speculative import SpeculativeOptions
from tests.sched_helpers import Driver, req


def spec_scheduler(rates, *, method="ngram", num_gpu_blocks=1000, block_size=4, max_model_len=64,
                   seed=0, **options):
    k = len(rates)
    spec = SpeculativeOptions(method=method, num_speculative_tokens=k, acceptance_rates=tuple(rates))
    p = get_preset("vllm_v1")
    opts = p.cls.Options(preset="vllm_v1", **{**p.defaults, "enable_prefix_caching": False, **options})
    context = SchedulerContext(max_model_len=max_model_len, block_size=block_size, speculative=spec,
                               acceptance_rng=np.random.default_rng(seed))
    return p.cls(opts, p.cls.make_kv_cache(opts, num_gpu_blocks, block_size), context)


def test_a_k3_decode_step_under_budget_pressure_schedules_its_drafts_in_order():
    """Rules S1, S2 (and 1.2 A3): budget 10, three 4-token prompts, k = 3, every draft accepted.
    Step 1: A 4, B 4, C 2 (a chunk). Step 2: A and B ask 1 + 3 = 4, C its last 2. Step 3: A 4,
    B 4, and C, asking 4, gets the 2 left: its own token and one draft."""
    s = spec_scheduler([1.0, 1.0, 1.0], max_num_batched_tokens=10, max_num_seqs=8)
    a, b, c = req(0, 4, 10), req(1, 4, 10), req(2, 4, 10)
    d = Driver(s)
    d.add(a, b, c)
    assert d.step() == {0: 4, 1: 4, 2: 2}
    assert (a.num_output_tokens, a.num_spec_tokens, c.num_output_tokens, c.num_spec_tokens) == (1, 3, 0, 0)
    assert rules.tokens_wanted(a) == 4 and rules.tokens_wanted(c) == 2
    assert d.step() == {0: 4, 1: 4, 2: 2}
    # A verified 3 drafts, all accepted: 1 + 3 tokens, C = num_tokens - 1 (rule S3).
    assert (a.num_output_tokens, a.num_computed_tokens, a.num_tokens) == (5, 8, 9)
    assert (c.num_output_tokens, c.num_spec_tokens) == (1, 3)   # drafts after its first token
    batch = s.schedule(d.now)
    assert batch.num_scheduled_tokens == {a: 4, b: 4, c: 2}
    assert [r.num_scheduled_spec_tokens for r in (a, b, c)] == [3, 3, 1]
    assert c.num_spec_tokens == 0        # the draft not scheduled is dropped (rule S2)
    s.update_from_output(batch, d.now + 1)
    assert (c.num_output_tokens, c.num_computed_tokens, c.num_tokens) == (3, 6, 7)
    assert s.spec.stats.num_draft_tokens == 3 + 3 + 3 + 3 + 1


def test_acceptance_0_of_3_gives_one_token_per_step():
    """Rule S3: every draft rejected, C drops by 3 after each verify; one token per step."""
    s = spec_scheduler([0.0, 0.0, 0.0])
    r = req(0, 4, 6)
    d = Driver(s)
    d.add(r)
    assert d.step() == {0: 4}
    for step in range(2, 7):
        assert d.step() == {0: 4}
        assert r.num_output_tokens == step
        assert r.num_computed_tokens == r.num_tokens - 1 or r.is_finished
    assert r.is_finished and r.num_output_tokens == 6
    stats = s.spec.stats.summary()
    assert (stats["spec_decode_num_drafts"], stats["spec_decode_num_draft_tokens"],
            stats["spec_decode_num_accepted_tokens"]) == (5, 15, 0)
    assert stats["spec_decode_mean_acceptance_length"] == 1.0


def test_preemption_after_a_partially_accepted_step_recomputes_prompt_and_accepted_outputs():
    """Rules S3, S5: 2 of 3 drafts accepted (rates 1, 1, 0), then a preemption: the drafts go
    with the KV and the resume re-prefills P + 4 outputs, then samples one token and drafts."""
    s = spec_scheduler([1.0, 1.0, 0.0])
    r = req(0, 4, 20)
    d = Driver(s)
    d.add(r)
    d.step()
    assert d.step() == {0: 4}
    assert (r.num_output_tokens, r.num_computed_tokens) == (4, 7)   # C = 4 + 4 - 1 rejected
    s.running.remove(r)
    s.preempt(r)
    assert (r.num_computed_tokens, r.num_spec_tokens, r.status) == (0, 0, RequestStatus.PREEMPTED)
    assert d.step() == {0: 8}                                        # num_tokens = 4 + 4
    assert (r.num_output_tokens, r.num_spec_tokens) == (5, 3)
    assert d.step() == {0: 4}


@pytest.mark.parametrize("method", ["ngram", "eagle"])
def test_no_request_ends_past_max_tokens_or_the_context(method):
    """Rule S4: all drafts accepted, k = 4; outputs stop at max_tokens, or where num_tokens
    reaches max_model_len (rule 1.3.2), never past."""
    s = spec_scheduler([1.0] * 4, method=method, max_model_len=32)
    requests = [req(i, 5, o) for i, o in enumerate(range(1, 13))] + [req(99, 20, 100)]
    d = Driver(s)
    d.add(*requests)
    d.run()
    for r in requests:
        assert r.is_finished
        assert r.num_output_tokens == rules.output_limit(r, 32)
    assert requests[-1].num_output_tokens == 12 and requests[-1].num_tokens == 32


def test_lookahead_slots_for_model_proposers_only():
    """Rule S6: eagle holds slots for C + n + k (3 blocks of 4 for 4 + 3 + 2); ngram for C + n."""
    for method, blocks in (("eagle", 3), ("ngram", 2)):
        s = spec_scheduler([1.0, 1.0], method=method)
        r = req(0, 4, 20)
        d = Driver(s)
        d.add(r)
        d.step()
        s.schedule(d.now)
        assert s.kv.num_blocks_of(r) == blocks, method


def test_kv_usage_never_exceeds_a_tight_pool_under_preemptions():
    """Rules S5, S6 with 2.5: a pool of 12 usable blocks, eight requests, eagle k = 3: requests
    are preempted, every step keeps the pool's invariants, all finish with max_tokens."""
    s = spec_scheduler([1.0, 0.5, 0.0], method="eagle", num_gpu_blocks=13, seed=3)
    requests = [req(i, 6, 14) for i in range(8)]
    d = Driver(s)
    d.add(*requests)
    while s.num_unfinished:
        d.step()   # checks the pool's invariants each step
        assert 0 <= s.kv.num_free_blocks and s.kv.usage <= 1.0
    assert s.num_preemptions > 0
    assert all(r.num_output_tokens == 14 for r in requests)
    assert s.kv.num_free_blocks == s.kv.num_total_blocks


def test_position_rates_from_a_mean_acceptance_length():
    """Rule S3: L = 1 + a + a² + a³; the draws reproduce it."""
    o = SpeculativeOptions(method="ngram", num_speculative_tokens=3, mean_acceptance_length=2.5)
    a = o.position_rates[0]
    assert o.position_rates == pytest.approx((a, a * a, a ** 3))
    assert 1 + sum(o.position_rates) == pytest.approx(2.5, abs=1e-12)
    full = SpeculativeOptions(method="ngram", num_speculative_tokens=3, mean_acceptance_length=4.0)
    assert full.position_rates == (1.0, 1.0, 1.0)
    none = SpeculativeOptions(method="ngram", num_speculative_tokens=3, mean_acceptance_length=1.0)
    assert none.position_rates == (0.0, 0.0, 0.0)
