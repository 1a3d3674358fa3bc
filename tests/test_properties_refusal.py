"""The scenario path's KV refusal threshold, by hand (rule 2.2): a scenario dict taken through
validate_scenario + prepare + simulate is refused before the run exactly when its KV cache is
smaller than the worst request needs alone, and an accepted one finishes and reproduces exactly
from its seed. The wider scenario property is tests/test_properties_scenarios.py.
"""
from __future__ import annotations

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from simulator.runner import prepare, simulate
from simulator.scenario import ScenarioError, validate_scenario
from tests.test_properties import BUDGETED, PROPERTY

SCENARIO_PROPERTY = settings(PROPERTY, max_examples=50)


def scenario_dict(preset: str, seed: int, block_size: int, max_model_len: int, num_gpu_blocks: int,
                  num_requests: int, rate: float, max_num_seqs: int) -> dict:
    scheduler = {"preset": preset, "max_num_seqs": max_num_seqs}
    if preset in BUDGETED:   # >= max_model_len satisfies every preset's startup check
        scheduler["max_num_batched_tokens"] = max(max_model_len, max_num_seqs)
    return {
        "name": "prop", "seed": seed, "model": "llama-2-7b", "hardware": "a100-80gb",
        "cost_model": {"kind": "roofline"},
        "engine": {"block_size": block_size, "num_gpu_blocks": num_gpu_blocks,
                   "max_model_len": max_model_len},
        "workload": {"arrival": {"kind": "poisson", "rate": rate}, "num_requests": num_requests,
                     "prompt_len": {"kind": "uniform", "low": 1, "high": max_model_len - 1},
                     "output_len": {"kind": "uniform", "low": 1, "high": max_model_len}},
        "schedulers": [scheduler],
    }


def _needed_blocks(raw: dict) -> int:
    """Blocks the policy needs for the worst request alone, watermark aside."""
    roomy = dict(raw, engine=dict(raw["engine"], num_gpu_blocks=1_000_000))
    trace = prepare(validate_scenario(roomy)).trace
    # Rule 2.2 example: the last token never gets KV; a request capped by the context stops at
    # max_model_len tokens (rule 1.3.2), so it holds at most max_model_len - 1.
    peak = max(min(int(p) + int(o), raw["engine"]["max_model_len"]) - 1
               for p, o in zip(trace.num_prompt_tokens, trace.max_output_tokens))
    if raw["schedulers"][0]["preset"] in ("static", "orca"):
        peak = raw["engine"]["max_model_len"]      # §5, §6: a whole context reserved up front
    return -(-peak // raw["engine"]["block_size"])


def _outcome(raw: dict, **kwargs) -> tuple:
    prepared = prepare(validate_scenario(raw))
    out = simulate(prepared, prepared.runs[0], **kwargs)
    steps = out.steps.to_columns()
    # A decode cohort sums squared gaps by differences of running sums: not bit for bit.
    rows = [r._replace(itl_sq_sum_s2=None) for r in out.requests.rows()]
    summary = {k: v for k, v in out.summary.items() if k != "std_itl_ms"}
    return rows, {k: v.tolist() for k, v in steps.items()}, repr(summary)


@SCENARIO_PROPERTY
@given(preset=st.sampled_from(["static", "orca", "vllm_v0", "sarathi", "vllm_v1"]),
       seed=st.integers(0, 2**32 - 1), block_size=st.sampled_from([1, 16]),
       max_model_len=st.integers(32, 400), num_requests=st.integers(1, 12),
       rate=st.sampled_from([5.0, 50.0, 1000.0]), max_num_seqs=st.integers(1, 8),
       slack=st.sampled_from([-1, 0, 0, 1, 3, 50]))
def test_prepare_refuses_too_small_kv_and_every_accepted_run_is_reproducible(
        preset, seed, block_size, max_model_len, num_requests, rate, max_num_seqs, slack):
    """Below the worst request's need (plus vllm_v0/sarathi's admission watermark of
    int(1% of the blocks), §3 block manager, §4 can_allocate) the scenario is refused before the
    run; at or above it the run finishes, and two runs of the same scenario dict (same seed) agree
    exactly: every request's times and counts, every step-log column and the summary, with and
    without fast-forward."""
    raw = scenario_dict(preset, seed, block_size, max_model_len, 2, num_requests, rate, max_num_seqs)
    need = _needed_blocks(raw)
    total = need + slack
    raw["engine"]["num_gpu_blocks"] = total + 1   # + the null block (rule 2.1)
    hold = int(0.01 * total) if preset in ("vllm_v0", "sarathi") else 0
    if total < need + hold:
        event("refused" if slack >= 0 else "refused: one block short")
        with pytest.raises(ScenarioError, match="too small|num_gpu_blocks"):
            prepare(validate_scenario(raw))
        return
    first = _outcome(raw)
    assert all(r[5] is not None for r in first[0])          # every request finished
    assert _outcome(raw) == first                            # same seed, same bytes
    assert _outcome(raw, fast_path=False) == first        # the fast path changes nothing


@pytest.mark.parametrize("preset", ["vllm_v0", "sarathi"])
def test_runner_refuses_a_prompt_the_watermark_never_admits(preset):
    # Block size 16, 101 GPU blocks = 100 usable, watermark int(0.01 * 100) = 1 block. A
    # 1600-token prompt needs 100 blocks; admission needs 100 + 1 > 100 free: never admitted,
    # so the run must be refused up front rather than stall at t=0.
    raw = scenario_dict(preset, 0, 16, 2048, 101, 1, 5.0, 1)
    raw["workload"].update(prompt_len={"kind": "fixed", "value": 1600},
                           output_len={"kind": "fixed", "value": 1})
    with pytest.raises(ScenarioError, match="too small"):
        prepare(validate_scenario(raw))
    raw["engine"]["num_gpu_blocks"] = 103    # 102 usable, watermark 1: 100 + 1 <= 102
    prepared = prepare(validate_scenario(raw))
    assert simulate(prepared, prepared.runs[0]).summary["completed"] == 1
