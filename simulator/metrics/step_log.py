"""Per-step log: one row per simulated forward pass, stored column-wise.

The engine appends once per step and a run can have millions of steps, so a row is a plain tuple
in a short pending list, moved into a numpy structured chunk every ``_CHUNK_ROWS`` rows: about
88 bytes per step once flushed, and no per-step dict or object.

Fast-forward (``append_many``) stores its k steps expanded, one row each, so ``steps.csv`` has one
row per step and is byte-identical to the step-by-step run. Step times are accumulated one addition
at a time (``t += dt``), exactly as SimPy advances ``env.now`` per ``timeout(dt)``.
"""
from __future__ import annotations

from itertools import accumulate, repeat
from typing import Sequence

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
_ROW_DTYPE = np.dtype(list(_COLUMNS))
_CHUNK_ROWS = 8192
_PER_STEP_FIELDS = STEP_COLUMNS[2:]   # everything but the two times


class StepLog:
    """Columnar log of simulated steps; ``to_columns()`` gives one numpy array per column."""

    def __init__(self) -> None:
        self._pending: list[tuple] = []
        self._chunks: list[np.ndarray] = []
        self._num_chunked_rows = 0

    def __len__(self) -> int:
        return self._num_chunked_rows + len(self._pending)

    @property
    def num_steps(self) -> int:
        return len(self)

    def append(self, start_s: float, end_s: float, num_seqs: int, num_prefill_seqs: int,
               num_decode_seqs: int, num_tokens: int, num_prefill_tokens: int,
               num_running: int, num_waiting: int, kv_usage: float,
               num_preemptions: int) -> None:
        """Record one step. Hot path: no validation, one tuple append."""
        self._pending.append((start_s, end_s, num_seqs, num_prefill_seqs, num_decode_seqs,
                              num_tokens, num_prefill_tokens, num_running, num_waiting,
                              kv_usage, num_preemptions))
        if len(self._pending) >= _CHUNK_ROWS:
            self._flush()

    def extend_decode_steps(self, start_s: float, end_s: list[float], num_rows: list[int],
                            num_running: list[int], num_waiting: list[int],
                            kv_usage: list[float]) -> None:
        """Record back-to-back all-decode steps (a multi-step advance): step i runs from the
        previous end (``start_s`` for the first) to ``end_s[i]`` with ``num_rows[i]`` decodes."""
        starts = [start_s, *end_s[:-1]]
        self._pending.extend(zip(starts, end_s, num_rows, repeat(0), num_rows, num_rows, repeat(0),
                                 num_running, num_waiting, kv_usage, repeat(0)))
        if len(self._pending) >= _CHUNK_ROWS:
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
        rows = np.empty(k, dtype=_ROW_DTYPE)
        rows["start_s"], rows["end_s"] = times[:-1], times[1:]
        values = (num_seqs, num_prefill_seqs, num_decode_seqs, num_tokens, num_prefill_tokens,
                  num_running, num_waiting, kv_usage, num_preemptions)
        for name, value in zip(_PER_STEP_FIELDS, values):
            column = np.asarray(value)
            if column.ndim and column.shape != (k,):
                raise ValueError(f"append_many {name}: length {column.shape[0]} must be k={k}")
            rows[name] = column
        self._flush()
        self._add_chunk(rows)
        return float(times[-1])

    def to_columns(self) -> dict[str, np.ndarray]:
        """Every column as its own contiguous array (float64 times and KV usage, int64 counts)."""
        rows = self._rows()
        return {name: np.ascontiguousarray(rows[name]) for name in STEP_COLUMNS}

    @classmethod
    def from_columns(cls, columns: dict[str, Sequence]) -> "StepLog":
        """Rebuild a log from ``to_columns()`` output (or a steps.csv read back)."""
        missing = [name for name in STEP_COLUMNS if name not in columns]
        if missing:
            raise ValueError(f"step log columns: missing {missing}; "
                             f"need all of {list(STEP_COLUMNS)}")
        n = len(columns["start_s"])
        rows = np.empty(n, dtype=_ROW_DTYPE)
        for name in STEP_COLUMNS:
            rows[name] = np.asarray(columns[name])
        log = cls()
        log._add_chunk(rows)
        return log

    # -- internals -------------------------------------------------------------------------------
    def _rows(self) -> np.ndarray:
        self._flush()
        if len(self._chunks) != 1:
            # Concatenate once and keep the result, so repeated reads cost nothing.
            merged = (np.concatenate(self._chunks) if self._chunks
                      else np.empty(0, dtype=_ROW_DTYPE))
            self._chunks = [merged]
        return self._chunks[0]

    def _flush(self) -> None:
        if self._pending:
            self._add_chunk(np.array(self._pending, dtype=_ROW_DTYPE))
            self._pending = []

    def _add_chunk(self, rows: np.ndarray) -> None:
        self._chunks.append(rows)
        self._num_chunked_rows += len(rows)
