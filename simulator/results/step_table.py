"""The step log as columns: one row per forward pass, in the order the steps ran.

The engine appends a step at a time (``append``) or a run of decode steps at once
(``extend_decode_steps``) into one list per column; every ``chunk_rows`` rows the lists become
typed arrays and go to the sink (steps.csv or .parquet). Without a sink the table keeps every
column. With one it keeps the series the summary and the plots read (STEP_SERIES) for a window of
up to ``WINDOW_ROWS`` steps; a full window is folded into the summary's sums and kept, for the
plots, as its rows at each series' lowest and highest points per time bucket (and its steps that
preempted); once the folded windows' rows pass ``MAX_PLOT_ROWS`` they are thinned the same way
over the whole run, so memory stays bounded however long the run. A run within one window gets its figures
from its whole arrays, as ever; a longer one adds its windows' sums in turn, so its time-weighted
means can differ from one whole-array sum in the last digits.
"""
from __future__ import annotations

import numpy as np

from simulator.results.columns import (ALL_STEP_DTYPES, LEVELS, OPTIONAL_STEP_COLUMNS, REPLICA,
                                      STATE_SLOTS, STEP_COLUMNS, STEP_FIGURES, STEP_SERIES)
from simulator.results.decimate import envelope, thin_events

CHUNK_ROWS = 65_536
WINDOW_ROWS = 1 << 20
WINDOW_POINTS = 4_096   # rows a folded window keeps per series for the plots
MAX_PLOT_ROWS = 16 * WINDOW_POINTS   # folded windows' rows kept before thinning them again
_END_S = STEP_COLUMNS.index("end_s")   # the column whose length is the buffered row count


