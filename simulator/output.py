"""Result files: ``requests.csv``, ``steps.csv`` and ``summary.json``, written atomically.

A run's folder appears only once all three files are complete (``atomic_files``: a staging
folder renamed into place); any failure removes the staging folder, so nothing half-written ever
looks like a result. A large run's files are mostly written by a forked helper
(``streaming_write``): steps.csv and the finished requests' rows of requests.csv while the
simulation runs, part of the rest at the end.

Output is byte-stable: floats are written with ``repr`` (shortest exact round-trip), JSON keys are
sorted, and rows follow request id / step order, so the same seed gives the same bytes.
"""
from __future__ import annotations

import json
import math
import os
import shutil
from operator import attrgetter
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence, TextIO

import numpy as np

from simulator.atomic_files import atomic_write, put_in_place, staging_folder
from simulator.csv_format import BlankableColumn, csv_chunks, csv_text  # noqa: F401 (csv_text: re-exported)
from simulator.metrics.finished_prefix import FinishedPrefix
from simulator.metrics.request_arrays import FinishedRequests, request_arrays
from simulator.metrics.step_log import STEP_COLUMNS, StepLog
from simulator.metrics.summary import latencies_s, latency_arrays_s
from simulator.parallel_write import can_fork
from simulator.core.request import Request
from simulator.streaming_write import STEPS_CSV, ForkedWriter

__all__ = ["REQUEST_COLUMNS", "ResultWriter", "atomic_write", "csv_text", "request_columns",
           "request_rows", "summary_json", "write_results"]

REQUEST_COLUMNS: tuple[str, ...] = (
    "request_id", "arrival_s", "scheduled_s", "first_token_s", "finish_s", "num_prompt_tokens",
    "num_output_tokens", "num_preemptions", "num_cached_tokens", "ttft_ms", "tpot_ms", "e2el_ms",
    "client_queue_ms")   # time held by the client's --max-concurrency limit (not in TTFT/E2EL)
REQUESTS_CSV, SUMMARY_JSON = "requests.csv", "summary.json"
# `servesim run` forks its helper before the simulation for runs of at least this many requests
# (before their requests are built: the parent never copies those pages on write), and for shorter
# runs once the step log stores its first chunk (SHORT_RUN_CHUNK_ROWS steps; a shorter log is
# written in one process). Measured with 8,192-step chunks, in process, wall from the command's
# start to its end, means of 10-12 interleaved runs on this 2-core VM (one core mostly busy with
# other work), one process -> forked at the first chunk (forked before the run): peer 1k vllm_v0
# 0.189 -> 0.167 (0.170) s, sarathi 0.233 -> 0.207 (0.213) s; standard vllm_v1 3k 0.342 -> 0.299
# (0.315) s, 3.5k 0.387 -> 0.333 (0.320) s, 5k 0.463 -> 0.441 and 0.460 (0.416 and 0.406) s; 2k
# (6.8k steps: no chunk stored before the end) 0.251 s, forked before the run 0.249 s. Whole peer 1k
# processes, medians of 25 interleaved: vllm_v0 0.507 -> 0.494 s, sarathi 0.540 -> 0.520 s. The
# helper costs ~30 ms of CPU of its own there: on a machine with no second core free it does not
# pay.
MIN_STREAMED_REQUESTS = 10_000
# A shorter run's log is stored (and streamed) in chunks of this many steps, not 8,192: its helper
# forks sooner and formats steps.csv as the run goes, rather than most of it after the run. Whole
# peer 1k sarathi processes (11,272 steps), medians of 40 interleaved: 8,192 0.496 s, 4,096
# 0.481 s, 2,048 0.492 s; before the helper was handed the run's last rows ahead of the summary
# (and was waited for while it exited), 0.518 s.
SHORT_RUN_CHUNK_ROWS = 4096
# A finished log at least this long (steps plus requests) is written with a helper forked at
# write time: measured before the helper shared requests.csv, a 69k-row log's files took 0.56 s
# in one process and 0.39 s with it; shorter logs were not measured.
MIN_FORKED_ROWS = 50_000


