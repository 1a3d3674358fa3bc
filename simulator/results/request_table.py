"""Finished requests as columns: a row per request id, filled as requests finish.

A finished request is read once, its fields going into column arrays indexed by request id, and
the object is let go: memory follows the requests in flight plus a few numbers per request. Rows
are gathered and scattered a chunk at a time, and once the requests up to some id have all
finished, those rows go to the table's sink (requests.csv or .parquet) in id order.
"""
from __future__ import annotations

from itertools import chain
from operator import attrgetter
from typing import Iterable, NamedTuple

import numpy as np

from simulator.core.request import Request
from simulator.results.columns import REQUEST_COUNTS, REQUEST_FIELDS, REQUEST_TIMES

_read_fields = attrgetter(*REQUEST_FIELDS)
CHUNK_ROWS = 65_536


# One finished request's row, with a Request's field names.
RequestRow = NamedTuple("RequestRow", [(name, object) for name in REQUEST_FIELDS])


class RequestTable:
    def __init__(self, num_requests: int, keep_gaps: bool = False, sink=None):
        n = num_requests
        self.columns: dict[str, np.ndarray] = {
            **{name: np.zeros(n, np.int64) for name in REQUEST_COUNTS},
            **{name: np.full(n, np.nan) for name in REQUEST_TIMES}}
        self.done = np.zeros(n, bool)
        # Each request's inter-token gaps, where runs keep them (exact ITL quantiles).
        self.gaps: list | None = [None] * n if keep_gaps else None
        self.sink = sink
        self._pending: list[tuple] = []
        self._written = 0      # rows up to this id have gone to the sink

    @classmethod
    def of(cls, requests: Iterable[Request], num_requests: int | None = None) -> "RequestTable":
        """A table of these finished requests (ids 0 .. num_requests - 1)."""
        requests = list(requests)
        n = num_requests if num_requests is not None else 1 + max((r.request_id for r in requests), default=-1)
        table = cls(n, keep_gaps=any(r.itl_gaps_s is not None for r in requests))
        table.record(requests)
        table.flush()
        return table

    def __len__(self) -> int:
        return len(self.done)

    @property
    def num_finished(self) -> int:
        self.flush()
        return int(self.done.sum())

    def record(self, finished: list[Request]) -> None:
        """Requests that finished: their rows are final."""
        self._pending += map(_read_fields, finished)
        if self.gaps is not None:
            for request in finished:
                self.gaps[request.request_id] = request.itl_gaps_s
        if len(self._pending) >= CHUNK_ROWS:
            self.flush()

    def flush(self) -> None:
        """Scatter the pending rows into the columns; hand the sink every row whose
        predecessors have all finished."""
        if self._pending:
            rows = np.fromiter(chain.from_iterable(self._pending), np.float64,   # counts are
                               len(self._pending) * len(REQUEST_FIELDS))         # exact below 2**53
            rows = rows.reshape(len(self._pending), len(REQUEST_FIELDS))
            self._pending = []
            ids = rows[:, 0].astype(np.int64)
            for j, name in enumerate(REQUEST_FIELDS):
                column = self.columns[name]
                column[ids] = rows[:, j] if column.dtype == np.float64 else rows[:, j].astype(np.int64)
            self.done[ids] = True
        if self.sink is not None:
            start = self._written
            unfinished = np.flatnonzero(~self.done[start:])
            stop = start + int(unfinished[0]) if len(unfinished) else len(self.done)
            if stop > start:
                self.sink.write(self.slice(start, stop))
                self._written = stop

    def slice(self, start: int, stop: int) -> dict[str, np.ndarray]:
        return {name: column[start:stop] for name, column in self.columns.items()}

    def arrays(self) -> dict[str, np.ndarray]:
        """Every column over the finished requests, in id order."""
        self.flush()
        if self.done.all():
            return self.columns
        return {name: column[self.done] for name, column in self.columns.items()}

    def gaps_of_finished(self) -> list | None:
        """The kept gaps of the finished requests, in id order (None where runs keep none)."""
        if self.gaps is None:
            return None
        return [g for g, done in zip(self.gaps, self.done.tolist()) if done]

    def rows(self) -> list[RequestRow]:
        """The finished requests' rows as records, by id (tests and small tools)."""
        arrays = self.arrays()
        columns = [arrays[name].tolist() for name in REQUEST_FIELDS]
        return [RequestRow(*row) for row in zip(*columns)]
