"""The unit cost model: a fixed time per step, whatever the step holds."""
import pytest

from cost_models.base import StepCostModel
from cost_models.batch_shape import BatchShape
from cost_models.factory import make_cost_model
from cost_models.hardware import load_hardware
from cost_models.model_spec import load_model
from cost_models.unit import UnitCostModel

SHAPES = [
    BatchShape.of([1], [0]),                          # one decode
    BatchShape.of([1] * 256, [4000] * 256),           # a large decode batch
    BatchShape.of([8192], [0]),                       # a whole long prompt in one step
    BatchShape.of([512, 1, 1], [100, 20, 30], [False, True, True]),  # mixed, partial chunk
]


def test_every_step_costs_the_same_whatever_its_contents():
    model = UnitCostModel(fixed_step_time_s=0.25)
    assert [model.step_time_s(s) for s in SHAPES] == [0.25] * len(SHAPES)


def test_default_step_is_one_second():
    assert UnitCostModel().step_time_s(SHAPES[2]) == 1.0


def test_steps_with_a_prefill_cost_the_prefill_time():
    model = UnitCostModel(fixed_step_time_s=0.25, prefill_step_time_s=2.0)
    assert [model.step_time_s(s) for s in SHAPES] == [0.25, 0.25, 2.0, 2.0]


def test_unit_model_is_a_step_cost_model():
    assert isinstance(UnitCostModel(), StepCostModel)


@pytest.mark.parametrize("kwargs, field", [
    ({"fixed_step_time_s": 0}, "cost_model.fixed_step_time_s"),
    ({"fixed_step_time_s": float("nan")}, "cost_model.fixed_step_time_s"),
    ({"prefill_step_time_s": -1.0}, "cost_model.prefill_step_time_s"),
])
def test_non_positive_times_are_rejected_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        UnitCostModel(**kwargs)


def test_factory_builds_unit_from_options():
    model = make_cost_model("unit", {"fixed_step_time_s": 0.5}, load_model("llama-3.1-8b"),
                            load_hardware("h100"), 1)
    assert model == UnitCostModel(fixed_step_time_s=0.5)


def test_factory_rejects_unknown_unit_option():
    with pytest.raises(ValueError) as exc:
        make_cost_model("unit", {"step_s": 1}, load_model("llama-3.1-8b"), load_hardware("h100"), 1)
    assert str(exc.value) == ("cost_model.step_s: not an option of kind 'unit' "
                              "(allowed: fixed_step_time_s, prefill_step_time_s)")
