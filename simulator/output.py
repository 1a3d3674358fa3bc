"""Result files: ``requests.csv``, ``steps.csv`` and ``summary.json``, written atomically.

A run's folder appears only once all three files are complete: they are written into a sibling
staging folder (``<name>.tmp-XXXX``), each file itself through a temp file, fsync and
``os.replace``, and the staging folder is then renamed into place, replacing an older result
folder. Any failure removes the staging folder, so nothing half-written ever looks like a result.

Output is byte-stable: floats are written with ``repr`` (shortest exact round-trip), JSON keys are
sorted, and rows follow request id / step order, so the same seed gives the same bytes.
"""
from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence, TextIO

import numpy as np

from simulator.metrics.step_log import STEP_COLUMNS, StepLog
from simulator.metrics.summary import latencies_s
from simulator.request import Request

REQUEST_COLUMNS: tuple[str, ...] = (
    "request_id", "arrival_s", "scheduled_s", "first_token_s", "finish_s", "num_prompt_tokens",
    "num_output_tokens", "num_preemptions", "num_cached_tokens", "ttft_ms", "tpot_ms", "e2el_ms",
    "client_queue_ms")   # time held by the client's --max-concurrency limit (not in TTFT/E2EL)
REQUESTS_CSV, STEPS_CSV, SUMMARY_JSON = "requests.csv", "steps.csv", "summary.json"

# mkstemp/mkdtemp create owner-only files; results get the usual umask-derived modes instead.
_UMASK = os.umask(0)
os.umask(_UMASK)


def write_results(result_dir: str | os.PathLike, requests: Sequence[Request],
                  step_log: StepLog, summary: dict) -> Path:
    """Write the three result files into ``result_dir`` (replaced whole, or not at all)."""
    target = Path(result_dir)
    if target.exists() and not target.is_dir():
        raise ValueError(f"result_dir: {str(target)!r} exists and is not a folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{target.name}.tmp-", dir=target.parent))
    try:
        os.chmod(staging, 0o777 & ~_UMASK)
        atomic_write(staging / REQUESTS_CSV, lambda f: _write_requests_csv(f, requests))
        atomic_write(staging / STEPS_CSV, lambda f: _write_steps_csv(f, step_log))
        atomic_write(staging / SUMMARY_JSON, lambda f: f.write(summary_json(summary)))
        _fsync_dir(staging)
        _swap_into_place(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _fsync_dir(target.parent)
    return target


def atomic_write(path: Path, write: Callable[[TextIO], Any]) -> None:
    """Write a text file through a temp file in the same folder, fsync, then ``os.replace``."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def summary_json(summary: dict) -> str:
    """Deterministic JSON: sorted keys, repr floats, non-finite floats as strings (vLLM's "inf")."""
    return json.dumps(_jsonable(summary), sort_keys=True, indent=2, allow_nan=False) + "\n"


def request_rows(requests: Iterable[Request]) -> Iterable[list]:
    """One ``REQUEST_COLUMNS`` row per request, by request id; unknown values are None."""
    for r in sorted(requests, key=lambda r: r.request_id):
        ttft_s, tpot_s, e2el_s = latencies_s(r) or (None, None, None)
        yield [r.request_id, r.arrival_s, r.scheduled_s, r.first_token_s, r.finish_s,
               r.num_prompt_tokens, r.num_output_tokens, r.num_preemptions, r.num_cached_tokens,
               _ms(ttft_s), _ms(tpot_s), _ms(e2el_s), _ms(getattr(r, "client_queue_s", 0.0))]


# -- internals -----------------------------------------------------------------------------------
def _write_requests_csv(f: TextIO, requests: Sequence[Request]) -> None:
    writer = csv.writer(f, lineterminator="\n")
    writer.writerow(REQUEST_COLUMNS)
    writer.writerows([_cell(v) for v in row] for row in request_rows(requests))


def _write_steps_csv(f: TextIO, step_log: StepLog) -> None:
    # tolist() gives Python floats and ints, whose str() is the exact (shortest) repr.
    columns = step_log.to_columns()
    writer = csv.writer(f, lineterminator="\n")
    writer.writerow(STEP_COLUMNS)
    writer.writerows(zip(*(columns[name].tolist() for name in STEP_COLUMNS)))


def _ms(value_s: float | None) -> float | None:
    return None if value_s is None else value_s * 1000


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    return int(value) if isinstance(value, np.integer) else value


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)   # "inf", "-inf", "nan": strict JSON has no such numbers
    return value


def _swap_into_place(staging: Path, target: Path) -> None:
    if not target.exists():
        os.replace(staging, target)
        return
    # rename() may replace an empty folder: park the old results there, then drop them.
    old = Path(tempfile.mkdtemp(prefix=f"{target.name}.old-", dir=target.parent))
    try:
        os.replace(target, old)
    except BaseException:
        old.rmdir()
        raise
    try:
        os.replace(staging, target)
    except BaseException:
        os.replace(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
