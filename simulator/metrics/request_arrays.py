"""Request attributes as numpy arrays, read in one pass over the requests per type.

A million requests are a million scattered objects, so reading them is memory-bound: each request
is touched once for all the counts wanted and once for all the times, not once per attribute. The
arrays are exact stand-ins for the attribute values (same text, same arithmetic) only when every
count is an int and every time a float, so anything else (a None, an int among float times) gives
None and the caller goes value by value.

A finished run's requests no longer change, so ``FinishedRequests`` keeps its arrays once read:
the summary and the result files share one reading.
"""
from __future__ import annotations

from itertools import chain
from operator import attrgetter
from typing import Callable, Iterable, Sequence

import numpy as np

COUNTS = ("request_id", "num_prompt_tokens", "num_output_tokens", "num_preemptions",
          "num_cached_tokens")
TIMES = ("arrival_s", "scheduled_s", "first_token_s", "finish_s", "last_token_s",
         "client_queue_s", "itl_sq_sum_s2", "max_itl_s")


class FinishedRequests(list):
    """The requests of a run that has ended, in the run's order, with their ``request_arrays``
    read at most once. Only for requests that will not change again: the arrays are not
    re-read."""
    __slots__ = ("_arrays",)

    def __init__(self, requests: Iterable = (), arrays: dict[str, np.ndarray] | None = None):
        """``arrays``: the requests' ``read_request_arrays``, already read as they finished
        (``FinishedPrefix``); None: read when first asked."""
        super().__init__(requests)
        if arrays is not None:
            self._arrays = arrays

    def arrays(self) -> dict[str, np.ndarray] | None:
        if not hasattr(self, "_arrays"):
            self._arrays = read_request_arrays(self)
        return self._arrays


def request_arrays(requests: Sequence) -> dict[str, np.ndarray] | None:
    """Every ``COUNTS`` attribute as int64 and every ``TIMES`` attribute as float64, in the
    requests' order (``FinishedRequests``: the arrays it has read)."""
    if isinstance(requests, FinishedRequests):
        return requests.arrays()
    return read_request_arrays(requests)


def read_request_arrays(requests: Sequence) -> dict[str, np.ndarray] | None:
    """``request_arrays`` read now; None unless every count is an int within int64 and every
    time a float (an unfinished request's None times, an int time: arrays would change the
    text)."""
    # conjugate() is the cheapest exact check: a method of int (float) refusing anything else.
    counts = _read(requests, COUNTS, int.conjugate, np.int64)
    times = counts and _read(requests, TIMES, float.conjugate, np.float64)
    return times and {**counts, **times}


def _read(requests: Sequence, names: tuple[str, ...], exact: Callable,
          dtype: type) -> dict[str, np.ndarray] | None:
    try:
        flat = np.fromiter(map(exact, chain.from_iterable(map(attrgetter(*names), requests))),
                           dtype, len(requests) * len(names))
    except (TypeError, OverflowError):   # OverflowError: an int beyond int64
        return None
    table = flat.reshape(len(requests), len(names))
    return {name: np.ascontiguousarray(table[:, j]) for j, name in enumerate(names)}
