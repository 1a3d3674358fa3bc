"""A workload as a table of requests (``WorkloadTrace``), and ``kind: trace`` arrivals: replay a
trace file as one (``TraceArrivals``).

Trace files, one request per row:
- JSONL, LLMServingSim's format: ``input_toks``, ``output_toks``, ``arrival_time_ns`` and optional
  ``input_tok_ids`` (other keys, e.g. ``output_tok_ids``, are ignored).
- CSV with a header (Vidur/Splitwise style).
Both accept any of the column names below; the first one present is used.
"""
from __future__ import annotations

import csv
import dataclasses
import functools
import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import numpy as np

from cost_models.options import INT64_MAX, OPTIONS_CONFIG, Constraint
from simulator.workload.lengths import invalid, parse_length


def _frozen_array(values: Any, dtype: type) -> np.ndarray:
    array = np.array(values, dtype=dtype)  # a copy: callers cannot mutate it behind our back
    array.setflags(write=False)
    return array


@dataclass(frozen=True, eq=False, repr=False)
class WorkloadTrace:
    """Requests in arrival order, as columns. Read-only; compare runs with ``fingerprint()``."""

    arrival_s: np.ndarray                      # float64, sorted
    num_prompt_tokens: np.ndarray              # int64, >= 1
    max_output_tokens: np.ndarray              # int64, >= 1
    prompt_token_ids: tuple[tuple[int, ...], ...] | None = None
    priority: np.ndarray | None = None         # int64; None: every request has priority 0
    max_concurrency: int | None = None         # vLLM bench's client-side semaphore; None: unlimited
    sessions: object = None                    # SessionColumns of a multi-turn workload (sessions.py)

    def __post_init__(self) -> None:
        set_ = functools.partial(object.__setattr__, self)
        set_("arrival_s", _frozen_array(self.arrival_s, np.float64))
        set_("num_prompt_tokens", _frozen_array(self.num_prompt_tokens, np.int64))
        set_("max_output_tokens", _frozen_array(self.max_output_tokens, np.int64))
        if self.priority is not None:
            set_("priority", _frozen_array(self.priority, np.int64))
        if self.prompt_token_ids is not None:
            set_("prompt_token_ids", tuple(ids if isinstance(ids, tuple) else tuple(int(t) for t in ids)
                                           for ids in self.prompt_token_ids))
        self._validate()

    def _validate(self) -> None:
        n = self.arrival_s.size
        columns = {"num_prompt_tokens": self.num_prompt_tokens, "max_output_tokens": self.max_output_tokens}
        if self.priority is not None:
            columns["priority"] = self.priority
        for name, column in columns.items():
            if column.ndim != 1 or column.size != n:
                raise ValueError(f"WorkloadTrace.{name}: {column.size} values for {n} arrivals")
        if self.sessions is not None and len(self.sessions) != n:
            raise ValueError(f"WorkloadTrace.sessions: {len(self.sessions)} rows for {n} arrivals")
        if self.prompt_token_ids is not None and len(self.prompt_token_ids) != n:
            raise ValueError(f"WorkloadTrace.prompt_token_ids: {len(self.prompt_token_ids)} rows "
                             f"for {n} arrivals")
        if n and not (np.all(np.isfinite(self.arrival_s)) and np.all(np.diff(self.arrival_s) >= 0)):
            raise ValueError("WorkloadTrace.arrival_s: must be finite and sorted ascending")
        for name in ("num_prompt_tokens", "max_output_tokens"):
            if n and columns[name].min() < 1:
                raise invalid(f"WorkloadTrace.{name}", int(columns[name].min()), "token counts >= 1")
        if self.max_concurrency is not None and not (isinstance(self.max_concurrency, int)
                                                     and self.max_concurrency >= 1):
            raise invalid("WorkloadTrace.max_concurrency", self.max_concurrency, "an integer >= 1 or None")

    def __len__(self) -> int:
        return int(self.arrival_s.size)

    def fingerprint(self) -> str:
        """sha256 over every column's bytes (with names and sizes, so columns cannot alias)."""
        digest = hashlib.sha256()
        parts = [("arrival_s", self.arrival_s), ("num_prompt_tokens", self.num_prompt_tokens),
                 ("max_output_tokens", self.max_output_tokens)]
        if self.priority is not None:
            parts.append(("priority", self.priority))
        if self.sessions is not None:
            parts += [("sessions.turn", self.sessions.turn), ("sessions.parent", self.sessions.parent),
                      ("sessions.think_s", self.sessions.think_s)]
        if self.prompt_token_ids is not None:
            sizes = np.fromiter((len(ids) for ids in self.prompt_token_ids), np.int64, len(self))
            flat = np.fromiter((t for ids in self.prompt_token_ids for t in ids), np.int64, int(sizes.sum()))
            parts += [("prompt_token_ids.sizes", sizes), ("prompt_token_ids", flat)]
        for name, array in parts:
            digest.update(f"{name}:{array.dtype.str}:{array.size};".encode())
            digest.update(np.ascontiguousarray(array).tobytes())
        digest.update(f"max_concurrency:{self.max_concurrency}".encode())
        return digest.hexdigest()

    def slice(self, start: int | None = None, stop: int | None = None) -> WorkloadTrace:
        """Requests ``start:stop`` (arrival times unchanged); not of sessions, whose turns point
        at each other."""
        if self.sessions is not None:
            raise ValueError("workload.sessions: a session workload cannot be cut")
        rows = slice(start, stop)
        return WorkloadTrace(
            self.arrival_s[rows], self.num_prompt_tokens[rows], self.max_output_tokens[rows],
            None if self.prompt_token_ids is None else self.prompt_token_ids[rows],
            None if self.priority is None else self.priority[rows], self.max_concurrency)

    def head(self, n: int) -> WorkloadTrace:
        """The first ``n`` requests."""
        return self.slice(0, n)

    def until(self, end_s: float) -> WorkloadTrace:
        """The requests arriving at or before ``end_s``."""
        return self.head(int(np.searchsorted(self.arrival_s, end_s, side="right")))


