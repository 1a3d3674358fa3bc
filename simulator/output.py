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
import json
import math
import os
import shutil
import tempfile
from operator import attrgetter
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence, TextIO

import numpy as np

from simulator.csv_format import BlankableColumn, csv_chunks, csv_text  # noqa: F401 (csv_text: re-exported)
from simulator.metrics.request_arrays import float_arrays, int_arrays
from simulator.metrics.step_log import STEP_COLUMNS, StepLog
from simulator.metrics.summary import latencies_s, latency_arrays_s
from simulator.parallel_write import abandon, start_writing
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
    finish_steps = None
    try:
        os.chmod(staging, 0o777 & ~_UMASK)
        # steps.csv (often the longest) may be formatted by a second process meanwhile.
        finish_steps = start_writing(
            lambda: atomic_write(staging / STEPS_CSV, lambda f: _write_steps_csv(f, step_log)),
            len(step_log))
        atomic_write(staging / REQUESTS_CSV, lambda f: _write_requests_csv(f, requests))
        atomic_write(staging / SUMMARY_JSON, lambda f: f.write(summary_json(summary)))
        finish_steps, finish = None, finish_steps
        finish()
        _fsync_dir(staging)
        _swap_into_place(staging, target)
    except BaseException:
        if finish_steps is not None:
            abandon(finish_steps)
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


def request_rows(requests: Iterable[Request]) -> list[list]:
    """One ``REQUEST_COLUMNS`` row per request, by request id; unknown values are None."""
    columns = [c.tolist() if hasattr(c, "tolist") else list(c) for c in request_columns(requests)]
    return [list(row) for row in zip(*columns)]


def request_columns(requests: Iterable[Request]) -> list[Sequence]:
    """The ``REQUEST_COLUMNS`` over the requests by id, each a numpy array, a ``BlankableColumn``
    or a list whose unknown values are None (what ``csv_text`` takes)."""
    requests = list(requests)
    columns = _read_exact(requests)
    if columns is None:   # unknown times, or ints among them: cell by cell, as latencies_s does
        return _request_columns_by_cell(sorted(requests, key=attrgetter("request_id")))
    ids = columns["request_id"]
    if np.any(ids[1:] < ids[:-1]):
        order = np.argsort(ids, kind="stable")   # the order sorted() gives
        columns = {name: values[order] for name, values in columns.items()}
    return [*(columns[name] for name in _REQUEST_ATTRIBUTES), *_latency_columns_ms(columns),
            columns["client_queue_s"] * 1000]


# -- internals -----------------------------------------------------------------------------------
_REQUEST_ATTRIBUTES = REQUEST_COLUMNS[:9]     # read straight off each Request
_COUNT_ATTRIBUTES = ("request_id", "num_prompt_tokens", "num_output_tokens", "num_preemptions",
                     "num_cached_tokens")
_TIME_ATTRIBUTES = ("arrival_s", "scheduled_s", "first_token_s", "finish_s", "last_token_s",
                    "client_queue_s")


def _write_requests_csv(f: TextIO, requests: Sequence[Request]) -> None:
    f.writelines(csv_chunks(REQUEST_COLUMNS, request_columns(requests)))


def _write_steps_csv(f: TextIO, step_log: StepLog) -> None:
    columns = step_log.to_columns()
    f.writelines(csv_chunks(STEP_COLUMNS, [columns[name] for name in STEP_COLUMNS]))


def _read_exact(requests: list[Request]) -> dict[str, np.ndarray] | None:
    """Every count as int64 and every time as float64, or None when some time is None or an int
    (an array would change its text) or some count is not an int."""
    counts = int_arrays(requests, _COUNT_ATTRIBUTES)
    times = counts and float_arrays(requests, _TIME_ATTRIBUTES)
    return times and {**counts, **times}


def _latency_columns_ms(columns: dict[str, np.ndarray]) -> list[Sequence]:
    """TTFT, TPOT and E2EL in ms of finished requests with float token times, as ``latencies_s``
    computes them: the same float operations in numpy give the same bits."""
    out = columns["num_output_tokens"]
    ttft_s, tpot_s, e2el_s = latency_arrays_s(columns["arrival_s"], columns["first_token_s"],
                                              columns["last_token_s"], out)
    return [ttft_s * 1000, BlankableColumn(tpot_s * 1000, out > 1), e2el_s * 1000]   # out <= 1: blank


def _request_columns_by_cell(ordered: list[Request]) -> list[list]:
    latencies = [latencies_s(r) or (None, None, None) for r in ordered]
    ttft_s, tpot_s, e2el_s = (list(c) for c in zip(*latencies)) if ordered else ([], [], [])
    queue_s = [getattr(r, "client_queue_s", 0.0) for r in ordered]
    attributes = [list(map(attrgetter(name), ordered)) for name in _REQUEST_ATTRIBUTES]
    return [*attributes, *(_ms(c) for c in (ttft_s, tpot_s, e2el_s, queue_s))]


def _ms(values_s: Iterable[float | None]) -> list[float | None]:
    return [None if v is None else v * 1000 for v in values_s]


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
