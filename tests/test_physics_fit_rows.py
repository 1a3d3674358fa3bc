"""What the physics fit weighs (cost_models/fit/physics_fit.py): families alike, parts apart."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from cost_models.batch_shape import BatchShape
from cost_models.fit.physics_fit import (PhysicsFit, PhysicsSamples, fit_physics, leave_one_model_out, predict,
                                         row_weights)
from cost_models.hardware import load_hardware
from cost_models.model_spec import load_model
from cost_models.physics import EFFICIENCY_TERMS, FITTED_TERMS, TERMS
from cost_models.physics_work import physics_work

REFERENCE = Path(__file__).resolve().parents[1] / ".." / "shared" / "reference"
LSS_LLAMA = REFERENCE / "llmservingsim" / "profiles" / "RTXPRO6000" / "meta-llama" / "Llama-3.1-8B" / "bf16"
H200 = load_hardware("h200")
# Inverse efficiencies at 1 or more (the fit's peak bound), overheads in seconds.
TRUE = (dict.fromkeys(FITTED_TERMS, 0.0) | dict.fromkeys(EFFICIENCY_TERMS, 1.0)
        | {"gemm": 1.3, "decode_kv_read": 1.1, "lm_head": 1.2, "layer_launch": 2e-6})


def _samples(name: str, shapes: list[BatchShape], part: str = "step",
             measured: tuple[str, ...] = TERMS) -> PhysicsSamples:
    """The rows' times as the physics rule gives them at TRUE, of the terms ``measured`` alone."""
    rows = PhysicsSamples(load_model(name), H200, 1, shapes, np.ones(len(shapes)), "synthetic",
                          measured=measured, part=part)
    return dataclasses.replace(rows, time_s=predict(PhysicsFit(TRUE, 1.0, {}), rows))


def test_each_models_families_weigh_alike_in_sum():
    steps = _samples("llama-3.1-8b", [BatchShape.of([64], [0])] + [BatchShape.of([1] * n, [100] * n) for n in (1, 2, 4)])
    part = _samples("llama-3.1-8b", [BatchShape.of([1], [0])] * 2, part="lm_head and sampler")
    w2 = row_weights([steps, part]) ** 2
    # groups: prefill (1 row), decode (3), the part (2): each 6 / 3 = 2 in sum.
    assert w2.tolist() == pytest.approx([2.0, 2 / 3, 2 / 3, 2 / 3, 1.0, 1.0])


def test_parts_are_fitted_but_errors_are_of_whole_steps():
    shapes = [BatchShape.of([t], [0]) for t in (16, 256, 2048)] + [BatchShape.of([1] * n, [512] * n) for n in (1, 8, 64)]
    steps = [_samples(m, shapes) for m in ("llama-3.1-8b", "qwen3-8b")]
    parts = [dataclasses.replace(s, part="lm_head and sampler", measured=("lm_head", "logits"),
                                 time_s=s.time_s * 10) for s in steps]   # wrong on purpose: not reported
    fit = fit_physics(steps + parts)
    assert set(fit.train_errors) == {"prefill", "decode", "all"}
    assert fit.train_errors["all"]["n"] == 2 * len(shapes)
    lomo = leave_one_model_out(steps + parts)
    assert {m: errs["all"]["n"] for m, errs in lomo.items()} == {"llama-3.1-8b": 6, "qwen3-8b": 6}


def test_a_profiles_own_lm_head_rows_are_its_per_sequence_table():
    if not LSS_LLAMA.is_dir():
        pytest.skip(f"{LSS_LLAMA} absent: the shared LLMServingSim profiles are not on this machine")
    from cost_models.fit.physics_sources import from_llmservingsim
    samples = from_llmservingsim(LSS_LLAMA)
    assert [(s.tensor_parallel_size, s.part) for s in samples] == [
        (1, "step"), (1, "lm_head and sampler"), (2, "step"), (2, "lm_head and sampler")]
    part = samples[1]
    one = [i for i, s in enumerate(part.shapes) if s.num_sampled == 1][0]
    assert part.time_s[one] == pytest.approx((714.006 + 24.746) * 1e-6, rel=1e-9)   # per_sequence.csv, 1 sequence
    features = part.features(1.0)
    assert set(np.flatnonzero(features.any(axis=0))) == {TERMS.index("lm_head"), TERMS.index("logits")}
    assert samples[0].decode_skew == 0.0543 and samples[2].decode_skew == 0.0654   # meta.yaml skew_fit


def test_the_lm_head_rows_settle_its_weight_read():
    # Whole-step sums of two models cannot tell the lm_head's weight read from other per-step
    # constants: fitted on the Qwen3 models' sums alone it came out 4x Llama-3.1-8B's measured
    # lm_head; with the profiles' own lm_head rows it is what per_sequence.csv measures.
    qwens = [LSS_LLAMA.parents[2] / "Qwen" / name / "bf16" for name in ("Qwen3-32B", "Qwen3-30B-A3B-Instruct-2507")]
    if not all(q.is_dir() for q in qwens):
        pytest.skip(f"{qwens[0].parent} absent: the shared LLMServingSim profiles are not on this machine")
    from cost_models.fit.physics_sources import from_llmservingsim
    samples = [s for q in qwens for s in from_llmservingsim(q) if s.tensor_parallel_size == 1]
    llama_s = physics_work(load_model("llama-3.1-8b"), load_hardware("rtx-pro-6000")).lm_head[1]
    measured_s = 714.006e-6   # per_sequence.csv of Llama-3.1-8B, lm_head of 1 sequence
    for rows, low, high in ((samples, 0.9, 1.1), ([s for s in samples if s.is_step], 2.0, 10.0)):
        fit = fit_physics(rows, tiles=(128,))
        ratio = fit.coefficients["lm_head"] * fit.gemm_balance * llama_s / measured_s
        assert low < ratio < high, (len(rows), ratio)
