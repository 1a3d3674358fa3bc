"""Build a step-cost model from a scenario's ``cost_model`` section.

``COST_MODEL_BUILDERS`` maps each kind to a builder ``(options, model, hardware, tensor_parallel_size)
-> StepCostModel`` and to the option names it accepts; a new kind is one more entry.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable, NamedTuple

if TYPE_CHECKING:
    from cost_models.base import StepCostModel
    from cost_models.hardware import HardwareSpec
    from cost_models.model_spec import ModelSpec

Builder = Callable[[dict, "ModelSpec", "HardwareSpec", int], "StepCostModel"]


class CostModelKind(NamedTuple):
    build: Builder
    option_names: Callable[[], tuple[str, ...]]

    @property
    def options(self) -> tuple[str, ...]:
        return self.option_names()


# Each kind's module is imported when that kind is used: start-up time counts (a profiled run
# needs no roofline, a roofline run no profile tables).
def _unit(options, model, hardware, tp):
    from cost_models.unit import UnitCostModel
    return UnitCostModel(**options)


def _unit_options() -> tuple[str, ...]:
    from cost_models.unit import UnitCostModel
    return _init_fields(UnitCostModel)


def _roofline(options, model, hardware, tp):
    from cost_models.roofline import RooflineCostModel
    return RooflineCostModel(model, hardware, tp, **options)


def _roofline_options() -> tuple[str, ...]:
    from cost_models.roofline import RooflineCostModel
    return _init_fields(RooflineCostModel, exclude=_ROOFLINE_CONTEXT)


def _profiled(options, model, hardware, tp):
    from cost_models.profiles import build_profiled
    if model.state_layers is not None:   # its layer tables time attention layers only
        raise ValueError(f"cost_model.kind: 'profiled' has no state-layer terms for hybrid model "
                         f"{model.name}; allowed: roofline, unit")
    return build_profiled(options, model, hardware, tp)


def _physics(options, model, hardware, tp):
    from cost_models.profiles import build_profiled
    return build_profiled(options, model, hardware, tp, kind="physics")


def _init_fields(cls, exclude: tuple[str, ...] = ()) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls) if f.init and f.name not in exclude)


_ROOFLINE_CONTEXT = ("model", "hardware", "tensor_parallel_size")  # from the scenario, not options

COST_MODEL_BUILDERS: dict[str, CostModelKind] = {
    "unit": CostModelKind(_unit, _unit_options),
    "roofline": CostModelKind(_roofline, _roofline_options),
    # A fitted cost model file: a shipped profile by name or any file `servesim fit` wrote.
    "profiled": CostModelKind(_profiled, lambda: ("profile", "path", "step_overhead_s")),
    # A physics file (cost_models/physics.py): one GPU and mode's efficiencies, any model's config.
    "physics": CostModelKind(_physics, lambda: ("profile", "path", "step_overhead_s")),
}


def make_cost_model(kind: str, options: dict, model: ModelSpec, hardware: HardwareSpec,
                    tensor_parallel_size: int) -> StepCostModel:
    entry = COST_MODEL_BUILDERS.get(kind) if isinstance(kind, str) else None
    if entry is None:
        raise ValueError(f"cost_model.kind: {kind!r} is not one of {', '.join(sorted(COST_MODEL_BUILDERS))}")
    for name in options:
        if name not in entry.options:
            raise ValueError(f"cost_model.{name}: not an option of kind {kind!r} "
                             f"(allowed: {', '.join(entry.options) or 'none'})")
    return entry.build(dict(options), model, hardware, tensor_parallel_size)
