"""Hand-worked runs on the Probe of tests/test_properties.py: each case has its steps, times and
token counts worked out in its comment, and the Probe checks every step as the property does.
Regressions found by the properties (issue 22) keep their minimal case here, the scenario
property's too.
"""
from __future__ import annotations

from simulator.core.request import Request
from simulator.policies.base import Scheduler
from simulator.runner import prepare, simulate
from simulator.scenario import validate_scenario
from tests.test_properties import (Case, _simulate, build_scheduler, check_requests, check_step_log,
                                   run_case)


def test_static_hf_returns_one_chunk_without_inter_token_gaps():
    # Minimal: one request, prompt 1, 2 outputs. Step 1 samples token 1 (t=1), step 2 token 2
    # (t=2); the hf variant returns everything at batch end (trap 18): first = last = finish = 2
    # and no inter-token gap (ITL is measured between chunks, §7).
    case = Case({"preset": "static", "variant": "hf", "max_num_seqs": 1}, 16, 64, 10, 1.0, None,
                ((0.0, 1, 2, 0),))
    _, probe, requests, _ = run_case(case)
    check_requests(case, requests, probe, check_gaps="one_chunk")
    assert requests[0].first_token_s == 2.0


ASYNC_DISCARD = Case({"preset": "vllm_v1", "async_scheduling": True, "max_num_seqs": 2,
                      "max_num_batched_tokens": 2}, 2, 8, 3, 1.0, None,
                     ((0.0, 1, 2, 0), (0.0, 1, 3, 0)))
PRIORITY_SELF_PREEMPTION = Case(
    {"preset": "vllm_v1", "scheduling_policy": "priority", "max_num_seqs": 2,
     "max_num_batched_tokens": 2}, 1, 8, 4, 1.0, None, ((0.0, 1, 3, 1), (0.5, 1, 3, 0)))


def test_priority_self_preemption_empty_step_still_finishes_every_request():
    # Hand-worked (block size 1, 3 usable blocks, each request peaks at 1 + 3 - 1 = 3 blocks):
    # t=0 request 0 (priority 1) prefills alone (1 block); request 1 (priority 0) arrives at 0.5;
    # t=1 request 0 decodes (2 blocks) and request 1 prefills (1 block): the pool is full; t=2
    # request 0, first in running, needs a 3rd block and is itself the priority victim
    # max(running, key=(priority, arrival, id)) (rule 2.5): Phase A ends (rule 1.2 A4) and
    # Phase B is skipped (trap 4), an empty schedule. The engine must schedule again at once:
    # request 1 decodes at t=2 and t=3 (its 2nd and 3rd blocks) and finishes at t=4; request 0
    # (3 tokens, the full-ISL gate needs 3 blocks, rule 2.3) waits, then re-prefills 2 + 1 tokens
    # under the budget of 2 and samples its 3rd token at t=6.
    # Tokens: 8 executed = (1+3-1) + (1+3-1) + 2 lost by the preemption, which steps.csv shows
    # on the next step (t=2).
    scheduler, probe, requests, steps = run_case(PRIORITY_SELF_PREEMPTION)
    check_requests(PRIORITY_SELF_PREEMPTION, requests, probe, check_gaps=True)
    check_step_log(scheduler, probe, requests, steps)
    assert scheduler.num_preemptions == 1 and probe.executed_tokens == 8
    assert steps["num_preemptions"].tolist() == [0, 0, 1, 0, 0, 0]
    assert [r.finish_s for r in requests] == [6.0, 4.0]
    assert steps["num_tokens"].tolist() == [1, 2, 1, 1, 2, 1]
    assert steps["start_s"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]   # no idle gap at t=2


def test_step_log_preemptions_add_up_to_the_run_total():
    scheduler, _, _, steps = run_case(PRIORITY_SELF_PREEMPTION)
    assert int(steps["num_preemptions"].sum()) == scheduler.num_preemptions


def test_async_self_preemption_waits_for_the_step_in_flight():
    # Regression (issue 22, found by test_drawn_scenarios_...[vllm_v1]): the engine added a
    # carried self-preemption to the next, empty, schedule and took it for new progress, so it
    # scheduled again at the same instant until the watchdog's "livelock" (20,001 steps).
    # Block size 1, 8 usable blocks, budget 6, 2 seats, every request at t=0 with priority 0.
    # t=0: 0 prefills 3, 1 a 3-token chunk; the async step behind it preempts 1 (the priority
    # victim, id last) for 0's decode. t=1: 1 re-prefills 5, 2 a 1-token chunk; the step behind
    # finds 2 needing 3 blocks with 2 free and 2 is its own victim: an empty schedule, then
    # nothing to run (1's only token is in flight, 2 needs 4 blocks of 3) until t=1.5.
    case = Case({"preset": "vllm_v1", "scheduling_policy": "priority", "async_scheduling": True,
                 "reserve_full_isl": False, "enable_prefix_caching": False, "max_num_seqs": 2,
                 "max_num_batched_tokens": 6}, 1, 8, 9, 0.5, None,
                ((0.0, 3, 2, 0), (0.0, 5, 1, 0), (0.0, 4, 1, 0)))
    scheduler, probe, requests, steps = run_case(case)
    check_requests(case, requests, probe, check_gaps=True)
    check_step_log(scheduler, probe, requests, steps)
    assert [r.finish_s for r in requests] == [1.0, 1.5, 2.0]
    assert steps["num_tokens"].tolist() == [6, 1, 6, 4]
    assert steps["num_preemptions"].tolist() == [0, 1, 0, 1]   # 2's shown with the next step
    assert probe.executed_tokens == 13 + 3 + 1                 # P+O-1 of each, 1's 3 and 2's 1 lost


