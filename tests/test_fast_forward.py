"""Advancing identical decode steps in one event gives exactly the step-by-step results
(design §3: "provided results equal the step-by-step run exactly (a test proves it)")."""
import numpy as np
import pytest

from simulator.output import request_rows, summary_json
from simulator.runner import prepare, simulate
from simulator.scenario import validate_scenario

PRESETS = [
    {"preset": "vllm_v1"},
    {"preset": "vllm_v1", "enable_chunked_prefill": False},
    {"preset": "vllm_v1", "scheduling_policy": "priority", "long_prefill_token_threshold": 24},
    {"preset": "vllm_v1", "reserve_full_isl": False},
    {"preset": "vllm_v0"},
    {"preset": "vllm_v0", "enable_chunked_prefill": True},
    {"preset": "sarathi"},
    {"preset": "orca"},
    {"preset": "orca", "reserve": "request"},
    {"preset": "static"},
    {"preset": "static", "variant": "hf"},
]


def random_scenario(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    sched = dict(PRESETS[seed % len(PRESETS)])
    max_model_len = int(rng.choice([128, 256, 512]))
    seats = int(rng.integers(1, 9))
    sched["max_num_seqs"] = seats
    if sched["preset"] in ("vllm_v1", "vllm_v0", "sarathi"):
        budget = int(rng.integers(seats, 300))
        if not sched.get("enable_chunked_prefill", sched["preset"] != "vllm_v0"):
            budget = max(budget, max_model_len)
        sched["max_num_batched_tokens"] = max(budget, seats)
    reserve_blocks = -(-max_model_len // 16)
    arrival = [{"kind": "poisson", "rate": float(rng.uniform(0.5, 20))},
               {"kind": "inf"},
               {"kind": "gamma", "rate": float(rng.uniform(1, 10)), "burstiness": 0.3}][seed % 3]
    workload = {"arrival": arrival,
                "prompt_len": {"kind": "uniform", "low": 1, "high": max_model_len // 2},
                "output_len": {"kind": "uniform", "low": 1, "high": max_model_len // 2 - 1},
                "num_requests": int(rng.integers(5, 40))}
    if seed % 5 == 0:
        workload["max_concurrency"] = int(rng.integers(1, 6))
    if sched.get("scheduling_policy") == "priority":
        workload["priority"] = {"values": [0, 1, 2]}
    return {"name": f"ff-{seed}", "seed": seed, "model": "llama-2-7b", "hardware": "a100-80gb",
            "cost_model": {"kind": "roofline"} if seed % 2 else {"kind": "unit", "fixed_step_time_s": 0.01},
            "engine": {"num_gpu_blocks": int(rng.integers(reserve_blocks + 1, 6 * reserve_blocks)),
                       "max_model_len": max_model_len},
            "workload": workload, "schedulers": [sched]}


def fingerprint(out) -> tuple:
    cols = out.result.step_log.to_columns()
    return (list(request_rows(out.result.requests)), {k: v.tolist() for k, v in cols.items()},
            summary_json(out.summary))


@pytest.mark.parametrize("seed", range(66))
def test_fast_forward_equals_step_by_step(seed):
    prepared = prepare(validate_scenario(random_scenario(seed)))
    run = prepared.runs[0]
    stepwise = simulate(prepared, run, fast_forward=False)
    fast = simulate(prepared, run, fast_forward=True)
    assert fingerprint(fast) == fingerprint(stepwise)


@pytest.mark.parametrize("seed", range(0, 66, 3))
def test_fast_forward_equals_step_by_step_without_kept_gaps(seed):
    # Without per-token gaps the ITL figures come from per-request summaries; the sum of squared
    # gaps is grouped per run by the fast path (fast_forward.apply_decode_run), the rest is exact.
    scenario = random_scenario(seed)
    scenario["metrics"] = {"record_itl_gaps": False}
    prepared = prepare(validate_scenario(scenario))
    run = prepared.runs[0]
    stepwise = simulate(prepared, run, fast_forward=False)
    fast = simulate(prepared, run, fast_forward=True)
    std_slow, std_fast = stepwise.summary.pop("std_itl_ms"), fast.summary.pop("std_itl_ms")
    # E[x²] - E[x]² loses ~1e-8 of the mean to cancellation on either path: compare to 1 ns.
    assert std_fast == pytest.approx(std_slow, rel=1e-9, abs=1e-6)
    assert fingerprint(fast) == fingerprint(stepwise)
    assert fast.summary["mean_itl_ms"] is not None and fast.summary["median_itl_ms"] is None


def test_fast_forward_actually_skips_events():
    # Otherwise the equality test above would pass trivially.
    import simpy
    counts = {}
    original = simpy.Environment.step

    def counting_step(self):
        counts[id(self)] = counts.get(id(self), 0) + 1
        return original(self)

    scenario = random_scenario(1)
    scenario["workload"] = {"arrival": {"kind": "inf"}, "prompt_len": {"kind": "fixed", "value": 8},
                            "output_len": {"kind": "fixed", "value": 60}, "num_requests": 4}
    prepared = prepare(validate_scenario(scenario))
    simpy.Environment.step = counting_step
    try:
        simulate(prepared, prepared.runs[0], fast_forward=False)
        simulate(prepared, prepared.runs[0], fast_forward=True)
    finally:
        simpy.Environment.step = original
    slow, fast = counts.values()
    assert fast < slow / 5
