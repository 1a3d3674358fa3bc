"""Workloads: when requests arrive and how long their prompts and outputs are.

``generate_workload(WorkloadSpec, rng) -> WorkloadTrace`` is the entry point; the option classes are
frozen dataclasses with a ``kind`` discriminator; the scenario layer validates them from their type
hints with pydantic (simulator/scenario/model.py). Arrival processes are in arrivals.py, length
distributions in lengths.py, trace files and the request table in traces.py, priorities and the
spec in generate.py.
"""
from simulator.workload.arrivals import ConstantArrivals, GammaArrivals, InfArrivals, PoissonArrivals
from simulator.workload.generate import (ArrivalSpec, LengthSpec, PriorityChoice, WorkloadSpec,
                                         generate_workload)
from simulator.workload.lengths import (EmpiricalLength, FixedLength, LognormalLength, RangeRatios,
                                        UniformLength, VllmRandomLengths)
from simulator.workload.sharegpt import SharegptLength, SharegptLengths
from simulator.workload.traces import TraceArrivals, WorkloadTrace

__all__ = [
    "ArrivalSpec", "ConstantArrivals", "EmpiricalLength", "FixedLength", "GammaArrivals", "InfArrivals",
    "LengthSpec", "LognormalLength", "PoissonArrivals", "PriorityChoice", "RangeRatios", "SharegptLength",
    "SharegptLengths", "TraceArrivals", "UniformLength", "VllmRandomLengths", "WorkloadSpec",
    "WorkloadTrace", "generate_workload",
]
