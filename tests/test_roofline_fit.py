"""The roofline's defaults are fitted (cost_models/fit/roofline_fit.py), and say where they came from."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from cost_models.batch_shape import BatchShape
from cost_models.fit.physics_fit import PhysicsSamples
from cost_models.fit.roofline_fit import defaults_json, fit_roofline
from cost_models.hardware import load_hardware
from cost_models.launches import HARNESS_LAUNCHES, VLLM_LAUNCHES
from cost_models.model_spec import load_model
from cost_models.roofline import RooflineCostModel
from cost_models.roofline_defaults import DEFAULTED, roofline_defaults, _table

SHAPES = ([BatchShape.of([t], [c]) for t in (16, 128, 512, 2048) for c in (0, 1024)]
          + [BatchShape.of([1] * n, [c] * n) for n in (1, 8, 64, 256) for c in (128, 4096)]
          + [BatchShape.of([512] + [1] * n, [0] + [1024] * n) for n in (8, 32)])


def _measured(name: str, launches, truth: dict, overhead: bool) -> PhysicsSamples:
    """Steps priced by the roofline at ``truth``, each layer launching ``launches``' kernels."""
    spec, gpu = load_model(name), load_hardware("h200")
    per_layer = {HARNESS_LAUNCHES: 38, VLLM_LAUNCHES: 10}[launches]   # by hand: 22 + 2 x 8, 8 + 2 x 1
    plain = RooflineCostModel(spec, gpu, 1, truth["compute_efficiency"], truth["bandwidth_efficiency"],
                              step_overhead_s=0.0, launch_s=0.0, decode_skew=0.0)
    time_s = np.array([plain.step_time_s(s) + spec.num_layers * (per_layer + launches[2] * (s.kind == "mixed"))
                       * truth["launch_s"] + (truth["step_overhead_s"] if overhead else 0.0) for s in SHAPES])
    measured = ("step_overhead", "gemm") if overhead else ("gemm",)
    return PhysicsSamples(spec, gpu, 1, SHAPES, time_s, "synthetic", measured=measured, launches=launches)


TRUTH = {"compute_efficiency": 0.57, "bandwidth_efficiency": 0.88, "step_overhead_s": 1.2e-3, "launch_s": 3e-6}


def test_the_fit_recovers_known_efficiencies_and_overheads():
    samples = [_measured(m, HARNESS_LAUNCHES, TRUTH, True) for m in ("llama-3.1-8b", "llama-2-7b")]
    fit = fit_roofline(samples)
    assert fit.values() == pytest.approx(TRUTH, rel=1e-6)
    assert fit.train_errors["all"]["mape_pct"] < 1e-6


def test_a_source_without_cpu_time_leaves_the_step_overhead_at_0():
    truth = TRUTH | {"step_overhead_s": 0.0}
    fit = fit_roofline([_measured("llama-3.1-8b", VLLM_LAUNCHES, truth, False)])
    assert fit.values() == pytest.approx(truth, rel=1e-6, abs=1e-12)


def test_an_unmeasured_gpu_takes_the_median_of_the_fitted_ones():
    fits = {"h200": ([_measured("llama-3.1-8b", HARNESS_LAUNCHES, TRUTH, True)], "a"),
            "h100-sxm": ([_measured("llama-3.1-8b", VLLM_LAUNCHES, TRUTH | {"compute_efficiency": 0.71,
                                                                             "step_overhead_s": 0.0}, False)], "b"),
            "a100-80gb": ([_measured("llama-3.1-8b", VLLM_LAUNCHES, TRUTH | {"compute_efficiency": 0.65,
                                                                              "step_overhead_s": 0.0}, False)], "c")}
    data = defaults_json(fits)
    assert data["gpus"]["h100-sxm"]["compute_efficiency"] == pytest.approx(0.71)
    # the median of 0.57, 0.65, 0.71; the step overhead only where a source measured one (h200)
    assert data["other_gpus"]["compute_efficiency"] == pytest.approx(0.65)
    assert data["other_gpus"]["step_overhead_s"] == pytest.approx(1.2e-3, rel=1e-6)


def test_the_shipped_defaults_name_their_source_and_an_option_still_wins():
    table = _table()
    for gpu, entry in table["gpus"].items():
        assert entry["source"] and entry["models"] and set(DEFAULTED) <= set(entry)
        assert roofline_defaults(gpu) == {k: entry[k] for k in DEFAULTED}
    assert roofline_defaults("b200") == {k: table["other_gpus"][k] for k in DEFAULTED}
    model = RooflineCostModel(load_model("llama-3.1-8b"), load_hardware("b200"), bandwidth_efficiency=0.5)
    assert model.bandwidth_efficiency == 0.5
    assert model.compute_efficiency == table["other_gpus"]["compute_efficiency"]
    assert dataclasses.replace(model, launch_s=0.0).step_time_s(BatchShape.of([1], [10])) < model.step_time_s(
        BatchShape.of([1], [10]))


def test_a_gpu_without_a_skew_sweep_takes_the_measured_alpha():
    table = _table()
    measured = {g: e["decode_skew"] for g, e in table["gpus"].items() if e["decode_skew_measured"]}
    assert measured == {"rtx-pro-6000": pytest.approx(np.mean([0.0543, 0.057, 0.0645]), abs=1e-4)}   # meta.yaml, tp 1
    for gpu, entry in table["gpus"].items():
        assert entry["decode_skew"] == (measured[gpu] if gpu in measured else table["other_gpus"]["decode_skew"])
