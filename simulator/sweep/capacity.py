"""Capacity: the highest request rate (or client concurrency) at which a scheduler still meets
latency SLOs, found by bracketing and bisection, per seed, then averaged with a 95% interval.

An SLO bounds one summary figure: ``p99_ttft_ms <= 1000``, ``median_tpot_ms <= 50``,
``p90_e2el_ms <= 20000`` (mean, median or any percentile of ttft, tpot, itl, e2el). A run meets
its SLOs when every bound holds and every request finished.

Search, for one scheduler and one seed: probe the scenario's own value; double it while the SLOs
hold (or halve it while they fail) to bracket the boundary, then bisect (geometrically for a
rate, by integers for a concurrency) until the bracket is within ``rel_tol``. The capacity is the
highest value seen to meet the SLOs. Every probe is a fresh workload from the same seed, and the
workload draws lengths before arrival gaps, so a probe at a higher rate is the same requests
arriving faster: latency grows with the rate and the bisection is well posed. Same seed, same
answer.

A rate meets the SLOs only at steady state (results/steady_state.py): a short run at a rate the
engine cannot sustain may finish before its queue has grown, and would meet them by luck of its
length. A probe that meets the SLOs but is not steady is run again ``LENGTHEN_FACTOR`` times
longer (a short run's noise, or a warm-up, settles); still not steady, it fails.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from simulator.runner import prepare, simulate
from simulator.scenario import ScenarioError, validate_scenario
from simulator.scenario.paths import set_path
from simulator.scenario.sweep_plan import LOAD_KEYS
from simulator.sweep.stats import Estimate, mean_ci95

SLO_KEY = re.compile(r"^(mean|median|p(\d+(?:\.\d+)?))_(ttft|tpot|itl|e2el)_ms$")
RATE, CONCURRENCY = LOAD_KEYS
MAX_BRACKET_STEPS = 12   # doublings or halvings before giving up: a factor of 4096
LENGTHEN_FACTOR = 4      # a probe judged not steady runs once more, this many times longer


@dataclass(frozen=True)
class CapacitySearch:
    over: str = RATE              # workload.arrival.rate or workload.max_concurrency
    rel_tol: float = 0.05         # stop when high / low <= 1 + rel_tol (rate) or high - low <= 1

    def __post_init__(self) -> None:
        if self.over not in LOAD_KEYS:
            raise ValueError(f"over: {self.over!r} must be one of {', '.join(LOAD_KEYS)}")
        if not (isinstance(self.rel_tol, (int, float)) and 0 < self.rel_tol < 1):
            raise ValueError(f"rel_tol: {self.rel_tol!r} must be a number in (0, 1)")

    @property
    def is_integer(self) -> bool:
        return self.over == CONCURRENCY


@dataclass(frozen=True)
class Probe:
    value: float
    met: bool
    summary: dict = field(repr=False, compare=False)

    @property
    def steady(self) -> bool:
        return bool(self.summary.get("steady_state", True))


@dataclass(frozen=True)
class CapacityResult:
    scheduler: str
    seed: int
    capacity: float        # 0.0 when even the lowest probe failed
    bounded: bool          # False: the SLOs held at every probe (capacity is a lower bound)
    probes: tuple[Probe, ...]

    def rates_at_capacity(self) -> tuple[float | None, float | None]:
        """(offered, achieved) request rates over the second half of the capacity probe's
        arrivals (results/steady_state.py); None where no probe met the SLOs."""
        best = [p for p in self.probes if p.met and p.value == self.capacity]
        summary = best[-1].summary if best else {}
        return summary.get("offered_request_rate"), summary.get("achieved_request_rate")

    @property
    def num_not_steady(self) -> int:
        """Probes that met the latency SLOs on a run that was not at steady state."""
        return sum(1 for p in self.probes if not p.met and not p.steady
                   and p.summary.get("completed"))


def parse_slos(items: tuple[str, ...] | list[str]) -> dict[str, float]:
    """``("p99_ttft_ms=1000", ...)`` -> ``{"p99_ttft_ms": 1000.0}``; ValueError on a bad item."""
    slos: dict[str, float] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not SLO_KEY.match(key):
            raise ValueError(f"--slo: {item!r} must look like p99_ttft_ms=1000 (mean, median or "
                             f"pNN of ttft, tpot, itl, e2el; a limit in ms)")
        try:
            slos[key] = float(text)
        except ValueError:
            raise ValueError(f"--slo: {item!r}: {text!r} is not a number of ms") from None
        if not (math.isfinite(slos[key]) and slos[key] > 0):
            raise ValueError(f"--slo: {item!r}: the limit must be a positive number of ms")
    return slos


def slos_from_goodput(scenario) -> dict[str, float]:
    """The file's ``metrics.goodput`` limits, read as bounds on the 99th percentile."""
    goodput = scenario.metrics.goodput
    return {f"p99_{k}_ms": v for k, v in goodput.as_dict().items()} if goodput else {}


def meets_slos(summary: dict, slos: dict[str, float]) -> bool:
    if summary.get("num_unfinished"):
        return False
    return all(summary.get(k) is not None and summary[k] <= limit for k, limit in slos.items())


def lengthened(single: dict, factor: int) -> dict | None:
    """The file with a workload ``factor`` times longer (more requests, or a longer duration);
    None for a trace, whose length is its own."""
    workload = dict(single.get("workload") or {})
    if (workload.get("arrival") or {}).get("kind") == "trace":
        return None
    key = "num_requests" if workload.get("num_requests") is not None else "duration_s"
    if workload.get(key) is None:
        return None
    workload[key] = workload[key] * factor
    return {**single, "workload": workload}


