"""Turn a ``WorkloadSpec`` (the scenario's ``workload:`` block) into a ``WorkloadTrace``.

Draw order from the passed generator (fixed, so one seed gives the same bytes):
- ``num_requests`` N: (1) lengths: ``lengths`` (vllm_random: inputs, outputs[, offsets, prefix]) or
  ``prompt_len`` then ``output_len``; (2) arrival times; (3) priorities. Lengths come first so that a
  fresh ``default_rng(seed)`` gives vLLM's own random-dataset lengths, and so that sweeping the rate
  keeps every request's lengths (paired comparisons). ``lengths: {kind: sharegpt}`` draws one table
  row per request.
- ``duration_s``: (1) arrival times (they decide N); then lengths and priorities as above.
- trace: nothing is drawn except priorities, when ``priority`` is given (it overrides the trace's).

Closed loop: ``max_concurrency`` C is vLLM bench's client semaphore over in-flight requests; it is
carried on the trace and the engine enforces it. Combined with arrival kind ``inf`` it is C users
issuing requests back to back; with a finite rate, arrivals beyond C wait for a free slot.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Annotated, Literal, Union

import numpy as np

from cost_models.options import OPTIONS_CONFIG, Constraint, PositiveInt
from simulator.workload.arrivals import ConstantArrivals, GammaArrivals, InfArrivals, PoissonArrivals
from simulator.workload.lengths import (EmpiricalLength, FixedLength, LognormalLength, UniformLength,
                                        VllmRandomLengths, invalid)
from simulator.workload.sessions import SessionsSpec, session_rows
from simulator.workload.sharegpt import SharegptLength, SharegptLengths
from simulator.workload.traces import (MAX_ARRIVAL_S, TraceArrivals, WorkloadTrace,
                                       first_arrival_too_late)

# The classes of each ``kind``, in the order error messages list the kinds.
ARRIVALS = (PoissonArrivals, GammaArrivals, ConstantArrivals, InfArrivals, TraceArrivals)
LENGTHS = (FixedLength, UniformLength, LognormalLength, EmpiricalLength, SharegptLength)
JOINT_LENGTHS = (VllmRandomLengths, SharegptLengths)   # ``lengths``: prompt and output together
ArrivalSpec = Annotated[Union[ARRIVALS], Constraint(discriminator="kind")]
LengthSpec = Annotated[Union[LENGTHS], Constraint(discriminator="kind")]
JointLengthSpec = Annotated[Union[JOINT_LENGTHS], Constraint(discriminator="kind")]


@dataclass(frozen=True)
class PriorityChoice:
    """Each request's priority drawn from ``values`` (vLLM: lower is served first), with optional
    ``weights``. A single value draws nothing."""

    kind: Literal["choice"] = field(default="choice", kw_only=True)
    values: tuple[int, ...]
    weights: tuple[Annotated[float, Constraint(strict=True, ge=0, allow_inf_nan=False)], ...] | None = None
    __pydantic_config__ = OPTIONS_CONFIG

    def __post_init__(self) -> None:
        if not self.values or not all(isinstance(v, int) and not isinstance(v, bool) for v in self.values):
            raise invalid("PriorityChoice.values", self.values, "a non-empty list of integers")
        weights = self.weights
        if weights is not None and (len(weights) != len(self.values) or not _valid_weights(weights)):
            raise invalid("PriorityChoice.weights", weights,
                          f"{len(self.values)} finite numbers >= 0 (one per value) with a positive sum")

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        values = np.asarray(self.values, dtype=np.int64)
        if values.size == 1:
            return np.full(n, values[0], dtype=np.int64)
        p = None if self.weights is None else np.asarray(self.weights, dtype=np.float64) / sum(self.weights)
        return rng.choice(values, size=n, p=p)


def _valid_weights(weights: tuple[float, ...]) -> bool:
    return all(math.isfinite(w) and w >= 0 for w in weights) and sum(weights) > 0


def _of_kind(value: object, classes: tuple[type, ...]) -> bool:
    """``value`` is an instance of the class of its own ``kind``."""
    kind = getattr(value, "kind", None)
    return any(cls.kind == kind and isinstance(value, cls) for cls in classes)


def _kinds(classes: tuple[type, ...]) -> str:
    return ", ".join(cls.kind for cls in classes)


@dataclass(frozen=True)
class WorkloadSpec:
    """What to generate. Exactly one of ``num_requests`` / ``duration_s`` (a trace may give either or
    neither: neither replays it whole); ``prompt_len`` and ``output_len``, or ``lengths``, not both
    (a trace supplies its own lengths)."""

    arrival: ArrivalSpec
    prompt_len: LengthSpec | None = None
    output_len: LengthSpec | None = None
    num_requests: PositiveInt | None = None
    duration_s: Annotated[float, Constraint(strict=True, gt=0, allow_inf_nan=False)] | None = None
    max_concurrency: PositiveInt | None = None
    lengths: JointLengthSpec | None = None
    priority: PriorityChoice | None = None
    sessions: SessionsSpec | None = None   # multi-turn conversations (simulator/workload/sessions.py)
    __pydantic_config__ = OPTIONS_CONFIG

    def __post_init__(self) -> None:
        self._check_types()
        for name in ("prompt_len", "output_len"):   # sharegpt draws the column of its own field
            if hasattr(getattr(self, name), "for_field"):
                object.__setattr__(self, name, getattr(self, name).for_field(name))
        self._check_size()
        self._check_lengths()
        self._check_sessions()
        c = self.max_concurrency
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 1):
            raise invalid("WorkloadSpec.max_concurrency", c, "an integer >= 1 or null")

    @property
    def is_trace(self) -> bool:
        return getattr(self.arrival, "kind", None) == "trace"

    def _check_types(self) -> None:
        if not _of_kind(self.arrival, ARRIVALS):
            raise ValueError(f"WorkloadSpec.arrival: {self.arrival!r} is not allowed; kind must be one of "
                             f"{_kinds(ARRIVALS)}")
        for name in ("prompt_len", "output_len"):
            value = getattr(self, name)
            if value is not None and not _of_kind(value, LENGTHS):
                raise ValueError(f"WorkloadSpec.{name}: {value!r} is not allowed; kind must be one of "
                                 f"{_kinds(LENGTHS)}")

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


    def _check_sessions(self) -> None:
        if self.sessions is None:
            return
        clash = ("arrival kind 'trace'" if self.is_trace else "max_concurrency"
                 if self.max_concurrency is not None else "lengths" if self.lengths is not None
                 else None)
        if clash is not None:
            raise ValueError(f"WorkloadSpec.sessions: not allowed with {clash} (sessions send each "
                             f"turn after the last; prompt_len is a turn's new message)")


def generate_workload(spec: WorkloadSpec, rng: np.random.Generator,
                      max_prompt_tokens: int | None = None) -> WorkloadTrace:
    """Generate the requests of ``spec``, drawing from ``rng`` in the documented order.
    ``max_prompt_tokens``: the model's context, past which sessions' prompts are not built (the
    run is refused for its lengths; simulator/workload/sessions.py)."""
    if spec.sessions is not None:
        trace = _session_workload(spec, rng, max_prompt_tokens)
    elif spec.is_trace:
        trace = _trace_workload(spec)
    elif spec.num_requests is not None:
        prompt, output, token_ids = _lengths(spec, spec.num_requests, rng)
        arrival = spec.arrival.arrival_times_s(spec.num_requests, rng)
        trace = WorkloadTrace(arrival, prompt, output, token_ids)
    else:
        arrival = spec.arrival.arrival_times_until_s(spec.duration_s, rng)
        prompt, output, token_ids = _lengths(spec, arrival.size, rng)
        trace = WorkloadTrace(arrival, prompt, output, token_ids)
    if first_arrival_too_late(trace.arrival_s) is not None:   # drawn, or a trace's scaled times
        raise ValueError(f"workload.arrival: the drawn arrivals reach {trace.arrival_s[-1]:g} s; float "
                         f"time keeps microseconds only up to {MAX_ARRIVAL_S:g} s: raise the rate or "
                         f"ask for fewer requests")
    priority = trace.priority if spec.priority is None else spec.priority.sample(len(trace), rng)
    return dataclasses.replace(trace, priority=priority, max_concurrency=spec.max_concurrency)


def expected_num_requests(spec: WorkloadSpec) -> float | None:
    """How many requests the workload holds before any is drawn: ``num_requests``, or rate x
    ``duration_s`` for a rate-driven arrival process; None when unknown (a trace)."""
    if spec.num_requests is not None:
        return spec.num_requests
    rate = getattr(spec.arrival, "rate", None)
    return rate * spec.duration_s if rate is not None and spec.duration_s is not None else None


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


def _session_workload(spec: WorkloadSpec, rng: np.random.Generator,
                      max_prompt_tokens: int | None) -> WorkloadTrace:
    """Sessions (simulator/workload/sessions.py): ``num_requests`` counts sessions."""
    if spec.num_requests is not None:
        starts_s = None
        num_sessions = spec.num_requests
    else:
        starts_s = spec.arrival.arrival_times_until_s(spec.duration_s, rng)
        num_sessions = starts_s.size
    num_turns = spec.sessions.num_turns.sample(num_sessions, rng)
    total = int(num_turns.sum())
    user_lens = spec.prompt_len.sample(total, rng)
    output_lens = spec.output_len.sample(total, rng)
    if starts_s is None:
        starts_s = spec.arrival.arrival_times_s(num_sessions, rng)
    rows = session_rows(spec.sessions, num_turns, user_lens, output_lens, starts_s, rng,
                        max_prompt_tokens)
    return WorkloadTrace(rows.starts_s, rows.num_prompt_tokens, rows.max_output_tokens,
                         rows.prompt_token_ids, sessions=rows.columns)


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
