"""A sweep plan: every (point x seed) workload and every scheduler run on it, checked up front.

A point is one value per swept path, crossed in the order the ``sweep:`` block lists them. Seeds
are the replicate axis: ``sweep: {seed: [...]}`` lists them, or ``num_seeds: N`` takes seed,
seed+1, ..., seed+N-1 (one or the other). Each (point, seed) is one workload, generated once and
shared by every scheduler of the file (paired comparison).

A run's ``run_key`` hashes everything that decides its result (the point's scenario with only that
scheduler, and the seed), so a rerun recognises finished runs even after values are added to the
sweep, and refuses rows of a scenario that has since changed.
"""
from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from simulator.scenario import Scenario, ScenarioError, validate_scenario
from simulator.scenario.file import read_raw_scenario
from simulator.scenario.paths import set_path, split_path

SEED_KEY = "seed"
# The axes a throughput-versus-latency curve runs along, in order of preference.
LOAD_KEYS = ("workload.arrival.rate", "workload.max_concurrency")
_RUN_ONLY_FIELDS = ("name", "description", "sweep", "num_seeds")


@dataclass(frozen=True)
class PlannedRun:
    """One scheduler on one (point, seed) workload: one row of sweep.csv."""
    run_key: str
    seed: int
    params: tuple[tuple[str, Any], ...]   # (path, value) of the point, in sweep order
    scheduler: str                        # the scheduler's label
    scheduler_index: int


@dataclass(frozen=True)
class PlannedWorkload:
    """One (point, seed): the scenario every scheduler of the file runs on."""
    seed: int
    params: tuple[tuple[str, Any], ...]
    scenario: Scenario
    runs: tuple[PlannedRun, ...]


@dataclass(frozen=True)
class SweepPlan:
    name: str
    base: Scenario
    param_keys: tuple[str, ...]
    seeds: tuple[int, ...]
    workloads: tuple[PlannedWorkload, ...]
    scheduler_labels: tuple[str, ...] = field(default=())

    @property
    def runs(self) -> list[PlannedRun]:
        return [run for w in self.workloads for run in w.runs]

    @property
    def load_key(self) -> str | None:
        return next((k for k in LOAD_KEYS if k in self.param_keys), None)


def load_plan(path: str | Path, overrides: tuple[str, ...] | list[str] = ()) -> SweepPlan:
    path = Path(path)
    raw = read_raw_scenario(path, overrides)
    return build_plan(raw, path.parent)


def build_plan(raw: dict, base_dir: Path | None) -> SweepPlan:
    """Validate the file, its sweep and every (point, seed) before anything runs."""
    base = validate_scenario(raw, base_dir)
    sweep = dict(base.sweep or {})
    seeds = tuple(sweep.pop(SEED_KEY, None) or range(base.seed, base.seed + base.num_seeds))
    plain = _without_sweep(raw)
    workloads = []
    for values in itertools.product(*sweep.values()):
        params = tuple(zip(sweep, values))
        workloads += _point_workloads(plain, base_dir, params, seeds)
    labels = tuple(r.scheduler for r in workloads[0].runs)
    return SweepPlan(base.name, base, tuple(sweep), seeds, tuple(workloads), labels)


def _point_workloads(plain: dict, base_dir: Path | None, params: tuple[tuple[str, Any], ...],
                     seeds: tuple[int, ...]) -> list:
    raw = plain
    for key, value in params:
        raw = set_path(raw, key, value)
    try:   # once per point: the seed changes nothing that validation checks
        scenario = validate_scenario(set_path(raw, SEED_KEY, seeds[0]), base_dir)
    except ScenarioError as exc:
        where = ", ".join(f"{k}={v!r}" for k, v in params)
        raise ScenarioError(f"sweep point ({where}): {exc}") from None
    labels = [o.label for o in scenario.scheduler_options()]
    workloads = []
    for seed in seeds:
        seeded = set_path(raw, SEED_KEY, seed)
        runs = tuple(PlannedRun(run_key(seeded, i), seed, params, label, i)
                     for i, label in enumerate(labels))
        workloads.append(PlannedWorkload(seed, params, replace(scenario, seed=seed), runs))
    return workloads


def run_key(raw: dict, scheduler_index: int) -> str:
    """A short hash of what decides one run's result (not the scenario's name or other schedulers)."""
    decisive = {k: v for k, v in raw.items() if k not in _RUN_ONLY_FIELDS and k != "schedulers"}
    decisive["scheduler"] = raw["schedulers"][scheduler_index]
    text = json.dumps(decisive, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _without_sweep(raw: dict) -> dict:
    return {k: v for k, v in raw.items() if k not in ("sweep", "num_seeds")}


# -- validation, called by validate_scenario for any file with a sweep block --------------------
def check_sweep(raw: dict, base_dir: Path | None) -> None:
    """Every swept path exists and every value of it gives a valid scenario; ScenarioError if not.

    Each value is checked alone on the file as written (cheap: one validation per value); the
    crossed points are validated by ``build_plan`` before any run.
    """
    sweep = raw.get("sweep") or {}
    if SEED_KEY in sweep and raw.get("num_seeds") is not None:
        raise ScenarioError("num_seeds: give either num_seeds or sweep.seed (a list of seeds), "
                            "not both")
    for key, values in sweep.items():
        _check_shape(key, values)
    plain = _without_sweep(raw)
    for key, values in sweep.items():
        for value in values:
            _check_value(plain, base_dir, key, value)


def _check_shape(key: str, values: list) -> None:
    try:
        split_path(key)
    except ValueError as exc:
        raise ScenarioError(f"sweep.{key}: {exc}") from None
    if not values:
        raise ScenarioError(f"sweep.{key}: an empty list is not allowed; give at least one value")
    seen: list = []
    for value in values:
        if value in seen:
            raise ScenarioError(f"sweep.{key}: {value!r} is given twice; give each value once")
        seen.append(value)


def _check_value(plain: dict, base_dir: Path | None, key: str, value: Any) -> None:
    try:
        point = set_path(plain, key, value)
    except ValueError as exc:
        raise ScenarioError(f"sweep.{key}: {exc}") from None
    try:
        validate_scenario(point, base_dir)
    except ScenarioError as exc:
        message = str(exc)
        if message.startswith(_as_field_path(key)):
            raise ScenarioError(f"sweep.{key}{message[len(_as_field_path(key)):]}") from None
        raise ScenarioError(f"sweep.{key}: the value {value!r} gives an invalid scenario: "
                            f"{message}") from None


def _as_field_path(key: str) -> str:
    """How validation errors spell the path: ``schedulers[1].max_num_seqs``."""
    parts = split_path(key)
    out = parts[0]
    for part in parts[1:]:
        out += f"[{part}]" if part.isdigit() else f".{part}"
    return out
