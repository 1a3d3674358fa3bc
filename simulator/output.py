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
from typing import Any, Callable, Iterable, Iterator, Sequence, TextIO

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


def request_rows(requests: Iterable[Request]) -> list[list]:
    """One ``REQUEST_COLUMNS`` row per request, by request id; unknown values are None."""
    return [list(row) for row in zip(*request_columns(requests))]


def request_columns(requests: Iterable[Request]) -> list[list]:
    """The ``REQUEST_COLUMNS``, each a list over the requests by id; unknown values are None."""
    ordered = sorted(requests, key=attrgetter("request_id"))
    latencies = [latencies_s(r) or (None, None, None) for r in ordered]
    ttft_s, tpot_s, e2el_s = (list(c) for c in zip(*latencies)) if ordered else ([], [], [])
    queue_s = [getattr(r, "client_queue_s", 0.0) for r in ordered]
    attributes = [list(map(attrgetter(name), ordered)) for name in _REQUEST_ATTRIBUTES]
    return [*attributes, *(_ms(c) for c in (ttft_s, tpot_s, e2el_s, queue_s))]


def csv_text(header: Sequence[str], columns: Sequence[Sequence]) -> str:
    """A numeric CSV table, byte for byte what ``csv.writer`` writes from the same values: an int
    by ``str``, a float by ``repr`` (shortest round trip), None as an empty cell, LF line ends."""
    return "".join(csv_chunks(header, columns))


def csv_chunks(header: Sequence[str], columns: Sequence[Sequence],
               chunk_rows: int = 65536) -> Iterator[str]:
    """``csv_text`` in pieces of ``chunk_rows`` rows, so memory stays bounded on long runs.

    Built column-wise, each distinct value formatted once per piece: a run repeats few batch
    shapes, queue lengths and KV usages, and each step starts where the previous one ended, so
    this is several times faster than formatting the cells of a 100k-row table one by one."""
    yield ",".join(header) + "\n"
    num_rows = len(columns[0]) if columns else 0
    for start in range(0, num_rows, chunk_rows):
        piece = [c[start:start + chunk_rows] for c in columns]
        cells = _format_cells([_column_parts(c) for c in piece], [len(c) for c in piece])
        yield "\n".join(map(",".join, zip(*cells))) + "\n"


# -- internals -----------------------------------------------------------------------------------
_REQUEST_ATTRIBUTES = REQUEST_COLUMNS[:9]     # read straight off each Request


def _write_requests_csv(f: TextIO, requests: Sequence[Request]) -> None:
    f.writelines(csv_chunks(REQUEST_COLUMNS, request_columns(requests)))


def _write_steps_csv(f: TextIO, step_log: StepLog) -> None:
    columns = step_log.to_columns()
    f.writelines(csv_chunks(STEP_COLUMNS, [columns[name] for name in STEP_COLUMNS]))


# A column part: "f" (floats) or "i" (ints), their values, and their rows (None: every row).
_Part = tuple[str, np.ndarray, "np.ndarray | None"]


def _column_parts(values: Sequence) -> list[_Part]:
    """The cells of a column split by type: a cell keeps its own type's text, as in csv.writer
    (SimPy's clock starts at the int 0, so a time column can hold both 0 and 0.5)."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "iuf":
        return [("f" if values.dtype.kind == "f" else "i", values, None)]
    types = list(map(type, values))
    kind_of = {t: _cell_kind(t) for t in set(types)}
    kinds = set(kind_of.values())
    cells = np.array(values, dtype=object)
    if len(kinds) == 1:   # the usual case: one type down the whole column
        kind = kinds.pop()
        return [(kind, cells.astype(_DTYPES[kind]), None)] if kind else []
    row_kinds = np.array([kind_of[t] for t in types])
    return [(kind, cells[rows].astype(_DTYPES[kind]), rows) for kind in sorted(kinds - {""})
            for rows in [np.flatnonzero(row_kinds == kind)]]


_DTYPES = {"f": np.float64, "i": np.int64}


def _cell_kind(cell_type: type) -> str:
    if issubclass(cell_type, (float, np.floating)):
        return "f"
    if issubclass(cell_type, (int, np.integer)) and not issubclass(cell_type, bool):
        return "i"
    if cell_type is type(None):
        return ""
    raise TypeError(f"csv_text: a {cell_type.__name__} cell in a numeric table")


def _format_cells(columns: list[list[_Part]], lengths: list[int]) -> list[list[str]]:
    """Every column's cells as text; each distinct value of a kind is formatted once for all
    columns. Floats are told apart by their bits, so -0.0 and 0.0 keep their own ``repr``."""
    texts = [None if len(parts) == 1 and parts[0][2] is None else np.full(n, "", dtype=object)
             for parts, n in zip(columns, lengths)]    # a missing cell stays ""
    for kind, fmt in (("f", repr), ("i", str)):
        parts = [(c, part) for c, column in enumerate(columns) for part in column if part[0] == kind]
        if not parts:
            continue
        keys = np.concatenate([values.astype(_DTYPES[kind]).view(np.int64) for _, (_, values, _) in parts])
        distinct, inverse = _distinct(keys, dense=kind == "i")
        table = np.array([*map(fmt, distinct.view(_DTYPES[kind]).tolist())], dtype=object)
        offsets = np.cumsum([0] + [len(values) for _, (_, values, _) in parts])
        for (c, (_, _, rows)), start, end in zip(parts, offsets[:-1], offsets[1:]):
            if rows is None:
                texts[c] = table[inverse[start:end]]
            else:
                texts[c][rows] = table[inverse[start:end]]
    return [t.tolist() for t in texts]


def _distinct(keys: np.ndarray, dense: bool) -> tuple[np.ndarray, np.ndarray]:
    """(distinct keys, index of each key in them). Counts span a short range: index them
    directly (no sort) when the range is no longer than the data."""
    if dense and len(keys):
        low, high = int(keys.min()), int(keys.max())
        if high - low <= max(len(keys), 1024):
            return np.arange(low, high + 1, dtype=np.int64), keys - low
    return np.unique(keys, return_inverse=True)


def _ms(values_s: list[float | None]) -> list[float | None]:
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
