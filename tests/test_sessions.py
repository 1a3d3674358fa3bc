"""Multi-turn sessions (issue 19, point 4): each turn resends the history, is sent its think time
after the last answer, and hits the history's blocks in the prefix cache."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.kv.block_hashes import answer_key, answer_token_ids
from simulator.runner import prepare, simulate
from simulator.scenario import ScenarioError, load_scenario, validate_scenario

ROOT = Path(__file__).resolve().parents[1]


def raw(num_turns=2, user=20, output=30, think_s=3.0, system=0, sessions=1, **workload):
    return {"name": "chat", "model": "llama-2-7b", "hardware": "a100-80gb",
            "cost_model": {"kind": "unit", "fixed_step_time_s": 0.01},
            "engine": {"block_size": 16, "num_gpu_blocks": 1000, "max_model_len": 1024},
            "workload": {"arrival": {"kind": "poisson", "rate": 1.0},
                         "prompt_len": {"kind": "fixed", "value": user},
                         "output_len": {"kind": "fixed", "value": output}, "num_requests": sessions,
                         "sessions": {"num_turns": {"kind": "fixed", "value": num_turns},
                                      "think_time_s": think_s, "system_prompt_len": system},
                         **workload},
            "schedulers": [{"preset": "vllm_v1"}]}


def run(scenario: dict):
    prepared = prepare(validate_scenario(scenario))
    output = simulate(prepared, prepared.runs[0])
    return prepared, output


def test_a_turns_prompt_is_the_history_and_a_new_message():
    prepared, _ = run(raw(num_turns=3, system=16))
    ids = prepared.trace.prompt_token_ids
    assert [len(p) for p in ids] == [16 + 20, 36 + 30 + 20, 86 + 30 + 20]
    answer = answer_token_ids(answer_key(ids[0]), 0, 30)
    assert ids[1][:66] == ids[0] + answer                  # turn 1's prompt, then its answer
    assert ids[2][:len(ids[1])] == ids[1]
    assert list(prepared.trace.sessions.parent) == [-1, 0, 1]


def test_turn_2_computes_its_new_message_and_the_last_partial_block_only():
    # Turn 1: 20 prompt + 30 output tokens; its KV holds 49 (the last token never gets KV), so
    # blocks 0-2 (48 tokens, two of them filled by generated tokens) are hashed. Turn 2's prompt
    # is those 50 tokens and 20 new ones: it hits 48 and computes 2 + 20.
    _, output = run(raw())
    table = output.requests.arrays()
    assert table["num_cached_tokens"].tolist() == [0, 48]
    steps = output.steps.to_columns()
    admitted = np.flatnonzero(steps["start_s"] >= table["arrival_s"][1])[0]
    assert steps["num_prefill_tokens"][admitted] == 2 + 20


def test_the_next_turn_is_sent_its_think_time_after_the_last_answer():
    _, output = run(raw(num_turns=3, think_s=3.0))
    t = output.requests.arrays()
    np.testing.assert_allclose(t["arrival_s"][1:], t["finish_s"][:-1] + 3.0, rtol=0, atol=1e-12)
    assert output.summary["completed"] == 3


def test_the_shipped_chat_scenario_hit_rate_grows_turn_by_turn_and_caching_cuts_ttft():
    # Four turns of 200 conversations: later turns find more of their prompt cached.
    scenario = load_scenario(ROOT / "scenarios" / "chat_sessions.yaml",
                             ["workload.num_requests=40"])
    prepared = prepare(scenario)
    cached, plain = (simulate(prepared, r).summary for r in prepared.runs)
    rates = [t["prefix_cache_hit_rate"] for t in cached["turns"]]
    assert [t["turn"] for t in cached["turns"]] == [1, 2, 3, 4]
    assert all(a < b for a, b in zip(rates, rates[1:]))
    assert all(t["prefix_cache_hit_rate"] == 0.0 for t in plain["turns"])
    assert cached["turns"][-1]["mean_ttft_ms"] < plain["turns"][-1]["mean_ttft_ms"]


@pytest.mark.parametrize("extra, clash", [({"max_concurrency": 4}, "max_concurrency"),
                                          ({"lengths": {"kind": "sharegpt"}}, "lengths")])
def test_sessions_refuse_what_would_send_turns_out_of_order(extra, clash):
    scenario = raw(**extra)
    if clash == "lengths":
        del scenario["workload"]["prompt_len"], scenario["workload"]["output_len"]
    with pytest.raises(ScenarioError, match=f"workload.sessions: not allowed with {clash}"):
        validate_scenario(scenario)


def test_a_session_workload_reproduces_from_its_seed():
    a, b = (prepare(validate_scenario(raw(num_turns=3, sessions=5))).trace for _ in range(2))
    assert a.fingerprint() == b.fingerprint()


def test_prompt_lengths_follow_the_history_without_building_it():
    # Turn k's prompt: system + messages 1..k + answers 1..k-1 (rows session by session).
    from simulator.workload.sessions import session_prompt_lens
    lens = session_prompt_lens(16, np.array([3, 2]), np.array([20, 5, 7, 1, 2]),
                               np.array([30, 4, 9, 8, 6]))
    assert lens.tolist() == [36, 36 + 30 + 5, 71 + 4 + 7, 17, 17 + 8 + 2]


def test_sessions_past_the_context_are_refused_before_their_histories_are_built():
    # 1,000 turns of ~50 tokens resend ~25 M tokens of history per session: refused from the
    # lengths alone, with the context-length refusal every workload gets.
    scenario = raw(num_turns=1000, sessions=20)
    with pytest.raises(ScenarioError, match=r"^workload: request \d+ has a \d+-token prompt, longer than"):
        prepare(validate_scenario(scenario))