def single_scheduler_raw(raw: dict, scheduler_index: int, slos: dict[str, float]) -> dict:
    """The file with one scheduler, no sweep, and the percentiles the SLOs read."""
    single = {k: v for k, v in raw.items() if k not in ("sweep", "num_seeds")}
    single["schedulers"] = [raw["schedulers"][scheduler_index]]
    metrics = dict(single.get("metrics") or {})
    wanted = {float(m.group(2)) for m in map(SLO_KEY.match, slos) if m and m.group(2)}
    have = [float(p) for p in metrics.get("percentiles", (90.0, 95.0, 99.0))]
    metrics["percentiles"] = sorted(set(have) | wanted)
    single["metrics"] = metrics
    return single


def start_value(raw: dict, search: CapacitySearch) -> float:
    workload = raw.get("workload") or {}
    value = (workload.get("arrival") or {}).get("rate") if search.over == RATE \
        else workload.get("max_concurrency")
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise ScenarioError(f"capacity over {search.over}: the file sets no starting value there "
                            f"(a finite arrival rate or a max_concurrency); give one with --set")
    return value


def probe_summary(single: dict, base_dir: Path | None, search: CapacitySearch, value: float,
                  seed: int) -> dict:
    from simulator.engine.progress import NoProgressError
    point = set_path(set_path(single, search.over, value), "seed", seed)
    prepared = prepare(validate_scenario(point, base_dir))
    try:
        return simulate(prepared, prepared.runs[0]).summary
    except NoProgressError as exc:   # a livelock at this load fails the SLOs
        return {"num_unfinished": len(prepared.trace), "error": str(exc)}


def find_capacity(raw: dict, base_dir: Path | None, scheduler_index: int, seed: int,
                  slos: dict[str, float], search: CapacitySearch) -> CapacityResult:
    """One scheduler, one seed: bracket, then bisect (a task for a sweep backend)."""
    single = single_scheduler_raw(raw, scheduler_index, slos)
    label = validate_scenario(single, base_dir).scheduler_options()[0].label
    probes: list[Probe] = []

    def probe(value: float) -> bool:
        summary = probe_summary(single, base_dir, search, value, seed)
        met = meets_slos(summary, slos)
        longer = lengthened(single, LENGTHEN_FACTOR) if search.over == RATE else None
        if met and not summary.get("steady_state", True) and longer is not None:
            summary = probe_summary(longer, base_dir, search, value, seed)
            met = meets_slos(summary, slos)
        steady = search.over != RATE or summary.get("steady_state", True)
        probes.append(Probe(value, met and bool(steady), summary))
        return probes[-1].met

    low, high = search_boundary(probe, start_value(raw, search), search)
    return CapacityResult(label, seed, float(low or 0.0), high is not None, tuple(probes))


def search_boundary(probe: Callable[[float], bool], start: float,
                    search: CapacitySearch) -> tuple[Any, Any]:
    """(highest value that met, lowest that failed) around the boundary of ``probe``; either is
    None when the bracket never found that side."""
    low, high = _bracket(probe, start, search.is_integer)
    while low is not None and high is not None and not _close(low, high, search):
        mid = (low + high) // 2 if search.is_integer else math.sqrt(low * high)
        if probe(mid):
            low = mid
        else:
            high = mid
    return low, high


def _bracket(probe, start: float, integer: bool) -> tuple[Any, Any]:
    """(low that met, high that failed); None for a side never found."""
    value = int(start) if integer else float(start)
    if probe(value):
        low = value
        for _ in range(MAX_BRACKET_STEPS):
            value *= 2
            if not probe(value):
                return low, value
            low = value
        return low, None
    high = value
    for _ in range(MAX_BRACKET_STEPS):
        if integer and value == 1:
            break
        value = max(1, value // 2) if integer else value / 2
        if probe(value):
            return value, high
        high = value
    return None, high


def _close(low: float, high: float, search: CapacitySearch) -> bool:
    return high - low <= 1 if search.is_integer else high / low <= 1 + search.rel_tol


@dataclass(frozen=True)
class SchedulerCapacity:
    scenario: str
    scheduler: str
    estimate: Estimate            # mean over seeds with its 95% interval
    per_seed: tuple[CapacityResult, ...]


def summarize_capacity(scenario: str, results: list[CapacityResult]) -> list[SchedulerCapacity]:
    by_label: dict[str, list[CapacityResult]] = {}
    for r in results:
        by_label.setdefault(r.scheduler, []).append(r)
    return [SchedulerCapacity(scenario, label, mean_ci95(r.capacity for r in rs),
                              tuple(sorted(rs, key=lambda r: r.seed)))
            for label, rs in by_label.items()]


def measure_capacity(raw: dict, base_dir: Path | None, slos: dict[str, float], seeds: list[int],
                     search: CapacitySearch, backend) -> list[SchedulerCapacity]:
    """Every (scheduler, seed) search of one file on ``backend`` (an entered sweep backend)."""
    tasks = [(raw, base_dir, i, seed, slos, search)
             for i in range(len(raw["schedulers"])) for seed in seeds]
    results: list[CapacityResult | None] = [None] * len(tasks)
    for index, result in backend.map_unordered(find_capacity, tasks):
        results[index] = result
    return summarize_capacity(str(raw.get("name")), results)