class StepTable:
    def __init__(self, sink=None, chunk_rows: int = CHUNK_ROWS, state_slots: bool = False,
                 replica_column: bool = False):
        """``state_slots``: a hybrid model's run (its STATE_SLOTS column); ``replica_column``: a
        run of several replicas, whose steps say which one ran them (REPLICA)."""
        self.sink = sink
        self.chunk_rows = chunk_rows
        extra = tuple(name for name, on in zip(OPTIONAL_STEP_COLUMNS, (state_slots, replica_column)) if on)
        self.columns = STEP_COLUMNS + extra
        self._extra = {name: i for i, name in enumerate(self.columns) if name in extra}
        self._lists: tuple[list, ...] = tuple([] for _ in self.columns)
        self._kept = STEP_SERIES + extra if sink is not None else self.columns
        self._chunks: list[dict[str, np.ndarray]] = []   # the current window's
        self._num_flushed = 0
        self._folded: list[dict] = []                    # each folded window's sums
        self._decimated: list[dict[str, np.ndarray]] = []   # each folded window's plot rows

    def __len__(self) -> int:
        return self._num_flushed + len(self._lists[_END_S])

    @property
    def num_steps(self) -> int:
        return len(self)

    def append(self, start_s: float, end_s: float, num_seqs: int, num_prefill_seqs: int,
               num_decode_seqs: int, num_tokens: int, num_prefill_tokens: int,
               num_running: int, num_waiting: int, kv_usage: float, num_preemptions: int,
               num_state_slots: int = 0, replica: int = 0) -> None:
        """Record one step (``num_state_slots``, ``replica``: kept where the table has their
        columns)."""
        (start, end, seqs, prefill_seqs, decode_seqs, tokens, prefill_tokens, running, waiting,
         kv, preemptions) = self._lists[:11]
        if self._extra:
            for name, value in ((STATE_SLOTS, num_state_slots), (REPLICA, replica)):
                if name in self._extra:
                    self._lists[self._extra[name]].append(value)
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
                            kv_usage: list[float], num_state_slots: list[int] | None = None) -> None:
        """Record back-to-back all-decode steps (a run): step i runs from the previous end
        (``start_s`` for the first) to ``end_s[i]`` with ``num_rows[i]`` decodes."""
        k = len(end_s)
        if not (len(num_rows) == len(num_running) == len(num_waiting) == len(kv_usage) == k):
            raise ValueError(f"extend_decode_steps: per-step lists must all have len(end_s)={k}")
        if REPLICA in self._extra:
            raise ValueError("extend_decode_steps: runs of decode steps are a lone replica's")
        (start, end, seqs, prefill_seqs, decode_seqs, tokens, prefill_tokens, running, waiting,
         kv, preemptions) = self._lists[:11]
        if STATE_SLOTS in self._extra:
            self._lists[self._extra[STATE_SLOTS]].extend(num_state_slots)
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
        if not self._lists[_END_S]:
            return
        try:
            chunk = {name: np.fromiter(values, ALL_STEP_DTYPES[name], len(values))
                     for name, values in zip(self.columns, self._lists)}
        except (TypeError, ValueError) as exc:   # e.g. a count that is no integer
            raise ValueError(f"step log: a value cannot be stored ({exc})") from None
        self._lists = tuple([] for _ in self.columns)
        if self.sink is not None:
            self.sink.write(chunk)
        self._chunks.append({name: _compact(chunk[name]) if self.sink is not None else chunk[name]
                             for name in self._kept})
        self._num_flushed += len(chunk["end_s"])
        if self.sink is not None and sum(len(c["end_s"]) for c in self._chunks) >= WINDOW_ROWS:
            self._fold_window()

    def _window(self) -> dict[str, np.ndarray]:
        """The current window's kept columns, each one array (its chunks let go)."""
        if len(self._chunks) != 1:
            self._chunks = [{name: np.concatenate([c[name] for c in self._chunks])
                             if self._chunks else np.empty(0, ALL_STEP_DTYPES[name])
                             for name in self._kept}]
        return self._chunks[0]

    def _fold_window(self) -> None:
        window = self._window()
        self._folded.append(_sums(window))
        self._decimated.append(_plot_rows(window))
        if sum(len(d["end_s"]) for d in self._decimated) > MAX_PLOT_ROWS:
            self._decimated = [_plot_rows(_concatenate(self._decimated))]
        self._chunks = []

    def stats(self) -> dict:
        """The summary's step figures: count, total and mean step time, peak and time-weighted
        mean KV usage, running and waiting requests."""
        self.flush()
        parts = [*self._folded, _sums(self._window())] if self._folded else [_sums(self._window())]
        n = sum(p["num_steps"] for p in parts)
        if not n:
            return {name: 0 if name.startswith(("num_", "peak_num_")) else 0.0
                    for name in STEP_FIGURES}
        total_s = sum(p["total_s"] for p in parts if p["num_steps"])
        figures = {"num_steps": n, "total_step_time_s": total_s,
                   "mean_step_time_ms": float(total_s / n * 1000)}
        for name in LEVELS:
            weighted = sum(p["weighted_" + name] for p in parts if p["num_steps"])
            figures["peak_" + name] = max(p["peak_" + name] for p in parts if p["num_steps"])
            figures["mean_" + name] = weighted / total_s if total_s > 0 else 0.0
        return figures

    def to_columns(self) -> dict[str, np.ndarray]:
        """The kept columns over the whole run, each one array (past one window: the folded
        windows' plot rows, then the current window's rows)."""
        self.flush()
        window = self._window()
        if not self._decimated:
            return window
        return _concatenate([*self._decimated, window])

    @classmethod
    def from_columns(cls, columns) -> "StepTable":
        """A table of steps read back (every column of STEP_COLUMNS, and the replica's if any)."""
        missing = [name for name in STEP_COLUMNS if name not in columns]
        if missing:
            raise ValueError(f"step log columns: missing {missing}; need all of {list(STEP_COLUMNS)}")
        table = cls(state_slots=STATE_SLOTS in columns, replica_column=REPLICA in columns)
        table._chunks = [{name: np.asarray(columns[name], ALL_STEP_DTYPES[name])
                          for name in table.columns}]
        table._num_flushed = len(table._chunks[0]["end_s"])
        return table


def _concatenate(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Row sets of the same columns, one after another (in time order)."""
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}


def _compact(column: np.ndarray) -> np.ndarray:
    """A kept count in 32 bits (queue lengths and preemptions of one step): half the memory of a
    long run's series, the same values."""
    return column.astype(np.int32) if column.dtype == np.int64 else column


def _sums(w: dict[str, np.ndarray]) -> dict:
    """A window's share of the step figures (time weights: each step's duration)."""
    d = w["end_s"] - w["start_s"]
    if not len(d):
        return {"num_steps": 0}
    sums = {"num_steps": len(d), "total_s": float(d.sum())}
    for name in LEVELS:
        values = w[name]
        sums["peak_" + name] = values.max().item()
        # Not np.dot: BLAS sums in an order that depends on its threads; numpy's own sum does not.
        sums["weighted_" + name] = float(np.sum(d * np.asarray(values, dtype=np.float64)))
    return sums


def _plot_rows(w: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A window's rows at each series' lowest and highest points per time bucket, and its
    steps that preempted most per bucket (simulator/results/decimate.py). Step ends increase,
    so a kept time names its row."""
    t = w["end_s"]
    keep = [np.searchsorted(t, envelope(t, w[name], WINDOW_POINTS)[0])
            for name in LEVELS]
    keep.append(thin_events(t, w["num_preemptions"], WINDOW_POINTS))
    rows = np.unique(np.concatenate(keep))
    return {name: column[rows] for name, column in w.items()}
