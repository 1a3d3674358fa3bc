"""Per-step log: one row per simulated forward pass, stored column-wise.

The engine logs once per step and a run can have millions of steps, so nothing per step is an
object: ``append`` packs its row into 88 bytes at once (``struct``, native float64 times and KV
usage, int64 counts), ``extend_decode_steps`` extends five plain lists (a decode run's other
columns follow from them), and every ``_CHUNK_ROWS`` rows both are moved into one numpy array per
column. The flush joins the packed rows, packs each decode list in one ``struct`` call (about a
third of what numpy's conversion of a list costs) and puts both kinds of row in logged order with
one ``take``: about a fifth of the instructions of converting per column and scattering by mask.

Fast-forward (``append_many``) stores its k steps expanded, one row each, so ``steps.csv`` has one
row per step and is byte-identical to the step-by-step run. Step times are accumulated one addition
at a time (``t += dt``), exactly as SimPy advances ``env.now`` per ``timeout(dt)``.
"""
from __future__ import annotations

import struct
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
_CHUNK_ROWS = 8192
_PER_STEP_FIELDS = STEP_COLUMNS[2:]   # everything but the two times
_CODES = {np.float64: "d", np.int64: "q"}   # struct's native codes: both 8 bytes, no padding
_pack_row = struct.Struct("".join(_CODES[dtype] for _, dtype in _COLUMNS)).pack
# A pending decode run: its first pending row number, its row count and its start time.
_pack_run = struct.Struct("qqd").pack
_COLUMN_INDEX = {name: i for i, name in enumerate(STEP_COLUMNS)}
# A decode-run row: its end, row count, queues and KV usage (each a pending list, in this order);
# its start is the previous row's end (the run's start for its first row); no prefill, no
# preemption, and num_seqs = num_decode_seqs = num_tokens = the row count.
_DECODE_LISTS = (("end_s", np.float64, ("end_s",)),
                 ("num_rows", np.int64, ("num_seqs", "num_decode_seqs", "num_tokens")),
                 ("num_running", np.int64, ("num_running",)),
                 ("num_waiting", np.int64, ("num_waiting",)),
                 ("kv_usage", np.float64, ("kv_usage",)))
_DECODE_ZERO_COLUMNS = [i for i, name in enumerate(STEP_COLUMNS) if name != "start_s"
                        and all(name not in targets for _, _, targets in _DECODE_LISTS)]


