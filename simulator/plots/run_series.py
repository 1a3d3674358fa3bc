"""What the run plots read: one scheduler's per-request latencies and per-step engine state as
plain numpy arrays (``RunSeries``), built from a result folder's files or from any table with the
requests.csv and steps.csv column names, never from the simulator's own objects.

A run of several replicas (or prefill/decode pools) has a ``replica`` column in steps.csv: each
step is one replica's, with that replica's queues and KV usage. The engine-state panels then draw
one line per replica (``engine_state_series``), named from summary.json's ``replicas`` list.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from simulator.plots.figures import read_columns
from simulator.results.columns import REPLICA

REQUESTS_CSV, STEPS_CSV = "requests.csv", "steps.csv"
LATENCY_COLUMNS = ("ttft_ms", "tpot_ms", "e2el_ms")   # requests.csv columns the plots read
STEP_COLUMNS = ("end_s", "num_running", "num_waiting", "kv_usage", "num_preemptions")  # steps.csv
STATE_SLOTS = "num_state_slots"   # steps.csv of a hybrid model's run only
SUMMARY_JSON = "summary.json"
STEP_ARRAYS = ("step_end_s", "num_running", "num_waiting", "kv_usage", "num_preemptions",
               "num_state_slots")   # a hybrid model's only: masked where the run has it


@dataclass(frozen=True)
class RunSeries:
    """One scheduler's run, as the plots need it. Latencies are of finished requests only
    (``tpot_ms`` also leaves out requests with one output token); step arrays are in step order."""
    label: str
    ttft_ms: np.ndarray
    e2el_ms: np.ndarray
    tpot_ms: np.ndarray
    step_end_s: np.ndarray
    num_running: np.ndarray
    num_waiting: np.ndarray
    kv_usage: np.ndarray
    num_preemptions: np.ndarray
    num_state_slots: np.ndarray = field(default_factory=lambda: np.zeros(0))   # hybrid models
    # Runs of several replicas: each step's replica, and each replica's name by index.
    step_replica: np.ndarray = field(default_factory=lambda: np.empty(0))
    replica_names: tuple[str, ...] = ()

    @property
    def total_preemptions(self) -> int:
        return int(self.num_preemptions.sum())

    def replica(self, index: int, label: str) -> "RunSeries":
        """The steps of one replica, under ``label`` (no latencies: those are the run's)."""
        mask = self.step_replica == index
        empty = np.empty(0)
        return replace(self, label=label, ttft_ms=empty, e2el_ms=empty, tpot_ms=empty,
                       step_replica=empty, replica_names=(),
                       **{name: getattr(self, name)[mask] for name in STEP_ARRAYS
                          if len(getattr(self, name)) == len(mask)})


def replica_name(row: Mapping) -> str:
    """A replica of summary.json's ``replicas`` list as the plots name it: ``prefill 0``,
    ``decode 1`` (its pool and its index, the steps.csv replica number) or ``replica 2``."""
    return f"{row.get('pool', 'replica')} {row['replica']}"


def engine_state_series(series: Sequence[RunSeries]) -> list[RunSeries]:
    """The lines of the engine-state panels: each run as it is, or each replica of a run of
    several, named by ``replica_name`` (after the run's label when there are several runs)."""
    if not any(len(s.step_replica) for s in series):
        return list(series)
    out = []
    for s in series:
        if not len(s.step_replica):
            out.append(s)
            continue
        for index in np.unique(s.step_replica).astype(int).tolist():
            name = (s.replica_names[index] if index < len(s.replica_names)
                    else f"replica {index}")
            out.append(s.replica(index, name if len(series) == 1 else f"{s.label}: {name}"))
    return out


def run_series_from_columns(label: str, requests: Mapping[str, np.ndarray],
                            steps: Mapping[str, np.ndarray],
                            replicas: Sequence[Mapping] = ()) -> RunSeries:
    """``requests``: at least the ``LATENCY_COLUMNS`` (NaN or missing where a request has none);
    ``steps``: at least the ``STEP_COLUMNS``, as requests.csv and steps.csv name them, and the
    ``replica`` column of a run of several; ``replicas``: summary.json's list of them."""
    def latency(name: str) -> np.ndarray:
        x = np.asarray(requests.get(name, ()), dtype=np.float64)
        return x[np.isfinite(x)]

    def step(name: str) -> np.ndarray:
        return np.asarray(steps.get(name, ()), dtype=np.float64)

    return RunSeries(label, latency("ttft_ms"), latency("e2el_ms"), latency("tpot_ms"),
                     step("end_s"), step("num_running"), step("num_waiting"), step("kv_usage"),
                     step("num_preemptions"), step(STATE_SLOTS), step(REPLICA),
                     tuple(replica_name(r) for r in replicas))


def read_run_series(run_dir: Path, label: str | None = None) -> RunSeries:
    """A run's ``requests.csv`` and (if present) ``steps.csv``; the label defaults to the folder's
    name (the scheduler's label)."""
    run_dir = Path(run_dir)
    steps_csv = run_dir / STEPS_CSV
    steps = read_columns(steps_csv, (*STEP_COLUMNS, STATE_SLOTS, REPLICA)) if steps_csv.is_file() else {}
    requests = read_columns(run_dir / REQUESTS_CSV, LATENCY_COLUMNS)
    summary = run_dir / SUMMARY_JSON
    replicas = (json.loads(summary.read_text(encoding="utf-8")).get("replicas", [])
                if REPLICA in steps and summary.is_file() else [])
    return run_series_from_columns(label or run_dir.name, requests, steps, replicas)


def run_dirs(result_dir: Path) -> list[Path]:
    """The run folders (``<scheduler>/requests.csv``) of a result folder, by name."""
    return sorted(p for p in Path(result_dir).iterdir() if (p / REQUESTS_CSV).is_file())


def read_result_dir_series(result_dir: Path) -> list[RunSeries]:
    return [read_run_series(p) for p in run_dirs(result_dir)]
