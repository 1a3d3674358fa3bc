"""The step log as columns: one row per forward pass, in the order the steps ran.

The engine appends a step at a time (``append``) or a run of decode steps at once
(``extend_decode_steps``) into one list per column; every ``chunk_rows`` rows the lists become
typed arrays and go to the sink (steps.csv or .parquet). The table keeps the steps' series
the summary and the plots read (STEP_SERIES) for the whole run, a few numbers a step; without a
sink it keeps every column.
"""
from __future__ import annotations

import numpy as np

from simulator.results.columns import STEP_COLUMNS, STEP_DTYPES, STEP_SERIES

CHUNK_ROWS = 65_536


class StepTable:
    def __init__(self, sink=None, chunk_rows: int = CHUNK_ROWS):
        self.sink = sink
        self.chunk_rows = chunk_rows
        self._lists: tuple[list, ...] = tuple([] for _ in STEP_COLUMNS)
        self._kept = STEP_SERIES if sink is not None else STEP_COLUMNS
        self._chunks: list[dict[str, np.ndarray]] = []
        self._num_flushed = 0

    def __len__(self) -> int:
        return self._num_flushed + len(self._lists[1])

    @property
    def num_steps(self) -> int:
        return len(self)

    def append(self, start_s: float, end_s: float, num_seqs: int, num_prefill_seqs: int,
               num_decode_seqs: int, num_tokens: int, num_prefill_tokens: int,
               num_running: int, num_waiting: int, kv_usage: float, num_preemptions: int) -> None:
        """Record one step."""
        (start, end, seqs, prefill_seqs, decode_seqs, tokens, prefill_tokens, running, waiting,
         kv, preemptions) = self._lists
        start.append(start_s)
        end.append(end_s)
        seqs.append(num_seqs)
        prefill_seqs.append(num_prefill_seqs)
        decode_seqs.append(num_decode_seqs)
        tokens.append(num_tokens)
        prefill_tokens.append(num_prefill_tokens)
        running.append(num_running)
        waiting.append(num_waiting)
        kv.append(kv_usage)
        preemptions.append(num_preemptions)
        if len(end) >= self.chunk_rows:
            self.flush()

    def extend_decode_steps(self, start_s: float, end_s: list[float], num_rows: list[int],
                            num_running: list[int], num_waiting: list[int],
                            kv_usage: list[float]) -> None:
        """Record back-to-back all-decode steps (a run): step i runs from the previous end
        (``start_s`` for the first) to ``end_s[i]`` with ``num_rows[i]`` decodes."""
        k = len(end_s)
        if not (len(num_rows) == len(num_running) == len(num_waiting) == len(kv_usage) == k):
            raise ValueError(f"extend_decode_steps: per-step lists must all have len(end_s)={k}")
        (start, end, seqs, prefill_seqs, decode_seqs, tokens, prefill_tokens, running, waiting,
         kv, preemptions) = self._lists
        zeros = [0] * k
        start.append(start_s)
        start += end_s[:-1]
        end += end_s
        for column in (seqs, decode_seqs, tokens):
            column += num_rows
        for column in (prefill_seqs, prefill_tokens, preemptions):
            column += zeros
        running += num_running
        waiting += num_waiting
        kv += kv_usage
        if len(end) >= self.chunk_rows:
            self.flush()

    def flush(self) -> None:
        """Hand the buffered rows to the sink as one chunk, keeping what the table keeps."""
        if not self._lists[1]:
            return
        try:
            chunk = {name: np.fromiter(values, STEP_DTYPES[name], len(values))
                     for name, values in zip(STEP_COLUMNS, self._lists)}
        except (TypeError, ValueError) as exc:   # e.g. a count that is no integer
            raise ValueError(f"step log: a value cannot be stored ({exc})") from None
        self._lists = tuple([] for _ in STEP_COLUMNS)
        if self.sink is not None:
            self.sink.write(chunk)
        self._chunks.append({name: _compact(chunk[name]) if self.sink is not None else chunk[name]
                             for name in self._kept})
        self._num_flushed += len(chunk["end_s"])

    def to_columns(self) -> dict[str, np.ndarray]:
        """The kept columns over the whole run, each one array."""
        self.flush()
        if len(self._chunks) != 1:
            self._chunks = [{name: np.concatenate([c[name] for c in self._chunks])
                             if self._chunks else np.empty(0, STEP_DTYPES[name]) for name in self._kept}]
        return self._chunks[0]

    @classmethod
    def from_columns(cls, columns) -> "StepTable":
        """A table of steps read back (every column of STEP_COLUMNS)."""
        missing = [name for name in STEP_COLUMNS if name not in columns]
        if missing:
            raise ValueError(f"step log columns: missing {missing}; need all of {list(STEP_COLUMNS)}")
        table = cls()
        table._chunks = [{name: np.asarray(columns[name], STEP_DTYPES[name]) for name in STEP_COLUMNS}]
        table._num_flushed = len(table._chunks[0]["end_s"])
        return table


def _compact(column: np.ndarray) -> np.ndarray:
    """A kept count in 32 bits (queue lengths and preemptions of one step): half the memory of a
    long run's series, the same values."""
    return column.astype(np.int32) if column.dtype == np.int64 else column
