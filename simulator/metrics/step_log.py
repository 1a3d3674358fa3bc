"""Per-step log: one row per simulated forward pass, stored column-wise.

The engine logs once per step and a run can have millions of steps, so nothing per step is an
object: ``append`` keeps a plain tuple, ``extend_decode_steps`` extends six plain lists (a decode
run's other columns follow from them), and every ``_CHUNK_ROWS`` rows both are moved into one
numpy array per column: 88 bytes per step once flushed. Converting a list to an array a column
at a time costs about half what a tuple-per-row structured conversion does.

Fast-forward (``append_many``) stores its k steps expanded, one row each, so ``steps.csv`` has one
row per step and is byte-identical to the step-by-step run. Step times are accumulated one addition
at a time (``t += dt``), exactly as SimPy advances ``env.now`` per ``timeout(dt)``.
"""
from __future__ import annotations

from itertools import accumulate, repeat
from typing import Callable, Sequence

import numpy as np

# Queue lengths are taken at the step's end (finished requests gone, arrivals during the step included), like vllm:num_requests_running/waiting (semantics 7).
_COLUMNS: tuple[tuple[str, type], ...] = (
    ("start_s", np.float64),
    ("end_s", np.float64),
    ("num_seqs", np.int64),
    ("num_prefill_seqs", np.int64),
    ("num_decode_seqs", np.int64),
    ("num_tokens", np.int64),
    ("num_prefill_tokens", np.int64),
    ("num_running", np.int64),
    ("num_waiting", np.int64),
    ("kv_usage", np.float64),          # 0..1 fraction, like vllm:kv_cache_usage_perc
    ("num_preemptions", np.int64),     # decided while forming this step
)
STEP_COLUMNS: tuple[str, ...] = tuple(name for name, _ in _COLUMNS)
_DTYPES = dict(_COLUMNS)
_CHUNK_ROWS = 8192
_PER_STEP_FIELDS = STEP_COLUMNS[2:]   # everything but the two times
# A decode-run row: its own start, end, row count, queues and KV usage; no prefill, no preemption,
# and num_seqs = num_decode_seqs = num_tokens = the row count.
_DECODE_COLUMNS = ("start_s", "end_s", "num_seqs", "num_running", "num_waiting", "kv_usage")
_DECODE_SOURCE = {"start_s": 0, "end_s": 1, "num_seqs": 2, "num_decode_seqs": 2, "num_tokens": 2,
                  "num_running": 3, "num_waiting": 4, "kv_usage": 5}   # else 0


