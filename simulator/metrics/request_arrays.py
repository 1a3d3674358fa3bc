"""Request attributes as numpy arrays, read in one pass over the requests.

A million requests are a million scattered objects, so reading them is memory-bound: each request
is touched once for all the attributes wanted, not once per attribute. The arrays are exact
stand-ins for the attribute values (same text, same arithmetic) only when every value has the
arrays' type, so anything else (a None, an int among float times) gives None and the caller goes
value by value.
"""
from __future__ import annotations

from itertools import chain
from operator import attrgetter
from typing import Callable, Sequence

import numpy as np


def float_arrays(requests: Sequence, names: tuple[str, ...]) -> dict[str, np.ndarray] | None:
    """``names`` (two or more) of every request as float64 arrays; None unless every value is
    a float (``float.__float__`` refuses an int or None)."""
    return _read(requests, names, float.__float__, np.float64)


def int_arrays(requests: Sequence, names: tuple[str, ...]) -> dict[str, np.ndarray] | None:
    """``names`` (two or more) of every request as int64 arrays; None unless every value is an
    int within int64."""
    return _read(requests, names, int.__index__, np.int64)


def _read(requests: Sequence, names: tuple[str, ...], exact: Callable,
          dtype: type) -> dict[str, np.ndarray] | None:
    if len(names) < 2:
        raise ValueError(f"request arrays names: {names!r} must name two or more attributes")
    try:
        flat = np.fromiter(map(exact, chain.from_iterable(map(attrgetter(*names), requests))),
                           dtype, len(requests) * len(names))
    except (TypeError, OverflowError):   # OverflowError: an int beyond int64
        return None
    table = flat.reshape(len(requests), len(names))
    return {name: np.ascontiguousarray(table[:, j]) for j, name in enumerate(names)}
