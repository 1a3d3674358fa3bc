"""Turn a ``WorkloadSpec`` (the scenario's ``workload:`` block) into a ``WorkloadTrace``.

Draw order from the passed generator (fixed, so one seed gives the same bytes):
- ``num_requests`` N: (1) lengths: ``lengths`` (vllm_random: inputs, outputs[, offsets, prefix]) or
  ``prompt_len`` then ``output_len``; (2) arrival times; (3) priorities. Lengths come first so that a
  fresh ``default_rng(seed)`` gives vLLM's own random-dataset lengths, and so that sweeping the rate
  keeps every request's lengths (paired comparisons).
- ``duration_s``: (1) arrival times (they decide N); then lengths and priorities as above.
- trace: nothing is drawn except priorities, when ``priority`` is given (it overrides the trace's).

Closed loop: ``max_concurrency`` C is vLLM bench's client semaphore over in-flight requests; it is
carried on the trace and the engine enforces it. Combined with arrival kind ``inf`` it is C users
issuing requests back to back; with a finite rate, arrivals beyond C wait for a free slot.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Annotated

import numpy as np

from cost_models.options import OPTIONS_CONFIG, Constraint
from simulator.workload.kinds import ARRIVALS, JOINT_LENGTHS, LENGTHS, PRIORITY
from simulator.workload.lengths import invalid
from simulator.workload.traces import WorkloadTrace

# The option classes are named, not imported: a run imports only those its scenario names.
ArrivalSpec = Annotated[object, ARRIVALS]
LengthSpec = Annotated[object, LENGTHS]
JointLengthSpec = Annotated[object, JOINT_LENGTHS]
PrioritySpec = Annotated[object, PRIORITY]


@dataclass(frozen=True)
class WorkloadSpec:
    """What to generate. Exactly one of ``num_requests`` / ``duration_s`` (a trace may give either or
    neither: neither replays it whole); ``prompt_len`` and ``output_len``, or ``lengths``, not both
    (a trace supplies its own lengths)."""

    arrival: ArrivalSpec
    prompt_len: LengthSpec | None = None
    output_len: LengthSpec | None = None
    num_requests: Annotated[int, Constraint(strict=True, ge=1)] | None = None
    duration_s: Annotated[float, Constraint(strict=True, gt=0, allow_inf_nan=False)] | None = None
    max_concurrency: Annotated[int, Constraint(strict=True, ge=1)] | None = None
    lengths: JointLengthSpec | None = None
    priority: PrioritySpec | None = None
    __pydantic_config__ = OPTIONS_CONFIG

    def __post_init__(self) -> None:
        self._check_types()
        self._check_size()
        self._check_lengths()
        c = self.max_concurrency
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 1):
            raise invalid("WorkloadSpec.max_concurrency", c, "an integer >= 1 or null")

    @property
    def is_trace(self) -> bool:
        return getattr(self.arrival, "kind", None) == "trace"

    def _check_types(self) -> None:
        if not ARRIVALS.holds(self.arrival):
            raise ValueError(f"WorkloadSpec.arrival: {self.arrival!r} is not allowed; kind must be one of "
                             f"{', '.join(ARRIVALS.members)}")
        for name in ("prompt_len", "output_len"):
            value = getattr(self, name)
            if value is not None and not LENGTHS.holds(value):
                raise ValueError(f"WorkloadSpec.{name}: {value!r} is not allowed; kind must be one of "
                                 f"{', '.join(LENGTHS.members)}")

    def _check_size(self) -> None:
        n, duration = self.num_requests, self.duration_s
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise invalid("WorkloadSpec.num_requests", n, "an integer >= 1")
        if duration is not None and not (math.isfinite(duration) and duration > 0):
            raise invalid("WorkloadSpec.duration_s", duration, "a finite number > 0")
        if n is not None and duration is not None:
            raise ValueError("WorkloadSpec.num_requests/duration_s: both given; give exactly one")
        if n is None and duration is None and not self.is_trace:
            raise ValueError("WorkloadSpec.num_requests/duration_s: neither given; give exactly one")
        if duration is not None and self.arrival.kind == "inf":
            raise ValueError("WorkloadSpec.duration_s: not allowed with arrival kind 'inf' (unbounded "
                             "request count); give num_requests instead")

    def _check_lengths(self) -> None:
        given = [name for name in ("prompt_len", "output_len", "lengths") if getattr(self, name) is not None]
        if self.is_trace:
            if given:
                raise ValueError(f"WorkloadSpec.{given[0]}: not allowed with arrival kind 'trace' "
                                 "(the trace supplies the lengths)")
        elif self.lengths is not None:
            if len(given) > 1:
                raise ValueError(f"WorkloadSpec.lengths: not allowed together with {given[0]}; give "
                                 "prompt_len and output_len, or lengths, not both")
        elif given != ["prompt_len", "output_len"]:
            missing = "output_len" if given == ["prompt_len"] else "prompt_len"
            raise ValueError(f"WorkloadSpec.{missing}: missing; give prompt_len and output_len, "
                             "or lengths: {kind: vllm_random, ...}")


def generate_workload(spec: WorkloadSpec, rng: np.random.Generator) -> WorkloadTrace:
    """Generate the requests of ``spec``, drawing from ``rng`` in the documented order."""
    if spec.is_trace:
        trace = _trace_workload(spec)
    elif spec.num_requests is not None:
        prompt, output, token_ids = _lengths(spec, spec.num_requests, rng)
        arrival = spec.arrival.arrival_times_s(spec.num_requests, rng)
        trace = WorkloadTrace(arrival, prompt, output, token_ids)
    else:
        arrival = spec.arrival.arrival_times_until_s(spec.duration_s, rng)
        prompt, output, token_ids = _lengths(spec, arrival.size, rng)
        trace = WorkloadTrace(arrival, prompt, output, token_ids)
    priority = trace.priority if spec.priority is None else spec.priority.sample(len(trace), rng)
    return dataclasses.replace(trace, priority=priority, max_concurrency=spec.max_concurrency)


def generate_seeded_workload(spec: WorkloadSpec, seed: int) -> WorkloadTrace:
    """``generate_workload`` drawing from a fresh ``numpy.random.default_rng(seed)``, a run's one
    generator (``numpy.random`` loads here, on first use)."""
    return generate_workload(spec, np.random.default_rng(seed))


def _lengths(spec: WorkloadSpec, n: int, rng: np.random.Generator
             ) -> tuple[np.ndarray, np.ndarray, tuple[tuple[int, ...], ...] | None]:
    if spec.lengths is not None:
        return spec.lengths.sample(n, rng)
    prompt = spec.prompt_len.sample(n, rng)
    return prompt, spec.output_len.sample(n, rng), None


def _trace_workload(spec: WorkloadSpec) -> WorkloadTrace:
    trace = spec.arrival.load()
    if spec.duration_s is not None:
        return trace.until(spec.duration_s)
    if spec.num_requests is not None:
        if spec.num_requests > len(trace):
            raise ValueError(f"WorkloadSpec.num_requests: {spec.num_requests} is more than the {len(trace)} "
                             f"requests in trace {spec.arrival.path}")
        return trace.head(spec.num_requests)
    return trace
