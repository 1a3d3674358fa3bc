"""vllm_v1_spf: a new admission order is one small file (simulator/policies/vllm_v1_spf.py), and
every path follows it."""
from __future__ import annotations

import pytest

from simulator.runner import prepare, simulate
from simulator.scenario import validate_scenario
from tests.test_fast_paths import fingerprint


def scenario(preset: str) -> dict:
    return {"name": f"spf-{preset}", "seed": 5, "model": "llama-3.1-8b", "hardware": "h100-sxm",
            "cost_model": {"kind": "roofline"}, "engine": {"num_gpu_blocks": 4000, "max_model_len": 2048},
            "workload": {"arrival": {"kind": "inf"},
                         "prompt_len": {"kind": "uniform", "low": 16, "high": 1500},
                         "output_len": {"kind": "uniform", "low": 20, "high": 60}, "num_requests": 40},
            "schedulers": [{"preset": preset, "max_num_seqs": 2, "max_num_batched_tokens": 4096}]}


def runs(preset: str):
    prepared = prepare(validate_scenario(scenario(preset)))
    run = prepared.runs[0]
    return simulate(prepared, run, fast_path=False), simulate(prepared, run, fast_path=True)


@pytest.mark.parametrize("path", [0, 1], ids=["step_by_step", "fast_path"])
def test_shortest_prompts_are_admitted_first_on_every_path(path):
    out = runs("vllm_v1_spf")[path]
    rows = sorted(out.requests.rows(), key=lambda r: (r.scheduled_s, r.num_prompt_tokens))
    prompts = [r.num_prompt_tokens for r in rows]
    # Everything arrives at once and two seats hold two requests at a time: every request is
    # admitted no later than any with a longer prompt.
    assert prompts == sorted(prompts)
    assert len({r.scheduled_s for r in rows}) > 10   # many admissions, not one


def test_both_paths_agree_and_the_order_differs_from_fcfs():
    stepwise, fast = runs("vllm_v1_spf")
    assert fingerprint(fast) == fingerprint(stepwise)
    fcfs, _ = runs("vllm_v1")
    by_admission = lambda out: [r.request_id for r in sorted(out.requests.rows(), key=lambda r: (r.scheduled_s, r.request_id))]
    assert by_admission(fcfs) == list(range(40))            # FCFS: arrival (id) order
    assert by_admission(stepwise) != by_admission(fcfs)