def test_async_token_in_flight_at_a_preemption_is_discarded():
    # Regression (issue 22, found by the vllm_v1_async property). Block size 2, 2 usable blocks,
    # budget 2. t=0: both prefill (step A) and, async, both decode (step B). t=1: 1 needs a 2nd
    # block for its 3rd token and none is free: it is its own victim (the running tail), then is
    # re-admitted at once (2 tokens, step D). B's token for 1 was computed on the dropped KV and
    # is discarded (§1.6) although 1 runs again when B ends; 1 samples at the ends of D (t=3)
    # and E (t=4). It used to be credited at t=2, so 1 finished at t=3 and E never ran.
    case = ASYNC_DISCARD
    scheduler, probe, requests, steps = run_case(case)
    check_step_log(scheduler, probe, requests, steps)
    check_requests(case, requests, probe, check_gaps=True)
    assert [r.finish_s for r in requests] == [2.0, 4.0]
    assert steps["num_tokens"].tolist() == [2, 2, 2, 1]
    assert steps["num_preemptions"].tolist() == [0, 0, 1, 0]   # shown with step D
    assert probe.executed_tokens == 2 + 3 + 2                  # P+O-1 of each, 1's C of 2 lost


def test_a_discarded_token_is_no_progress(monkeypatch):
    # The run above: B samples for both requests and 1's token is thrown away; the engine's
    # watchdog counts kept tokens (sampled rows less discarded ones), so steps that sample only
    # discarded tokens are a livelock. Found by test_drawn_scenarios_...[vllm_v1]: a P/D decode
    # pool whose one running request preempted itself at every decode behind a pulled request's
    # blocks, each cycle sampling a token and discarding it, ran without end.
    discarded = []
    update = Scheduler.update_from_output

    def recording(self, batch, now_s):
        finished = update(self, batch, now_s)
        discarded.append((now_s, batch.num_discarded))
        return finished
    monkeypatch.setattr(Scheduler, "update_from_output", recording)
    scheduler, probe, requests, steps = run_case(ASYNC_DISCARD)
    assert discarded[:4] == [(1.0, 0), (2.0, 1), (3.0, 0), (4.0, 0)]


def test_vllm_v0_budget_below_max_model_len_is_refused_or_finishes():
    # Block size 1, 4 usable blocks, budget 2, two requests of prompt 1 / 3 outputs. t=0 both
    # prefill, t=1 both decode (pool full), t=2 request 0's decode preempts the tail, request 1
    # (§3: recompute, back to waiting with 2 outputs), t=3 request 1 must re-prefill 1 + 2 = 3
    # tokens > budget 2: V0 never admits it (§3 step 1: break unless the sum fits the budget).
    case = Case({"preset": "vllm_v0", "max_num_seqs": 2, "max_num_batched_tokens": 2}, 1, 8, 5,
                1.0, None, ((0.0, 1, 3, 0), (0.0, 1, 3, 0)))
    try:
        build_scheduler(case.options, case.num_gpu_blocks, case.block_size, case.max_model_len)
    except ValueError:
        return   # refused at startup, as real V0 does
    _, _, requests, _ = _simulate(case, probed=False)
    assert all(r.finish_s is not None for r in requests)



def test_vllm_v0_prompt_of_max_model_len_needs_its_whole_prompt_in_kv():
    # Regression (issue 22, found by the vllm_v0 property): V0 admits a prompt of max_model_len
    # tokens (it ignores only longer ones) and samples 1 token, but blocks_to_finish counted
    # P + 0 - 1 = 7 blocks for it, so a pool of 7 usable blocks passed the up-front check and
    # then stalled at t=0 (its prefill needs all 8). rules.output_limit is now at least 1.
    options = {"preset": "vllm_v0", "max_num_seqs": 1, "max_num_batched_tokens": 8}
    short = build_scheduler(options, 8, 1, 8)   # 7 usable blocks
    assert short.blocks_to_finish(Request(0, 0.0, 8, 1)) == 8 > short.kv.num_total_blocks
    case = Case(options, 1, 8, 9, 1.0, None, ((0.0, 8, 1, 0),))   # 8 usable: exactly enough
    scheduler, probe, requests, steps = run_case(case)
    check_requests(case, requests, probe, check_gaps=True)
    check_step_log(scheduler, probe, requests, steps)
    assert requests[0].finish_s == 1.0 and requests[0].num_output_tokens == 1


def test_arrivals_are_sent_at_exactly_their_drawn_times():
    # Regression (issue 22, found by test_drawn_scenarios_...[static]): the arrival process
    # slept arrival - now from now, which can land a unit in the last place early: request 2 of
    # this scenario was sent 3.5e-18 s before its drawn time, a negative client_queue_s.
    raw = {"name": "prop", "seed": 34858, "model": "llama-2-7b", "hardware": "a100-80gb",
           "cost_model": {"kind": "unit", "fixed_step_time_s": 1.0},
           "engine": {"block_size": 1, "num_gpu_blocks": 9, "max_model_len": 8},
           "workload": {"arrival": {"kind": "poisson", "rate": 100.0}, "num_requests": 22,
                        "prompt_len": {"kind": "fixed", "value": 1},
                        "output_len": {"kind": "fixed", "value": 1}},
           "schedulers": [{"preset": "static", "max_num_seqs": 1}]}
    prepared = prepare(validate_scenario(raw))
    rows = simulate(prepared, prepared.runs[0]).requests.rows()
    assert [r.arrival_s for r in rows] == prepared.trace.arrival_s.tolist()
    assert [r.client_queue_s for r in rows] == [0.0] * 22
