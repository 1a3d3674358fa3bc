"""Workloads: when requests arrive and how long their prompts and outputs are.

``generate_workload(WorkloadSpec, rng) -> WorkloadTrace`` is the entry point; the option classes are
frozen dataclasses with a ``kind`` discriminator; the scenario layer validates them from their type
hints with pydantic (simulator/scenario.py).

Importing this package loads none of its modules: each name below is imported on first use, and
each option class lives in its own module (simulator/workload/kinds/), so a run loads only what its
scenario names.
"""
from __future__ import annotations

import importlib

from simulator.workload.kinds import ARRIVALS, JOINT_LENGTHS, LENGTHS, PRIORITY

_CLASS_PATHS = (*ARRIVALS.members.values(), *LENGTHS.members.values(), JOINT_LENGTHS.path,
                PRIORITY.path, "simulator.workload.kinds.vllm_random:RangeRatios")
# Each public name -> the module that defines it.
_MODULES = {
    **{name: "simulator.workload.generate"
       for name in ("ArrivalSpec", "LengthSpec", "WorkloadSpec", "generate_workload")},
    "WorkloadTrace": "simulator.workload.traces",
    **{path.partition(":")[2]: path.partition(":")[0] for path in _CLASS_PATHS},
}
__all__ = sorted(_MODULES)


def __getattr__(name: str):
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_MODULES[name]), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULES})
