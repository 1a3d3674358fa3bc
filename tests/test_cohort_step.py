"""A step of a decode cohort's rows and one listed request formed as a CohortStep instead of a
Batch is the same step: whole runs are identical with and without it, for vLLM V1 (semantics §1.2
Phase B), Sarathi (§4: decodes, then a chunk or an admission) and vLLM V0 (§3: a lone prefill),
with rule 1.3.1 sampling and rule 1.3.2 finishing; and its work counts are BatchShape's to the bit."""
from __future__ import annotations

import collections

import numpy as np
import pytest

from cost_models.batch_shape import work_counts_of
from simulator.cohort_step import CohortStep
from simulator.runner import prepare, simulate
from simulator.scenario import validate_scenario
from simulator.schedulers.sarathi import SarathiScheduler
from simulator.schedulers.vllm_v0 import VllmV0Scheduler
from simulator.schedulers.vllm_v1 import VllmV1Scheduler
from tests.test_fast_forward import fingerprint, prefix_cache_scenario, with_scheduler

POLICY_CLASS = {"vllm_v1": VllmV1Scheduler, "sarathi": SarathiScheduler, "vllm_v0": VllmV0Scheduler}


def loaded_scenario(seed: int) -> dict:
    """V1 under load with the knobs Phase B reads: one-token prompts (a one-token admission is a
    decode in the work counts), long-prefill caps (an admission that does not sample), few seats
    and a small KV cache (admissions refused with members running), chunking off, watermarks."""
    rng = np.random.default_rng(7000 + seed)
    sched = {"preset": "vllm_v1", "max_num_seqs": int(rng.integers(2, 12)),
             "max_num_batched_tokens": int(rng.integers(64, 400)),
             "long_prefill_token_threshold": int(rng.choice([0, 0, 16])),
             "enable_prefix_caching": bool(rng.integers(0, 2)),
             "reserve_full_isl": bool(seed % 3), "watermark": float(rng.choice([0.0, 0.05]))}
    if seed % 4 == 3:
        sched.update(enable_chunked_prefill=False, max_num_batched_tokens=256,
                     long_prefill_token_threshold=0)
    return {"name": f"admission-{seed}", "seed": seed, "model": "llama-2-7b",
            "hardware": "a100-80gb", "cost_model": {"kind": "roofline"},
            "engine": {"num_gpu_blocks": int(rng.integers(20, 80)), "max_model_len": 256},
            "workload": {"arrival": {"kind": "poisson", "rate": float(rng.uniform(20, 200))},
                         "prompt_len": {"kind": "uniform", "low": 1, "high": int(rng.choice([4, 100]))},
                         "output_len": {"kind": "uniform", "low": 1, "high": 60},
                         "num_requests": int(rng.integers(20, 60))},
            "schedulers": [sched]}


def run_with_and_without(scenario: dict, monkeypatch) -> tuple:
    """(the run as it is, the same run with every step formed as a Batch, how many steps were
    CohortSteps in the first)."""
    prepared = prepare(validate_scenario(scenario))
    run = prepared.runs[0]
    counts = collections.Counter()
    policy = POLICY_CLASS[run.options.preset if run.scheduler_cls is not SarathiScheduler else "sarathi"]
    real = policy._cohort_step

    def counted(self, now_s):
        step = real(self, now_s)
        counts[type(step).__name__] += 1
        return step

    with monkeypatch.context() as patch:
        patch.setattr(policy, "_cohort_step", counted)
        with_steps = simulate(prepared, run)
    with monkeypatch.context() as patch:
        patch.setattr(policy, "_cohort_step", lambda self, now_s: None)
        batches_only = simulate(prepared, run)
    return with_steps, batches_only, counts["CohortStep"]


@pytest.mark.parametrize("seed", range(24))
def test_v1_runs_are_identical_with_and_without_cohort_steps(seed, monkeypatch):
    with_steps, batches_only, num_cohort_steps = run_with_and_without(loaded_scenario(seed),
                                                                         monkeypatch)
    assert num_cohort_steps > 0   # else this compares nothing
    assert fingerprint(with_steps) == fingerprint(batches_only)


@pytest.mark.parametrize("seed", range(8))
def test_prefix_cache_hits_go_the_same_way(seed, monkeypatch):
    # Shared prefixes: admissions start from cached blocks (context = the hit, fewer new tokens).
    scenario = prefix_cache_scenario(seed)
    with_steps, batches_only, num_cohort_steps = run_with_and_without(scenario, monkeypatch)
    assert num_cohort_steps > 0
    assert fingerprint(with_steps) == fingerprint(batches_only)


@pytest.mark.parametrize("preset", ["vllm_v0", "sarathi"])
@pytest.mark.parametrize("seed", range(12))
def test_sarathi_and_v0_runs_are_identical_with_and_without(preset, seed, monkeypatch):
    # Light and heavy loads: prompts chunked by a small budget and continued next to the
    # members (Sarathi), admissions refused by seats or blocks (the members' rows alone), lone
    # prefills (V0, whose budget holds a whole context), preemptions.
    rng = np.random.default_rng(seed)
    scenario = loaded_scenario(seed)
    scenario["workload"]["arrival"]["rate"] = float(rng.choice([2.0, 200.0]))
    seats = scenario["schedulers"][0]["max_num_seqs"]
    budget = int(rng.integers(seats + 1, 80)) if preset == "sarathi" else 256
    scenario = with_scheduler(scenario, preset=preset, max_num_seqs=seats,
                              max_num_batched_tokens=budget)
    with_steps, batches_only, num_cohort_steps = run_with_and_without(scenario, monkeypatch)
    assert num_cohort_steps > 0
    assert fingerprint(with_steps) == fingerprint(batches_only)


def test_the_common_v1_step_is_a_cohort_step(monkeypatch):
    # The bench's load: most steps that are not multi-step advances admit one arrival.
    scenario = {"name": "share", "seed": 3, "model": "llama-3.1-8b", "hardware": "h100-sxm",
                "cost_model": {"kind": "roofline"},
                "workload": {"arrival": {"kind": "poisson", "rate": 18.0},
                             "prompt_len": {"kind": "lognormal", "median": 512, "sigma": 0.8, "max": 4096},
                             "output_len": {"kind": "lognormal", "median": 200, "sigma": 0.8, "max": 2048},
                             "num_requests": 400},
                "schedulers": [{"preset": "vllm_v1"}]}
    with_steps, batches_only, num_cohort_steps = run_with_and_without(scenario, monkeypatch)
    assert num_cohort_steps > with_steps.summary["completed"] / 2
    assert fingerprint(with_steps) == fingerprint(batches_only)


@pytest.mark.parametrize("seed", range(200))
def test_work_counts_are_batch_shapes(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.choice([1, int(rng.integers(2, 5000))]))
    context = int(rng.integers(0, 5000))
    sample = bool(rng.integers(0, 2))
    rows = (0, 0, 0) if seed % 3 == 0 else (int(rng.integers(1, 300)), int(rng.integers(0, 10**6)),
                                            int(rng.integers(0, 8000)))
    step = CohortStep(rows if rows[0] else None, object(), n, context, sample)
    counts = step.shape().work_counts
    expected = work_counts_of([n], [context], [sample], rows)
    assert counts == expected
    assert [type(c) for c in counts] == [type(c) for c in expected]   # a float stays a float
