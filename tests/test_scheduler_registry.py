"""A policy is one class registered by a decorator; out-of-tree ones load as module:Class."""
import pytest

from simulator.runner import prepare, simulate
from simulator.scenario import ScenarioError, validate_scenario
from simulator.policies.registry import get_preset, preset_names


def test_builtin_presets_and_alias():
    assert {"static", "faster_transformer", "orca", "vllm_v0", "sarathi", "vllm_v1"} <= set(preset_names())
    assert get_preset("faster_transformer").cls is get_preset("static").cls
    assert get_preset("sarathi").defaults == {"max_num_seqs": 128, "max_num_batched_tokens": 512}


def _scenario(preset, **opts):
    return validate_scenario({
        "name": "plugin", "model": "llama-2-7b", "hardware": "a100-80gb",
        "cost_model": {"kind": "unit", "fixed_step_time_s": 1.0},
        "engine": {"num_gpu_blocks": 1000, "max_model_len": 256},
        "workload": {"arrival": {"kind": "constant", "rate": 10.0},
                     "prompt_len": {"kind": "fixed", "value": 8},
                     "output_len": {"kind": "fixed", "value": 4}, "num_requests": 6},
        "schedulers": [{"preset": preset, **opts}]})


def test_out_of_tree_policy_loads_and_runs():
    scenario = _scenario("tests.plugins.lifo_policy:LifoScheduler", max_num_seqs=1)
    prepared = prepare(scenario)
    out = simulate(prepared, prepared.runs[0])
    assert out.summary["completed"] == 6
    # max_num_seqs 1 and LIFO: after request 0, the newest waiting request goes first.
    order = sorted(out.requests.rows(), key=lambda r: r.scheduled_s)
    assert order[0].request_id == 0 and order[1].request_id > 1


def test_unknown_out_of_tree_policy_is_a_clear_error():
    with pytest.raises(ScenarioError, match=r"schedulers\[0\].preset: cannot load 'no.such:Thing'"):
        _scenario("no.such:Thing")