class ResultWriter:
    """A run's result folder, written while the run goes on: simulate into ``step_log``, then
    ``finish``. Leaving the ``with`` block without ``finish`` (an error, Ctrl-C) leaves no
    folder and no helper process behind.

    Where ``can_fork``, a helper process shares the work: with ``stream``, one forked on entry
    (``fork_when_long``: once the log stores its first chunk) formats steps.csv as the log fills,
    and the rows of requests finished so far (``watch_requests``); else one forked by ``finish``
    when the log is long. Either way it then formats part of requests.csv's rest while the
    parent formats the other part."""

    def __init__(self, result_dir: str | os.PathLike, step_log: StepLog | None = None,
                 stream: bool = False, fork_when_long: bool = False):
        self.target = Path(result_dir)
        if self.target.exists() and not self.target.is_dir():
            raise ValueError(f"result_dir: {str(self.target)!r} exists and is not a folder")
        if step_log is None:
            step_log = StepLog(SHORT_RUN_CHUNK_ROWS if fork_when_long else None)
        self.step_log = step_log
        self._stream, self._fork_when_long = stream, fork_when_long
        self._staging: Path | None = None
        self._helper: ForkedWriter | None = None
        self._watched: Sequence[Request] | None = None   # the running simulation's requests
        self._prefix: FinishedPrefix | None = None   # the watched requests, read as they finish
        self._num_streamed = 0                        # requests.csv rows sent to the helper
        self._shared: Sequence[Request] | None = None  # requests whose rows the helper was given

    def __enter__(self) -> "ResultWriter":
        if self._stream and can_fork():
            if self._fork_when_long:
                self.step_log.stream_to(self._fork_at_first_chunk)
            else:
                self._start_helper()
        return self

    def __exit__(self, *exc_info) -> None:
        self.step_log.stream_to(None)
        if self._helper is not None:
            self._helper.close()
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)

    def watch_requests(self, requests: Sequence[Request]) -> None:
        """The requests of the run about to be simulated, in increasing id order, whose fields
        no longer change once ``finish_s`` is set. With a helper, each time the log stores a
        chunk, the requests finished since (up to the first unfinished one) are read and their
        rows go to requests.csv."""
        self._watched = requests
        if self._helper is not None:
            self._stream_requests()

    def finished_requests(self, requests: Sequence[Request]) -> FinishedRequests:
        """The watched requests once the run has ended, with the arrays read as they finished
        (the rest read now): the summary's and requests.csv's one reading. With a helper, the
        log's last rows and requests.csv's rest go to it now, so that it formats them while
        the caller summarises the run."""
        self._watched = None
        if self._helper is None:   # the run is over: no helper forks at the log's last flush
            self.step_log.stream_to(None)
        finished = FinishedRequests(requests) if self._prefix is None \
            else FinishedRequests(requests, self._prefix.read_rest())
        if self._helper is not None:
            self._share_requests(finished)
        return finished

    def finish(self, requests: Sequence[Request], summary: dict) -> Path:
        """Write the three files and put the folder in place (replacing an older one).
        ``requests``: the watched ones, if ``watch_requests`` was called; ``finished_requests``'
        if it was."""
        if self._helper is None and len(self.step_log) + len(requests) >= MIN_FORKED_ROWS \
                and can_fork():
            self._start_helper()
        if self._staging is None:
            self._staging = staging_folder(self.target)
        atomic_write(self._staging / SUMMARY_JSON, lambda f: f.write(summary_json(summary)))
        if self._helper is None:
            atomic_write(self._staging / STEPS_CSV, lambda f: _write_steps_csv(f, self.step_log))
            atomic_write(self._staging / REQUESTS_CSV, lambda f: _write_requests_csv(f, requests))
        else:
            if self._shared is None:
                self._share_requests(requests)
            elif len(requests) != len(self._shared):
                raise ValueError(f"finish: {len(requests)} requests, but the run finished "
                                 f"{len(self._shared)}")
            self._helper.finish_table()
        put_in_place(self._staging, self.target)
        self._staging = None
        return self.target

    def _share_requests(self, requests: Sequence[Request]) -> None:
        """End steps.csv and hand requests.csv's rows not streamed yet to the helper."""
        self._helper.end_steps()
        first, read_rows = self._num_streamed, self._request_rows_reader(requests)
        self._helper.start_table(REQUESTS_CSV, REQUEST_COLUMNS, len(requests) - first,
                                 lambda start, stop: read_rows(first + start, first + stop))
        self._shared = requests

    def _start_helper(self) -> None:
        self._staging = staging_folder(self.target)
        self._helper = ForkedWriter(self._staging, self.step_log)

    def _fork_at_first_chunk(self, chunk: dict) -> None:
        """The log has stored its first chunk: the run is long enough for a helper to pay (the
        helper's copy of the log holds the chunk; it then takes the log's chunks over)."""
        if can_fork():
            self._start_helper()
            if self._watched is not None:
                self._stream_requests()
        else:
            self.step_log.stream_to(None)

    def _stream_requests(self) -> None:
        self._prefix = FinishedPrefix(self._watched)
        self._helper.stream_table(REQUESTS_CSV, REQUEST_COLUMNS, self._next_request_rows)

    def _next_request_rows(self) -> list[Sequence] | None:
        """The columns of the requests finished since the last chunk (None: none)."""
        start, stop = self._prefix.advance()
        if stop == start:
            return None
        self._num_streamed = stop
        return self._prefix_columns(start, stop)

    def _request_rows_reader(self, requests: Sequence[Request]) -> Callable[[int, int], list]:
        """``read_rows(start, stop)``: the columns of those rows of requests.csv."""
        if self._prefix is not None:
            if len(requests) != len(self._prefix.requests):
                raise ValueError(f"finish: {len(requests)} requests, but "
                                 f"{len(self._prefix.requests)} were watched")
            return self._prefix_columns
        columns = request_columns(requests)
        return lambda start, stop: [c[start:stop] for c in columns]

    def _prefix_columns(self, start: int, stop: int) -> list[Sequence]:
        arrays = self._prefix.piece(start, stop)
        if arrays is None:   # not exact as arrays: cell by cell
            return request_columns(self._prefix.requests[start:stop])
        return _array_columns(arrays)


