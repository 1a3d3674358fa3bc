"""A cost model is one method, ``step_time_s(shape)`` (cost_models/base.py): a model written as
that alone is correct on every path, and a model's optional run method gives the floats its
``step_time_s`` gives."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from cost_models.batch_shape import BatchShape
from simulator.runner import prepare, simulate
from simulator.scenario import validate_scenario
from tests.test_fast_paths import PRESETS, fingerprint, random_scenario


def shipped_cost_models():
    """(name, model) for every shipped profile that loads on a Llama model, and the roofline."""
    from cost_models.profiles import profile_names
    models = []
    for name in profile_names():
        big = "70b" in name
        scenario = {"name": "price", "seed": 1, "model": "llama-2-70b" if big else "llama-3.1-8b",
                    "hardware": "a100-80gb", "cost_model": {"kind": "profiled", "profile": name},
                    "engine": {"tensor_parallel_size": 2 if big else 1},
                    "workload": {"arrival": {"kind": "inf"}, "prompt_len": {"kind": "fixed", "value": 8},
                                 "output_len": {"kind": "fixed", "value": 8}, "num_requests": 1},
                    "schedulers": [{"preset": "vllm_v1"}]}
        try:
            with warnings.catch_warnings():   # a profile measured on a sibling model warns
                warnings.simplefilter("ignore", RuntimeWarning)
                models.append((name, prepare(validate_scenario(scenario)).cost_model))
        except Exception:   # a profile of another model family: its own tests cover it
            continue
    models.append(("roofline", prepare(validate_scenario(random_scenario(1))).cost_model))
    return models


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # shapes past a profile's fitted range
def test_a_models_run_method_gives_its_step_time_to_the_bit():
    rng = np.random.default_rng(7)
    checked = 0
    for name, model in shipped_cost_models():
        if not hasattr(model, "decode_steps_time_s"):
            continue
        for rows in (1, 3, 26, 97, 256):
            context_sum = int(rng.integers(rows, rows * 900))
            longest = context_sum // rows + 5
            times = model.decode_steps_time_s(rows, context_sum, longest, 50)
            expected = [model.step_time_s(BatchShape.of_decode_rows(rows, context_sum + i * rows, longest + i))
                        for i in range(50)]
            assert times == expected, name
            checked += 1
    assert checked >= 10


class ToyCostModel:
    """A plug-in model written as step_time_s alone: 1 ms per step, 10 ns per token of context
    read, 20 us per token computed."""

    def step_time_s(self, shape: BatchShape) -> float:
        tokens, decode_ctx, _, _, prefill_ctx, _, _, _ = shape.work_counts
        return 1e-3 + 1e-8 * (decode_ctx + prefill_ctx) + 2e-5 * tokens


@pytest.mark.parametrize("index", range(len(PRESETS)))
def test_a_one_method_cost_model_runs_every_preset_on_both_paths(index):
    scenario = random_scenario(index)   # seed % len(PRESETS) picks the preset
    prepared = prepare(validate_scenario(scenario))
    prepared.cost_model = ToyCostModel()
    run = prepared.runs[0]
    fast, stepwise = simulate(prepared, run, fast_path=True), simulate(prepared, run, fast_path=False)
    assert fingerprint(fast) == fingerprint(stepwise)
    assert fast.summary["completed"] == scenario["workload"]["num_requests"]
    # The toy's own times: a step's duration is its formula of the logged work.
    steps = fast.steps.to_columns()
    assert np.all(steps["end_s"] - steps["start_s"] >= 1e-3 + 2e-5 * steps["num_tokens"] - 1e-12)


def test_the_physics_models_are_among_the_models_checked():
    # shipped_cost_models builds every shipped file, physics ones too (kind profiled reads them).
    from cost_models.physics import PhysicsCostModel
    physics = [name for name, model in shipped_cost_models() if isinstance(model, PhysicsCostModel)]
    assert {"physics-h200-cuda_graph", "physics-h200-eager"} <= set(physics)
