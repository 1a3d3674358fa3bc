"""Each request rule lives in one place (simulator/core/rules.py): changed there, by
monkeypatching, every preset follows the change on every path, the step-by-step one and the
fast path (decode cohort and multi-step runs), with results still equal between the two."""
from __future__ import annotations

import pytest

from simulator.core import rules
from simulator.runner import prepare, simulate
from simulator.scenario import validate_scenario
from tests.test_fast_paths import fingerprint

PRESETS = {
    "static": {"preset": "static", "max_num_seqs": 16},
    "static_hf": {"preset": "static", "max_num_seqs": 16, "variant": "hf"},
    "orca": {"preset": "orca", "max_num_seqs": 16},
    "vllm_v0": {"preset": "vllm_v0", "max_num_seqs": 16, "max_num_batched_tokens": 1024},
    "vllm_v0_chunked": {"preset": "vllm_v0", "max_num_seqs": 16, "enable_chunked_prefill": True,
                        "max_num_batched_tokens": 128},
    "sarathi": {"preset": "sarathi", "max_num_seqs": 16, "max_num_batched_tokens": 128},
    "vllm_v1": {"preset": "vllm_v1", "max_num_seqs": 16, "max_num_batched_tokens": 128},
    "vllm_v1_priority": {"preset": "vllm_v1", "max_num_seqs": 16, "max_num_batched_tokens": 128,
                         "scheduling_policy": "priority"},
    "vllm_v1_spf": {"preset": "vllm_v1_spf", "max_num_seqs": 16, "max_num_batched_tokens": 128},
    # With engine.speculative (SPECULATIVE): the verify path calls the same rules.
    "vllm_v1_spec": {"preset": "vllm_v1", "max_num_seqs": 16, "max_num_batched_tokens": 128},
}
SPECULATIVE = {"vllm_v1_spec": {"method": "eagle", "num_speculative_tokens": 3,
                                "mean_acceptance_length": 2.5}}
CHUNKED = ("vllm_v0_chunked", "sarathi", "vllm_v1", "vllm_v1_priority", "vllm_v1_spf", "vllm_v1_spec")
PAGED = ("vllm_v0", *CHUNKED)   # blocks allocated as tokens are computed (rule 2.2)
NUM_REQUESTS = 300


def scenario(label: str) -> dict:
    workload = {"arrival": {"kind": "poisson", "rate": 40.0},
                "prompt_len": {"kind": "uniform", "low": 16, "high": 400},
                "output_len": {"kind": "uniform", "low": 8, "high": 120},
                "num_requests": NUM_REQUESTS}
    if label == "vllm_v1_priority":
        workload["priority"] = {"values": [0, 1, 2]}
    engine = {"num_gpu_blocks": 4000, "max_model_len": 1024}
    if label in SPECULATIVE:
        engine["speculative"] = SPECULATIVE[label]
    return {"name": f"rule-{label}", "seed": 3, "model": "llama-3.1-8b", "hardware": "h100-sxm",
            "cost_model": {"kind": "roofline"},
            "engine": engine,
            "workload": workload, "schedulers": [PRESETS[label]],
            "metrics": {"record_itl_gaps": True}}


def both_paths(label: str):
    prepared = prepare(validate_scenario(scenario(label)))
    run = prepared.runs[0]
    stepwise, fast = simulate(prepared, run, fast_path=False), simulate(prepared, run, fast_path=True)
    assert fingerprint(fast) == fingerprint(stepwise), label
    return stepwise, fast


@pytest.mark.parametrize("label", sorted(PRESETS))
def test_a_changed_stop_rule_is_followed_by_every_request_on_every_path(label, monkeypatch):
    # Stop at half the outputs the rule allowed (rule 1.3.2, changed in its one place).
    original = rules.output_limit
    monkeypatch.setattr(rules, "output_limit", lambda r, max_model_len: max(1, original(r, max_model_len) // 2))
    for out in both_paths(label):
        followed = sum(r.num_output_tokens == max(1, min(r.max_output_tokens, 1024 - r.num_prompt_tokens) // 2)
                       for r in out.requests.rows())
        assert followed == NUM_REQUESTS


@pytest.mark.parametrize("label", sorted(PRESETS))
def test_a_changed_sampling_rule_is_followed_on_every_path(label, monkeypatch):
    # A partial prefill chunk samples a token too (rule 1.3.1 changed). Where prompts are
    # chunked the first token comes at the first chunk's end; whole-prompt steps always
    # completed their prompt, so nothing changes there.
    baseline, _ = both_paths(label)
    monkeypatch.setattr(rules, "samples", lambda r, computed_after: True)
    changed, _ = both_paths(label)
    if label in CHUNKED:
        assert changed.summary["mean_ttft_ms"] < baseline.summary["mean_ttft_ms"]
        assert any(r.first_token_s < r.scheduled_s + 1e-9 or r.num_output_tokens > 1
                   for r in changed.requests.rows())
    else:
        assert fingerprint(changed) == fingerprint(baseline)


@pytest.mark.parametrize("label", sorted(PRESETS))
def test_a_changed_block_need_is_followed_on_every_path(label, monkeypatch):
    # Every request holds 32 slots ahead of what it computes (a lookahead, rule 2.2 changed):
    # where blocks are taken as tokens are computed, more of the cache is in use; presets that
    # reserve whole contexts at admission do not take blocks by this rule.
    baseline, _ = both_paths(label)
    original = rules.kv_tokens_needed
    monkeypatch.setattr(rules, "kv_tokens_needed",
                        lambda computed, new, hits, max_model_len: original(computed, new + 32, hits, max_model_len))
    changed, _ = both_paths(label)
    if label in PAGED:
        assert changed.summary["mean_kv_usage"] > baseline.summary["mean_kv_usage"]
    else:
        assert fingerprint(changed) == fingerprint(baseline)


def test_drafts_enter_the_schedule_only_through_tokens_wanted(monkeypatch):
    # Rule S1: a tokens_wanted that leaves out the drafts schedules none of them, so no step
    # verifies a draft and the run is the one without speculation's token counts.
    original = rules.tokens_wanted
    monkeypatch.setattr(rules, "tokens_wanted", lambda r: original(r) - r.num_spec_tokens)
    changed, _ = both_paths("vllm_v1_spec")
    assert changed.summary["spec_decode_num_drafts"] == 0
    assert all(r.num_output_tokens == min(r.max_output_tokens, 1024 - r.num_prompt_tokens)
               for r in changed.requests.rows())
