"""A running simulation's requests, read into arrays as they finish, front to back.

Requests finish roughly in id order, and a request that has just finished is still in the CPU's
caches: reading it then costs a fraction of reading a million cold objects once the run is over
(``read_request_arrays`` of 200k requests after a run: ~0.6 s). So a reader keeps a cursor and,
when asked (``advance``), reads the longest run of finished requests from it into arrays of the
whole run, allocated up front. Once the run has ended, ``read_rest`` reads the requests still
behind the cursor, and the arrays are the run's ``read_request_arrays``, value for value.

Only for requests whose fields no longer change once ``finish_s`` is set, in increasing id order
(``make_requests``' order): a result file streamed from these arrays is written in that order.
"""
from __future__ import annotations

from operator import attrgetter, indexOf
from typing import Sequence

import numpy as np

from simulator.metrics.request_arrays import COUNTS, TIMES, read_request_arrays
from simulator.core.request import Request

_finish_s = attrgetter("finish_s")


class FinishedPrefix:
    """``requests[:num_read]`` read into ``arrays`` (None once a piece could not be read exactly:
    ``read_request_arrays``' None, an unfinished time or an int among the floats)."""

    def __init__(self, requests: Sequence[Request]):
        self.requests = requests
        self.num_read = 0
        n = len(requests)
        self.arrays: dict[str, np.ndarray] | None = {
            **{name: np.empty(n, np.int64) for name in COUNTS},
            **{name: np.empty(n, np.float64) for name in TIMES}}
        self._last_id = -1

    def advance(self) -> tuple[int, int]:
        """Read the finished requests from the cursor up to the first unfinished one; returns
        the rows read, (start, stop)."""
        start = self.num_read
        return start, self._read_to(start + _num_finished_from(self.requests, start))

    def read_rest(self) -> dict[str, np.ndarray] | None:
        """Read every request not read yet (the run is over) and return ``arrays``."""
        self._read_to(len(self.requests))
        return self.arrays

    def piece(self, start: int, stop: int) -> dict[str, np.ndarray] | None:
        """The arrays of rows ``start:stop``, already read (None: not exact)."""
        if self.arrays is None:
            return None
        return {name: values[start:stop] for name, values in self.arrays.items()}

    def _read_to(self, stop: int) -> int:
        start = self.num_read
        if stop == start:
            return stop
        piece = self.requests[start:stop]
        read = read_request_arrays(piece) if self.arrays is not None else None
        ids = read["request_id"] if read is not None else np.array(
            [r.request_id for r in piece], np.int64)
        self._check_order(ids, start)
        if read is None:
            self.arrays = None
        else:
            for name, values in read.items():
                self.arrays[name][start:stop] = values
        self.num_read = stop
        return stop

    def _check_order(self, ids: np.ndarray, start: int) -> None:
        """Rows are streamed in list order: that must be id order."""
        if ids[0] <= self._last_id or np.any(ids[1:] <= ids[:-1]):
            raise ValueError(f"requests: ids must increase along the list to be read as they "
                             f"finish; request {start} onwards breaks the order")
        self._last_id = int(ids[-1])


def _num_finished_from(requests: Sequence[Request], start: int) -> int:
    """How many requests from ``start`` on have finished before the first that has not."""
    # By index: an islice would step over the ``start`` requests before it at every call.
    try:
        return indexOf(map(_finish_s, map(requests.__getitem__, range(start, len(requests)))),
                       None)
    except ValueError:   # all of them
        return len(requests) - start
