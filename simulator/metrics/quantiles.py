"""``np.median`` and ``np.percentile`` (linear method) without their import of ``numpy.ma``.

Both numpy functions touch ``np.ma`` (``np.median`` to check for masked NaNs, ``np.percentile``
through ``np.unique``), which loads numpy's masked-array package: ~20 ms of a `servesim run`'s
start-up for nothing. These follow numpy's own steps (partition at the same ranks, numpy's ``mean``
of the middle values, its ``_lerp`` with the same index rules) and return the same floats; a test
compares them bit for bit on random arrays. Anything but a real or small-integer array goes to numpy.
"""
from __future__ import annotations

import math

import numpy as np

_EXACT_INT = 2 ** 52   # ints below this are exact floats, and so are their differences


def _as_float64(values) -> np.ndarray | None:
    """``values`` flattened as float64 when that changes no result, else None (numpy decides)."""
    array = np.asarray(values)
    if array.dtype.kind in "iu" and array.size and np.abs(array).max() < _EXACT_INT:
        array = array.astype(np.float64)
    if array.dtype != np.float64 or array.size == 0:
        return None
    return array.ravel()


def median(values) -> np.float64:
    array = _as_float64(values)
    if array is None:
        return np.median(values)
    half = array.size // 2
    ranks = [half - 1, half] if array.size % 2 == 0 else [half]
    part = np.partition(array, [*ranks, -1])
    if math.isnan(part[-1]):
        return part[-1]             # NaNs sort last: numpy's median is NaN too
    return np.mean(part[ranks[0]:ranks[-1] + 1])


def percentile(values, p: float) -> float:
    """numpy's default (linear) percentile ``p`` in [0, 100] of ``values``."""
    array = _as_float64(values)
    if array is None or not 0 <= p <= 100:
        return np.percentile(values, p)
    n = array.size
    virtual = (n - 1) * (p / 100)
    if virtual >= n - 1:            # numpy: both neighbours are the last value, gamma from -1
        below = above = -1
    else:
        below = math.floor(virtual)
        above = below + 1
    part = np.partition(array, sorted({0, -1, below, above}))   # numpy's ranks, as np.unique gives them
    if math.isnan(part[-1]):
        return float(part[-1])
    return _lerp(float(part[below]), float(part[above]), virtual - below)


def _lerp(a: float, b: float, t: float) -> float:
    """numpy's ``_lerp``: from the nearer end, so the result stays within [a, b]."""
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t
