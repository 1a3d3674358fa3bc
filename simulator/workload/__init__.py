"""Workloads: when requests arrive and how long their prompts and outputs are.

``generate_workload(WorkloadSpec, rng) -> WorkloadTrace`` is the entry point; the option classes are
frozen dataclasses with a ``kind`` discriminator so the scenario layer can validate them with pydantic.
"""
from simulator.workload.arrivals import ConstantArrivals, GammaArrivals, InfArrivals, PoissonArrivals
from simulator.workload.generate import (ArrivalSpec, LengthSpec, PriorityChoice, WorkloadSpec,
                                         generate_workload)
from simulator.workload.lengths import (EmpiricalLength, FixedLength, LognormalLength, RangeRatios,
                                        UniformLength, VllmRandomLengths)
from simulator.workload.traces import TraceArrivals, WorkloadTrace

__all__ = [
    "ArrivalSpec", "ConstantArrivals", "EmpiricalLength", "FixedLength", "GammaArrivals", "InfArrivals",
    "LengthSpec", "LognormalLength", "PoissonArrivals", "PriorityChoice", "RangeRatios", "TraceArrivals",
    "UniformLength", "VllmRandomLengths", "WorkloadSpec", "WorkloadTrace", "generate_workload",
]
