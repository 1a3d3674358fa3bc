"""Build a step-cost model from a scenario's ``cost_model`` section.

``COST_MODEL_BUILDERS`` maps each kind to a builder ``(options, model, hardware, tensor_parallel_size)
-> StepCostModel`` and to the option names it accepts; a new kind is one more entry.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple

from cost_models.base import StepCostModel
from cost_models.hardware import HardwareSpec
from cost_models.model_spec import ModelSpec
from cost_models.profiles import build_profiled
from cost_models.roofline import RooflineCostModel
from cost_models.unit import UnitCostModel

Builder = Callable[[dict, ModelSpec, HardwareSpec, int], StepCostModel]


class CostModelKind(NamedTuple):
    build: Builder
    options: tuple[str, ...]


def _init_fields(cls, exclude: tuple[str, ...] = ()) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls) if f.init and f.name not in exclude)


_ROOFLINE_CONTEXT = ("model", "hardware", "tensor_parallel_size")  # from the scenario, not options

COST_MODEL_BUILDERS: dict[str, CostModelKind] = {
    "unit": CostModelKind(lambda options, model, hardware, tp: UnitCostModel(**options),
                          _init_fields(UnitCostModel)),
    "roofline": CostModelKind(
        lambda options, model, hardware, tp: RooflineCostModel(model, hardware, tp, **options),
        _init_fields(RooflineCostModel, exclude=_ROOFLINE_CONTEXT)),
    # A fitted cost model file: a shipped profile by name or any file `servesim fit` wrote.
    "profiled": CostModelKind(build_profiled, ("profile", "path", "step_overhead_s")),
}


def make_cost_model(kind: str, options: dict, model: ModelSpec, hardware: HardwareSpec,
                    tensor_parallel_size: int) -> StepCostModel:
    entry = COST_MODEL_BUILDERS.get(kind)
    if entry is None:
        raise ValueError(f"cost_model.kind: {kind!r} is not one of {', '.join(sorted(COST_MODEL_BUILDERS))}")
    for name in options:
        if name not in entry.options:
            raise ValueError(f"cost_model.{name}: not an option of kind {kind!r} "
                             f"(allowed: {', '.join(entry.options) or 'none'})")
    return entry.build(dict(options), model, hardware, tensor_parallel_size)