class StepLog:
    """Columnar log of simulated steps; ``to_columns()`` gives one numpy array per column."""

    def __init__(self) -> None:
        self._appended: list[tuple] = []                 # pending rows from append()
        self._decode: tuple[list, ...] = tuple([] for _ in _DECODE_COLUMNS)   # pending decode rows
        self._decode_runs: list[tuple[int, int]] = []    # (pending row number, rows) of each run
        self._chunks: list[dict[str, np.ndarray]] = []
        self._num_chunked_rows = 0
        self._on_chunk: Callable[[dict[str, np.ndarray]], None] | None = None

    def __len__(self) -> int:
        return self._num_chunked_rows + len(self._appended) + len(self._decode[1])

    @property
    def num_steps(self) -> int:
        return len(self)

    def append(self, start_s: float, end_s: float, num_seqs: int, num_prefill_seqs: int,
               num_decode_seqs: int, num_tokens: int, num_prefill_tokens: int,
               num_running: int, num_waiting: int, kv_usage: float,
               num_preemptions: int) -> None:
        """Record one step. Hot path: no validation, one tuple append."""
        self._appended.append((start_s, end_s, num_seqs, num_prefill_seqs, num_decode_seqs,
                               num_tokens, num_prefill_tokens, num_running, num_waiting,
                               kv_usage, num_preemptions))
        if len(self._appended) + len(self._decode[1]) >= _CHUNK_ROWS:
            self._flush()

    def extend_decode_steps(self, start_s: float, end_s: list[float], num_rows: list[int],
                            num_running: list[int], num_waiting: list[int],
                            kv_usage: list[float]) -> None:
        """Record back-to-back all-decode steps (a multi-step advance): step i runs from the
        previous end (``start_s`` for the first) to ``end_s[i]`` with ``num_rows[i]`` decodes."""
        k = len(end_s)
        if len(num_rows) != k or len(num_running) != k or len(num_waiting) != k \
                or len(kv_usage) != k:
            raise ValueError(f"extend_decode_steps: per-step lists must all have len(end_s)={k}")
        if not k:
            return
        starts, ends, rows, running, waiting, kv = self._decode
        self._decode_runs.append((len(self._appended) + len(ends), k))
        starts.append(start_s)
        starts.extend(end_s[:-1])
        ends.extend(end_s)
        rows.extend(num_rows)
        running.extend(num_running)
        waiting.extend(num_waiting)
        kv.extend(kv_usage)
        if len(self._appended) + len(ends) >= _CHUNK_ROWS:
            self._flush()

    def append_many(self, k: int, start_s: float, step_time_s: float, num_seqs: int,
                    num_prefill_seqs: int, num_decode_seqs: int, num_tokens: int,
                    num_prefill_tokens: int, num_running: int, num_waiting: int,
                    kv_usage: float | Sequence[float], num_preemptions: int | Sequence[int] = 0,
                    ) -> float:
        """Record k back-to-back steps of ``step_time_s`` each; returns the last step's end.

        Any per-step field may be a scalar (same every step) or a length-k sequence (KV usage
        grows as decodes cross block boundaries). The returned end time is the one k successive
        ``t + step_time_s`` additions give, so the engine can set its clock from it.
        """
        if not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"append_many k: {k!r} must be an integer >= 1")
        times = np.fromiter(accumulate(repeat(float(step_time_s), k), initial=float(start_s)),
                            dtype=np.float64, count=k + 1)
        chunk = {"start_s": times[:-1], "end_s": times[1:]}
        values = (num_seqs, num_prefill_seqs, num_decode_seqs, num_tokens, num_prefill_tokens,
                  num_running, num_waiting, kv_usage, num_preemptions)
        for name, value in zip(_PER_STEP_FIELDS, values):
            column = np.asarray(value)
            if column.ndim and column.shape != (k,):
                raise ValueError(f"append_many {name}: length {column.shape[0]} must be k={k}")
            chunk[name] = np.broadcast_to(column, (k,))
        self._flush()
        self._add_chunk(chunk)
        return float(times[-1])

    def to_columns(self) -> dict[str, np.ndarray]:
        """Every column as its own contiguous array (float64 times and KV usage, int64 counts),
        read-only: they are the log's own storage, not copies."""
        columns = self._merged()
        views = {name: columns[name].view() for name in STEP_COLUMNS}
        for view in views.values():
            view.flags.writeable = False
        return views

    def flush(self) -> None:
        """Move the pending rows into a chunk now (they are otherwise moved every 8,192 rows)."""
        self._flush()

    def stream_to(self, on_chunk: Callable[[dict[str, np.ndarray]], None] | None) -> None:
        """Hand each chunk stored from now on to ``on_chunk`` too (None: stop), in log order.
        Pending rows are flushed first when starting, so the chunks stored before and those
        handed over make up the whole log."""
        if on_chunk is not None:
            self._flush()
        self._on_chunk = on_chunk

    @classmethod
    def from_columns(cls, columns: dict[str, Sequence]) -> "StepLog":
        """Rebuild a log from ``to_columns()`` output (or a steps.csv read back)."""
        missing = [name for name in STEP_COLUMNS if name not in columns]
        if missing:
            raise ValueError(f"step log columns: missing {missing}; "
                             f"need all of {list(STEP_COLUMNS)}")
        n = len(columns["start_s"])
        log = cls()
        log._add_chunk({name: np.broadcast_to(np.asarray(columns[name]), (n,))
                        for name in STEP_COLUMNS})
        return log

    # -- internals -------------------------------------------------------------------------------
    def _merged(self) -> dict[str, np.ndarray]:
        self._flush()
        if len(self._chunks) != 1:
            # Concatenate once and keep the result, so repeated reads cost nothing.
            self._chunks = [{name: np.concatenate([c[name] for c in self._chunks])
                             if self._chunks else np.empty(0, dtype) for name, dtype in _COLUMNS}]
        return self._chunks[0]

    def _flush(self) -> None:
        """Move the pending rows into one chunk, in the order they were logged."""
        num_appended, num_decode = len(self._appended), len(self._decode[1])
        if not num_appended + num_decode:
            return
        appended = [np.array(c, dtype) for c, (_, dtype) in zip(zip(*self._appended), _COLUMNS)]
        decode = [np.array(c, _DTYPES[name]) for c, name in zip(self._decode, _DECODE_COLUMNS)]
        is_decode = self._decode_rows(num_appended + num_decode)
        is_appended = ~is_decode
        chunk = {}
        for i, (name, dtype) in enumerate(_COLUMNS):
            column = np.zeros(num_appended + num_decode, dtype)
            if num_appended:
                column[is_appended] = appended[i]
            if num_decode and name in _DECODE_SOURCE:
                column[is_decode] = decode[_DECODE_SOURCE[name]]
            chunk[name] = column
        self._add_chunk(chunk)
        self._appended = []
        self._decode = tuple([] for _ in _DECODE_COLUMNS)
        self._decode_runs = []

    def _decode_rows(self, num_rows: int) -> np.ndarray:
        """Which pending rows came from ``extend_decode_steps`` (a boolean mask)."""
        edges = np.zeros(num_rows + 1, np.int64)
        if self._decode_runs:
            first, k = np.array(self._decode_runs, np.int64).T
            np.add.at(edges, first, 1)
            np.add.at(edges, first + k, -1)
        return np.cumsum(edges[:-1]) > 0

    def _add_chunk(self, chunk: dict[str, np.ndarray]) -> None:
        # A copy of each column: the log never shares storage with its caller's arrays.
        stored = {name: np.array(chunk[name], dtype) for name, dtype in _COLUMNS}
        self._chunks.append(stored)
        self._num_chunked_rows += len(chunk["start_s"])
        if self._on_chunk is not None:
            self._on_chunk(stored)