def write_results(result_dir: str | os.PathLike, requests: Sequence[Request],
                  step_log: StepLog, summary: dict) -> Path:
    """Write the three result files into ``result_dir`` (replaced whole, or not at all)."""
    with ResultWriter(result_dir, step_log) as writer:
        return writer.finish(requests, summary)


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
    requests = requests if isinstance(requests, Sequence) else list(requests)
    columns = request_arrays(requests)
    if columns is None:   # unknown times, or ints among them: cell by cell, as latencies_s does
        return _request_columns_by_cell(sorted(requests, key=attrgetter("request_id")))
    ids = columns["request_id"]
    if np.any(ids[1:] < ids[:-1]):
        order = np.argsort(ids, kind="stable")   # the order sorted() gives
        columns = {name: values[order] for name, values in columns.items()}
    return _array_columns(columns)


# -- internals -----------------------------------------------------------------------------------
_REQUEST_ATTRIBUTES = REQUEST_COLUMNS[:9]     # read straight off each Request


def _array_columns(columns: dict[str, np.ndarray]) -> list[Sequence]:
    """The ``REQUEST_COLUMNS`` of requests read into arrays (``request_arrays``), in their order."""
    return [*(columns[name] for name in _REQUEST_ATTRIBUTES), *_latency_columns_ms(columns),
            columns["client_queue_s"] * 1000]


def _write_requests_csv(f: TextIO, requests: Sequence[Request]) -> None:
    f.writelines(csv_chunks(REQUEST_COLUMNS, request_columns(requests)))


def _write_steps_csv(f: TextIO, step_log: StepLog) -> None:
    columns = step_log.to_columns()
    f.writelines(csv_chunks(STEP_COLUMNS, [columns[name] for name in STEP_COLUMNS]))


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