MAX_ARRIVAL_S = 2.0 ** 33   # ~272 years; float64 still resolves 2**-19 s (~2 us) there


def first_arrival_too_late(arrival_s) -> int | None:
    """Index of the first arrival past MAX_ARRIVAL_S, where float time loses microseconds and
    steps would take no time (a timestamp in the wrong unit, or a rate near zero); None if none."""
    late = np.flatnonzero(np.asarray(arrival_s, dtype=np.float64) > MAX_ARRIVAL_S)
    return int(late[0]) if late.size else None
# (column name, factor to seconds)
ARRIVAL_COLUMNS = (("arrival_s", 1.0), ("arrived_at", 1.0), ("arrival_time_ns", 1e-9))
PROMPT_COLUMNS = ("input_toks", "num_prompt_tokens", "prompt", "num_prefill_tokens", "prompt_len")
OUTPUT_COLUMNS = ("output_toks", "num_output_tokens", "output", "num_decode_tokens", "output_len")
TOKEN_IDS_COLUMNS = ("input_tok_ids", "prompt_token_ids")


@dataclass(frozen=True)
class TraceArrivals:
    """Replay a trace file: arrival times, lengths and (if present) prompt token ids.

    ``time_scale`` multiplies every arrival time (0.5 replays twice as fast). ``start_at_zero``
    shifts the times so the earliest arrival is at 0 (for traces with absolute timestamps).
    Rows out of time order are sorted, stably.
    """

    kind: Literal["trace"] = field(default="trace", kw_only=True)
    path: str
    time_scale: Annotated[float, Constraint(strict=True, gt=0, allow_inf_nan=False)] = 1.0
    start_at_zero: bool = False
    __pydantic_config__ = OPTIONS_CONFIG

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path.endswith((".jsonl", ".csv")):
            raise invalid("TraceArrivals.path", self.path, "a file path ending in .jsonl or .csv")
        scale = self.time_scale
        if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
            raise invalid("TraceArrivals.time_scale", scale, "a finite number > 0")

    def load(self) -> WorkloadTrace:
        try:
            stat = os.stat(self.path)
        except OSError:
            raise ValueError(f"TraceArrivals.path: file {self.path!r} does not exist or cannot be read") \
                from None
        trace = _read_trace(self.path, stat.st_mtime_ns, stat.st_size)
        offset = float(trace.arrival_s[0]) if self.start_at_zero and len(trace) else 0.0
        if offset == 0.0 and self.time_scale == 1.0:
            return trace
        return dataclasses.replace(trace, arrival_s=(trace.arrival_s - offset) * self.time_scale)

    def arrival_times_s(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """The first ``n`` arrival times of the trace. Draws nothing."""
        trace = self.load()
        if n > len(trace):
            raise ValueError(f"num_requests: {n} is more than the {len(trace)} requests in trace {self.path}")
        return trace.arrival_s[:n].copy()

    def arrival_times_until_s(self, duration_s: float, rng: np.random.Generator) -> np.ndarray:
        return self.load().until(duration_s).arrival_s.copy()


@functools.lru_cache(maxsize=8)
def _read_trace(path: str, mtime_ns: int, size: int) -> WorkloadTrace:
    try:
        rows = _read_jsonl(path) if path.endswith(".jsonl") else _read_csv(path)
    except UnicodeDecodeError:
        raise ValueError(f"TraceArrivals.path: {path}:{_first_non_utf8_line(path)} is not UTF-8 "
                         f"text; save the file as UTF-8") from None
    if not rows:
        raise ValueError(f"TraceArrivals.path: {path} holds no requests")
    return _table(path, rows, list(rows[0].keys()))


def _first_non_utf8_line(path: str) -> int:
    with open(path, "rb") as f:
        data = f.read()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return data.count(b"\n", 0, exc.start) + 1
    return 0


def _read_jsonl(path: str) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    raise ValueError(f"TraceArrivals.path: {path}:{number} is not valid JSON") from None
                if not isinstance(rows[-1], dict):
                    raise ValueError(f"TraceArrivals.path: {path}:{number} is not a JSON object "
                                     f"(one request per line, e.g. {{\"arrival_s\": 0.5, ...}})")
    return rows


def _read_csv(path: str) -> list[dict[str, Any]]:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        twice = sorted({name for name in header if header.count(name) > 1})
        if twice:   # DictReader would keep the last of them, silently
            raise ValueError(f"TraceArrivals.path: {path}: column {twice[0]!r} appears twice in the "
                             f"header; name each column once")
        return list(reader)


def _pick(path: str, columns: list[str], accepted: tuple[str, ...], what: str) -> str:
    for name in accepted:
        if name in columns:
            return name
    raise ValueError(f"TraceArrivals.path: {path} has no {what} column; "
                     f"accepted names: {', '.join(accepted)}")


def _table(path: str, rows: list[dict[str, Any]], columns: list[str]) -> WorkloadTrace:
    arrival_names = tuple(name for name, _ in ARRIVAL_COLUMNS)
    arrival_col = _pick(path, columns, arrival_names, "arrival time")
    to_s = dict(ARRIVAL_COLUMNS)[arrival_col]
    prompt_col = _pick(path, columns, PROMPT_COLUMNS, "prompt length")
    output_col = _pick(path, columns, OUTPUT_COLUMNS, "output length")
    ids_col = next((name for name in TOKEN_IDS_COLUMNS if name in columns), None)
    first_line = 1 if path.endswith(".jsonl") else 2
    arrival, prompt, output, ids, priority = [], [], [], [], []
    for number, row in enumerate(rows, first_line):
        where = f"TraceArrivals.path: {path}:{number}"
        arrival.append(_arrival_s(row, arrival_col, where) * to_s)
        prompt.append(parse_length(str(_cell(row, prompt_col, where)), f"{where} column {prompt_col}"))
        output.append(parse_length(str(_cell(row, output_col, where)), f"{where} column {output_col}"))
        if ids_col is not None:
            ids.append(_token_ids(row, ids_col, prompt[-1], where))
        if "priority" in columns:
            priority.append(_priority(row, where))
    late = first_arrival_too_late(arrival)
    if late is not None:
        value = arrival[late]
        raise ValueError(f"TraceArrivals.path: {path}:{late + first_line}: column {arrival_col} "
                         f"value {value:g} s is not allowed; float times resolve only "
                         f"{np.spacing(value):g} s there: must be <= {MAX_ARRIVAL_S:g} s "
                         f"(a timestamp in another unit?)")
    order = np.argsort(np.asarray(arrival), kind="stable")  # non-monotone traces are sorted, stably
    return WorkloadTrace(
        np.asarray(arrival)[order], np.asarray(prompt)[order], np.asarray(output)[order],
        tuple(ids[i] for i in order) if ids_col is not None else None,
        np.asarray(priority)[order] if priority else None)


def _cell(row: dict[str, Any], column: str, where: str) -> Any:
    value = row.get(column)
    if value is None or value == "":
        raise ValueError(f"{where}: column {column} is missing or empty")
    return value


def _arrival_s(row: dict[str, Any], column: str, where: str) -> float:
    text = _cell(row, column, where)
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: column {column} value {text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{where}: column {column} value {text!r} is not allowed; must be finite and >= 0")
    return value


def _priority(row: dict[str, Any], where: str) -> int:
    text = _cell(row, "priority", where)
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: column priority value {text!r} is not an integer") from None
    if not -INT64_MAX <= value <= INT64_MAX:
        raise ValueError(f"{where}: column priority value {text!r} is not allowed; must fit int64")
    return value


def _token_ids(row: dict[str, Any], column: str, num_prompt_tokens: int, where: str) -> tuple[int, ...]:
    value = _cell(row, column, where)
    try:
        ids = json.loads(value) if isinstance(value, str) else value  # a CSV cell holds a JSON list
    except json.JSONDecodeError:
        ids = value
    if not isinstance(ids, list):
        raise ValueError(f"{where}: column {column} is not a list of token ids")
    bad = [t for t in ids if type(t) is not int or not 0 <= t <= INT64_MAX][:1]
    if bad:
        raise ValueError(f"{where}: column {column} holds {bad[0]!r}; a token id is an integer "
                         f"from 0 to {INT64_MAX}")
    if len(ids) != num_prompt_tokens:
        raise ValueError(f"{where}: column {column} has {len(ids)} ids for a prompt of "
                         f"{num_prompt_tokens} tokens")
    return tuple(ids)