class StepLog:
    """Columnar log of simulated steps; ``to_columns()`` gives one numpy array per column."""

    def __init__(self, chunk_rows: int | None = None) -> None:
        """``chunk_rows``: rows per chunk (default 8,192): a streamed log's receiver gets its
        rows that often."""
        self.chunk_rows = _CHUNK_ROWS if chunk_rows is None else chunk_rows
        self._appended: list[bytes] = []                 # pending rows from append(), packed
        self._decode: tuple[list, ...] = tuple([] for _ in _DECODE_LISTS)   # pending decode rows
        self._decode_runs: list[bytes] = []              # each pending run, packed (_pack_run)
        self._chunks: list[dict[str, np.ndarray]] = []
        self._num_chunked_rows = 0
        self._on_chunk: Callable[[dict[str, np.ndarray]], None] | None = None

    def __len__(self) -> int:
        return self._num_chunked_rows + len(self._appended) + len(self._decode[0])

    @property
    def num_steps(self) -> int:
        return len(self)

    def append(self, start_s: float, end_s: float, num_seqs: int, num_prefill_seqs: int,
               num_decode_seqs: int, num_tokens: int, num_prefill_tokens: int,
               num_running: int, num_waiting: int, kv_usage: float,
               num_preemptions: int) -> None:
        """Record one step. Hot path: one packed row appended (a count that is no integer, or a
        time or KV usage that is no number, is refused)."""
        try:
            self._appended.append(_pack_row(start_s, end_s, num_seqs, num_prefill_seqs,
                                            num_decode_seqs, num_tokens, num_prefill_tokens,
                                            num_running, num_waiting, kv_usage, num_preemptions))
        except struct.error:   # a row tuple built before packing would cost every call
            raise ValueError(_refusal("append", (start_s, end_s, num_seqs, num_prefill_seqs,
                                                 num_decode_seqs, num_tokens, num_prefill_tokens,
                                                 num_running, num_waiting, kv_usage,
                                                 num_preemptions))) from None
        if len(self._appended) + len(self._decode[0]) >= self.chunk_rows:
            self._flush()

    def extend_decode_steps(self, start_s: float, end_s: list[float], num_rows: list[int],
                            num_running: list[int], num_waiting: list[int],
                            kv_usage: list[float]) -> None:
        """Record back-to-back all-decode steps (a multi-step advance): step i runs from the
        previous end (``start_s`` for the first) to ``end_s[i]`` with ``num_rows[i]`` decodes.
        The lists are packed when the rows are flushed: a value that is not a number (an integer,
        for the counts) is refused then."""
        k = len(end_s)
        if len(num_rows) != k or len(num_running) != k or len(num_waiting) != k \
                or len(kv_usage) != k:
            raise ValueError(f"extend_decode_steps: per-step lists must all have len(end_s)={k}")
        if not k:
            return
        ends, rows, running, waiting, kv = self._decode
        try:
            self._decode_runs.append(_pack_run(len(self._appended) + len(ends), k, start_s))
        except struct.error:
            raise ValueError(f"extend_decode_steps start_s: {start_s!r} must be a number") from None
        ends.extend(end_s)
        rows.extend(num_rows)
        running.extend(num_running)
        waiting.extend(num_waiting)
        kv.extend(kv_usage)
        if len(self._appended) + len(ends) >= self.chunk_rows:
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
        """Move the pending rows into a chunk now (they are otherwise moved every ``chunk_rows``)."""
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
        """Move the pending rows into one chunk, in the order they were logged. The chunk is built
        as rows of 8-byte words (a float column's words are its float64 bits): the appended rows
        are their packed bytes as they are, and one take puts both kinds of row in order."""
        num_appended, num_decode = len(self._appended), len(self._decode[0])
        num_rows = num_appended + num_decode
        if not num_rows:
            return
        words = np.empty((num_rows, len(_COLUMNS)), np.int64)   # np.zeros would cost more
        if num_appended:
            words[:num_appended] = np.frombuffer(b"".join(self._appended), np.int64).reshape(
                num_appended, len(_COLUMNS))
        if num_decode:
            runs = np.frombuffer(b"".join(self._decode_runs), np.int64).reshape(-1, 3)
            self._fill_decode_columns(words[num_appended:].T, runs)
            if num_appended:
                words = words.take(_logged_order(runs, num_appended, num_rows), axis=0)
        words = words.T.copy()   # one contiguous row per column
        # Emptied before the chunk is handed on: a receiver may read (or flush) the log.
        self._appended = []
        self._decode = tuple([] for _ in _DECODE_LISTS)
        self._decode_runs = []
        self._store({name: words[i].view(dtype) for i, (name, dtype) in enumerate(_COLUMNS)})

    def _fill_decode_columns(self, columns: np.ndarray, runs: np.ndarray) -> None:
        """The pending decode rows' words, written into ``columns`` (one row per column)."""
        columns[_DECODE_ZERO_COLUMNS] = 0
        for values, (name, dtype, targets) in zip(self._decode, _DECODE_LISTS):
            words = _packed_words(name, values, dtype)
            for target in targets:
                columns[_COLUMN_INDEX[target]] = words
            if name == "end_s":   # a row starts where the row before it ended ...
                columns[_COLUMN_INDEX["start_s"], 1:] = words[:-1]
        num_rows = runs[:, 1]   # ... except a run's first row, which starts at the run's start
        columns[_COLUMN_INDEX["start_s"], np.cumsum(num_rows) - num_rows] = runs[:, 2]

    def _add_chunk(self, chunk: dict[str, np.ndarray]) -> None:
        # A copy of each column: the log never shares storage with its caller's arrays.
        self._store({name: np.array(chunk[name], dtype) for name, dtype in _COLUMNS})

    def _store(self, stored: dict[str, np.ndarray]) -> None:
        """Keep a chunk of the log's own arrays (and hand it on, when streaming)."""
        self._chunks.append(stored)
        self._num_chunked_rows += len(stored["start_s"])
        if self._on_chunk is not None:
            self._on_chunk(stored)


def _packed_words(name: str, values: list, dtype: type) -> np.ndarray:
    """A pending decode list as 8-byte words (a float's bits), packed in one call."""
    try:
        return np.frombuffer(struct.pack(f"{len(values)}{_CODES[dtype]}", *values), np.int64)
    except struct.error:
        bad = next(v for v in values if not _packs(_CODES[dtype], v))
        raise ValueError(f"extend_decode_steps {name}: {bad!r} must be "
                         f"{_KIND[dtype]}") from None


def _logged_order(runs: np.ndarray, num_appended: int, num_rows: int) -> np.ndarray:
    """Chunk row i is row ``order[i]`` of [appended rows, then decode rows]. The pending rows
    alternate between gaps of appended rows and decode runs: within each stretch the order is
    the row number plus one shift (per stretch, spread by ``np.repeat``)."""
    first, k = runs[:, 0], runs[:, 1]
    decode_before = np.concatenate(([0], np.cumsum(k)))   # decode rows before each gap
    bounds = np.empty(2 * len(runs) + 2, np.int64)
    bounds[0], bounds[-1] = 0, num_rows
    bounds[1:-1:2], bounds[2:-1:2] = first, first + k
    shifts = np.empty(2 * len(runs) + 1, np.int64)
    shifts[0::2] = -decode_before
    shifts[1::2] = num_appended + decode_before[:-1] - first
    return np.repeat(shifts, np.diff(bounds)) + np.arange(num_rows)


_KIND = {np.float64: "a number", np.int64: "an integer"}


def _packs(code: str, value) -> bool:
    try:
        struct.pack(code, value)
    except struct.error:
        return False
    return True


def _refusal(method: str, row: tuple) -> str:
    """One line naming the first field of a row that cannot be stored, and what it must be."""
    (name, dtype), value = next(((n, d), v) for (n, d), v in zip(_COLUMNS, row)
                                if not _packs(_CODES[d], v))
    return f"{method} {name}: {value!r} must be {_KIND[dtype]}"
