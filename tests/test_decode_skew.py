"""Decodes of unequal context (cost_models/decode_skew.py): one rule for tables and physics."""
from __future__ import annotations

import pytest

from cost_models.batch_shape import BatchShape
from cost_models.decode_skew import skewed_time_s
from cost_models.hardware import load_hardware
from cost_models.model_spec import load_model
from cost_models.physics import TERMS, PhysicsCostModel
from cost_models.physics_file import decode_skew_at

LLAMA, H200 = load_model("llama-3.1-8b"), load_hardware("h200")
COEFFICIENTS = dict.fromkeys(TERMS, 1e-3) | {"host_launch": 0.0, "mixed_decode_waves": 0.0}


def test_the_rule_by_hand():
    # t(c) = 10 + c: mean 200, longest 300, alpha 0.25 -> 210 + 0.25 x 100.
    assert skewed_time_s(lambda c: 10 + c, 2, 400, 300, 0.25) == 235.0
    assert skewed_time_s(lambda c: 10 + c, 2, 400, 200, 0.25) == 210.0   # equal contexts: t(mean)
    assert skewed_time_s(lambda c: 10 + c, 1, 200, 200, 0.25) == 210.0   # one decode: no skew
    assert skewed_time_s(lambda c: 10 + c, 2, 400, 300, 0.0) == 210.0


def test_physics_prices_unequal_decodes_by_the_rule():
    skewed = PhysicsCostModel(LLAMA, H200, COEFFICIENTS, 1.5, decode_skew=0.25)
    plain = PhysicsCostModel(LLAMA, H200, COEFFICIENTS, 1.5)
    mean_s = plain.step_time_s(BatchShape.of([1, 1], [200, 200]))
    longest_s = plain.step_time_s(BatchShape.of([1, 1], [300, 300]))
    assert longest_s > mean_s
    shape = BatchShape.of([1, 1], [100, 300])
    assert plain.step_time_s(shape) == pytest.approx(mean_s, rel=1e-12)
    assert skewed.step_time_s(shape) == pytest.approx(mean_s + 0.25 * (longest_s - mean_s), rel=1e-12)
    assert skewed.step_time_s(BatchShape.of([1, 1], [200, 200])) == mean_s


def test_the_run_method_with_skew_gives_step_time_to_the_bit():
    model = PhysicsCostModel(LLAMA, H200, COEFFICIENTS, 1.5, decode_skew=0.06)
    times = model.decode_steps_time_s(7, 900, 400, 20)
    assert times == [model.step_time_s(BatchShape.of_decode_rows(7, 900 + 7 * i, 400 + i)) for i in range(20)]


@pytest.mark.parametrize("alpha", [-0.1, 1.5, True])
def test_an_alpha_outside_0_to_1_is_refused(alpha):
    with pytest.raises(ValueError, match=r"decode_skew: .* is not a number from 0 to 1"):
        PhysicsCostModel(LLAMA, H200, COEFFICIENTS, 1.5, decode_skew=alpha)


def test_a_file_gives_its_tp_degree_or_the_nearest_measured():
    data = {"decode_skew": {"alpha_by_tp": {"1": 0.05, "2": 0.07}}}
    assert [decode_skew_at(data, tp) for tp in (1, 2, 4, 8)] == [0.05, 0.07, 0.07, 0.07]
    assert decode_skew_at({"decode_skew": {"alpha_by_tp": {"1": 0.05, "4": 0.09}}}, 2) == 0.05   # a tie: the lower
    assert decode_skew_at({}, 2) == 0.0   # a file of sources that measured none
