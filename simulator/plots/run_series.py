"""What the run plots read: one scheduler's per-request latencies and per-step engine state as
plain numpy arrays (``RunSeries``), built from a result folder's files or from any table with the
requests.csv and steps.csv column names, never from the simulator's own objects."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np

from simulator.plots.figures import read_columns

REQUESTS_CSV, STEPS_CSV = "requests.csv", "steps.csv"
LATENCY_COLUMNS = ("ttft_ms", "tpot_ms", "e2el_ms")   # requests.csv columns the plots read
STEP_COLUMNS = ("end_s", "num_running", "num_waiting", "kv_usage", "num_preemptions")  # steps.csv
STATE_SLOTS = "num_state_slots"   # steps.csv of a hybrid model's run only


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

    @property
    def total_preemptions(self) -> int:
        return int(self.num_preemptions.sum())


def run_series_from_columns(label: str, requests: Mapping[str, np.ndarray],
                            steps: Mapping[str, np.ndarray]) -> RunSeries:
    """``requests``: at least the ``LATENCY_COLUMNS`` (NaN or missing where a request has none);
    ``steps``: at least the ``STEP_COLUMNS``, as requests.csv and steps.csv name them."""
    def latency(name: str) -> np.ndarray:
        x = np.asarray(requests.get(name, ()), dtype=np.float64)
        return x[np.isfinite(x)]

    def step(name: str) -> np.ndarray:
        return np.asarray(steps.get(name, ()), dtype=np.float64)

    return RunSeries(label, latency("ttft_ms"), latency("e2el_ms"), latency("tpot_ms"),
                     step("end_s"), step("num_running"), step("num_waiting"), step("kv_usage"),
                     step("num_preemptions"), step(STATE_SLOTS))


def read_run_series(run_dir: Path, label: str | None = None) -> RunSeries:
    """A run's ``requests.csv`` and (if present) ``steps.csv``; the label defaults to the folder's
    name (the scheduler's label)."""
    run_dir = Path(run_dir)
    steps_csv = run_dir / STEPS_CSV
    steps = read_columns(steps_csv, STEP_COLUMNS + (STATE_SLOTS,)) if steps_csv.is_file() else {}
    requests = read_columns(run_dir / REQUESTS_CSV, LATENCY_COLUMNS)
    return run_series_from_columns(label or run_dir.name, requests, steps)


def run_dirs(result_dir: Path) -> list[Path]:
    """The run folders (``<scheduler>/requests.csv``) of a result folder, by name."""
    return sorted(p for p in Path(result_dir).iterdir() if (p / REQUESTS_CSV).is_file())


def read_result_dir_series(result_dir: Path) -> list[RunSeries]:
    return [read_run_series(p) for p in run_dirs(result_dir)]
