"""Prefill/decode disaggregation (docs/disaggregation-semantics.md, rules D1-D5): a run worked by
hand, conservation across the pools, and the refusals."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.engine.progress import NoProgressError
from simulator.runner import prepare, simulate
from simulator.scenario import ScenarioError, validate_scenario

# llama-2-7b: 32 layers x 32 KV heads x 128 x (K, V) x 2 bytes = 524,288 bytes of KV per token.
KV_BYTES_PER_TOKEN = 32 * 32 * 128 * 2 * 2
RAW = {"name": "pd", "model": "llama-2-7b", "hardware": "a100-80gb",
       "cost_model": {"kind": "unit", "fixed_step_time_s": 1.0},
       "engine": {"max_model_len": 256},
       "workload": {"arrival": {"kind": "inf"}, "prompt_len": {"kind": "fixed", "value": 16},
                    "output_len": {"kind": "fixed", "value": 8}, "num_requests": 1},
       "disaggregation": {"prefill": {"num_gpu_blocks": 100}, "decode": {"num_gpu_blocks": 100},
                          "kv_transfer": {"bandwidth_GBps": 1.0, "latency_us": 500.0}},
       "schedulers": [{"preset": "vllm_v1", "max_num_seqs": 8, "max_num_batched_tokens": 256}]}


def run(raw: dict, fast_path: bool = True):
    prepared = prepare(validate_scenario(raw))
    return simulate(prepared, prepared.runs[0], fast_path=fast_path)


def with_(**changes) -> dict:
    raw = {**RAW, **{k: v for k, v in changes.items() if k != "workload"}}
    raw["workload"] = {**RAW["workload"], **changes.get("workload", {})}
    return raw


def test_one_request_by_hand_prefill_pull_then_the_decode_side_recomputes_the_last_token():
    # t=0-1: the prefill replica computes the 16-token prompt and samples its one token (D1).
    # t=1: the decode replica allocates the prompt's block and pulls it (D2): 500 us + 16 tokens
    # x 524,288 bytes at 1 GB/s (D3). Then one step computes the prompt's last token again and
    # samples the first token (D4), and 7 more decode: the 8th token at pull end + 8 steps.
    pull_s = 500e-6 + 16 * KV_BYTES_PER_TOKEN / 1e9
    out = run(RAW)
    rows = out.requests.arrays()
    assert rows["scheduled_s"][0] == 0.0
    assert rows["first_token_s"][0] == pytest.approx(1.0 + pull_s + 1.0, abs=1e-12)
    assert rows["finish_s"][0] == pytest.approx(1.0 + pull_s + 8.0, abs=1e-12)
    assert rows["num_output_tokens"][0] == 8
    assert out.summary["num_kv_transfers"] == 1
    assert out.summary["mean_kv_transfer_ms"] == pytest.approx(pull_s * 1000)
    steps = out.steps.to_columns()
    # Prefill pool: one 16-token step; decode pool: 1 recomputed token, then 7 decodes.
    assert list(steps["replica"]) == [0] + [1] * 8
    assert list(steps["num_tokens"]) == [16] + [1] * 8
    assert list(steps["num_prefill_tokens"]) == [16] + [0] * 8


def test_the_pull_takes_no_seat_and_requests_behind_it_are_admitted():
    # Four requests at once: the prefill replica prefills all in one step; the decode replica
    # allocates all four blocks at t=1 and every pull runs on its own link (D3).
    pull_s = 500e-6 + 16 * KV_BYTES_PER_TOKEN / 1e9
    out = run(with_(workload={"num_requests": 4}))
    rows = out.requests.arrays()
    assert np.allclose(rows["first_token_s"], 2.0 + pull_s, atol=1e-12)
    assert out.summary["pools"]["prefill"]["num_gpu_blocks"] == 100


def test_a_pulled_request_is_admitted_with_the_blocks_it_already_holds():
    # Regression (found by test_drawn_scenarios_...[vllm_v1]): the full-prompt admission gate
    # (rule 2.3) counted a pulled request's prompt blocks as needed anew, so a decode pool with
    # fewer free blocks than the prompt never admitted it. Prompt 32 = 2 blocks of 16, peak
    # 32 + 8 - 1 = 39 tokens = 3 blocks, all the pool has: the pull takes 2 (D2), 1 stays free;
    # the request needs no new block to resume (D4) and one more at its 33rd token.
    pull_s = 500e-6 + 32 * KV_BYTES_PER_TOKEN / 1e9
    raw = with_(workload={"prompt_len": {"kind": "fixed", "value": 32}})
    raw["disaggregation"] = {**RAW["disaggregation"], "decode": {"num_gpu_blocks": 4}}
    out = run(raw)
    rows = out.requests.arrays()
    assert rows["first_token_s"][0] == pytest.approx(1.0 + pull_s + 1.0, abs=1e-12)
    assert rows["finish_s"][0] == pytest.approx(1.0 + pull_s + 8.0, abs=1e-12)


def test_ttft_includes_the_transfer_against_the_same_gpus_co_located():
    pd = run(with_(workload={"num_requests": 1}))
    co = run({k: v for k, v in RAW.items() if k != "disaggregation"} |
             {"engine": {"max_model_len": 256, "num_gpu_blocks": 100}})
    # Co-located: prefill then 7 decodes, no pull; disaggregated: one more step and the pull.
    assert co.requests.arrays()["first_token_s"][0] == 1.0
    assert pd.requests.arrays()["first_token_s"][0] > 2.0


@pytest.mark.parametrize("fast_path", [True, False])
def test_conservation_across_pools_with_preemption_on_the_decode_side(fast_path):
    # A small decode pool preempts (D5: recomputed there, never pulled again); every request is
    # prefilled once by the prefill pool, pulled once, and finishes once with all its tokens.
    raw = with_(workload={"num_requests": 120, "arrival": {"kind": "poisson", "rate": 4.0},
                          "prompt_len": {"kind": "uniform", "low": 8, "high": 120},
                          "output_len": {"kind": "uniform", "low": 4, "high": 60}})
    raw["disaggregation"] = {"prefill": {"num_replicas": 2, "num_gpu_blocks": 200},
                             "decode": {"num_replicas": 2, "num_gpu_blocks": 40},
                             "kv_transfer": {"bandwidth_GBps": 25.0}}
    out = run(raw, fast_path)
    rows = out.requests.arrays()
    trace = prepare(validate_scenario(raw)).trace
    assert sorted(rows["request_id"]) == list(range(120))
    assert np.array_equal(rows["num_output_tokens"], trace.max_output_tokens[rows["request_id"]])
    assert out.summary["num_kv_transfers"] == 120
    pools = [r["pool"] for r in out.summary["replicas"]]
    routed = [r["num_requests"] for r in out.summary["replicas"]]
    assert pools == ["prefill", "prefill", "decode", "decode"]
    assert sum(routed[:2]) == sum(routed[2:]) == 120
    assert routed == [60, 60, 60, 60]   # round robin in each pool
    steps = out.steps.to_columns()
    prefill = steps["replica"] < 2
    decode_preemptions = sum(r["num_preemptions"] for r in out.summary["replicas"][2:])
    assert decode_preemptions > 0
    # The prefill pool computes each prompt once (none preempted there: its pool is large).
    assert sum(r["num_preemptions"] for r in out.summary["replicas"][:2]) == 0
    assert steps["num_tokens"][prefill].sum() == trace.num_prompt_tokens.sum()
    assert (steps["kv_usage"] <= 1.0).all()
    for replica in out.result.replicas:
        kv = replica.scheduler.kv
        kv.check_invariants()
        assert kv.num_free_blocks == kv.num_total_blocks   # every block freed, pulls included


def test_disaggregated_runs_are_deterministic_and_the_fast_path_changes_nothing():
    raw = with_(workload={"num_requests": 60, "arrival": {"kind": "poisson", "rate": 3.0},
                          "prompt_len": {"kind": "uniform", "low": 8, "high": 120}})
    a, b = run(raw, True), run(raw, False)
    for name in ("first_token_s", "finish_s", "num_output_tokens"):
        assert np.array_equal(a.requests.arrays()[name], b.requests.arrays()[name])


@pytest.mark.parametrize("engine, field", [({"num_replicas": 2}, "num_replicas"),
                                           ({"num_gpu_blocks": 50}, "num_gpu_blocks"),
                                           ({"tensor_parallel_size": 2}, "tensor_parallel_size")])
def test_engine_fields_the_pools_replace_are_refused_naming_the_field(engine, field):
    with pytest.raises(ScenarioError, match=rf"^engine\.{field}: .* not allowed with disaggregation"):
        prepare(validate_scenario(with_(engine={"max_model_len": 256, **engine})))


def test_a_preset_that_cannot_pull_kv_is_refused():
    raw = with_(schedulers=[{"preset": "sarathi"}])
    with pytest.raises(ScenarioError, match=r"^disaggregation: sarathi .* allowed presets: vllm_v1"):
        prepare(validate_scenario(raw))


def test_a_decode_pool_too_small_for_one_request_is_refused_naming_the_pool():
    raw = with_(workload={"prompt_len": {"kind": "fixed", "value": 200},
                          "output_len": {"kind": "fixed", "value": 50}})
    raw["disaggregation"] = {**RAW["disaggregation"], "decode": {"num_gpu_blocks": 10}}
    with pytest.raises(ScenarioError, match=r"^disaggregation\.decode: the KV cache"):
        prepare(validate_scenario(raw))
    # The prefill pool holds the prompt and one token only (D1): 13 blocks of 16 suffice there.
    raw["disaggregation"] = {**RAW["disaggregation"], "prefill": {"num_gpu_blocks": 15}}
    assert run(raw).summary["completed"] == 1


def test_speculative_decoding_with_disaggregation_is_refused():
    raw = with_(engine={"max_model_len": 256, "speculative": {
        "method": "ngram", "num_speculative_tokens": 2, "mean_acceptance_length": 2.0}})
    with pytest.raises(ScenarioError, match=r"^engine\.speculative: not modelled with disaggregation"):
        prepare(validate_scenario(raw))


def test_a_hold_and_wait_livelock_stops_naming_the_pulled_blocks(tmp_path):
    # Found by test_drawn_scenarios_...[vllm_v1_spf] (shrunk): block size 1, 9 usable decode
    # blocks, one seat, async scheduling. Request 4's pull holds 2 blocks while it waits (D2);
    # requests 2 and 3 (prompt 1, 9 outputs: 9 blocks each at their peak) take turns at the seat,
    # each preempting itself at 7 blocks and discarding the token in flight (rule 1.6), so no
    # token is ever kept: the watchdog's livelock, with the blocks the pull holds named.
    rows = [(0.0, [8], 9), (0.0, [25, 30, 48, 36, 31, 27, 27, 46, 13], 9), (1.0, [19], 9),
            (1.0, [38], 8), (1.0, [4, 43], 1)]
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(
        f'{{"arrival_s": {a}, "input_toks": {len(ids)}, "output_toks": {o}, "input_tok_ids": {ids}}}\n'
        for a, ids, o in rows))
    raw = {**RAW, "engine": {"block_size": 1, "max_model_len": 10},
           "workload": {"arrival": {"kind": "trace", "path": str(trace)}},
           "schedulers": [{"preset": "vllm_v1_spf", "max_num_seqs": 1, "async_scheduling": True,
                           "enable_prefix_caching": False, "max_num_batched_tokens": 1}],
           "disaggregation": {"prefill": {"num_gpu_blocks": 1000}, "decode": {"num_gpu_blocks": 10},
                              "kv_transfer": {"bandwidth_GBps": 0.05, "latency_us": 0.0}}}
    with pytest.raises(NoProgressError, match=r"^livelock: 20001 steps without a kept token .*, "
                       r"2 blocks held by 1 waiting request\(s\) whose KV was pulled from the "
                       r"prefill pool \(hold-and-wait"):
        run(raw)
