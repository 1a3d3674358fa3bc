"""Fewer points per line, the same picture: a figure is ~1,000 pixels wide, so more points only
cost drawing time and file size.

- ``cdf_points``: the empirical CDF at evenly spaced ranks of the sorted samples (exact points of
  it, first and last sample included), at most ``MAX_CDF_POINTS``.
- ``envelope``: a time series cut into equal time buckets, each keeping its lowest and its highest
  sample at their own times (so every spike and dip still shows, at the pixel where it happened),
  plus the first and last samples, at most ``MAX_SERIES_POINTS``.
- ``thin_events``: marked events (steps that preempted), at most one per time bucket: the biggest.
"""
from __future__ import annotations

import numpy as np

MAX_CDF_POINTS = 1_000
MAX_SERIES_POINTS = 2_000
MAX_EVENTS = 1_000


def cdf_points(samples: np.ndarray, max_points: int = MAX_CDF_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(sorted values, fraction of samples <= each): every sample up to ``max_points``, else
    ``max_points`` evenly spaced ranks from the smallest (1/n) to the largest (1.0)."""
    x = np.sort(np.asarray(samples, dtype=np.float64))
    n = len(x)
    if n <= max_points:
        ranks = np.arange(n)
    else:
        ranks = np.unique(np.rint(np.linspace(0, n - 1, max(2, max_points))).astype(np.int64))
    return x[ranks], (ranks + 1) / n


def envelope(t: np.ndarray, y: np.ndarray,
             max_points: int = MAX_SERIES_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """``(t, y)`` as is up to ``max_points``; else per time bucket its min and max samples, in
    their original order, with the first and last samples: at most ``max_points`` points."""
    t, y = np.asarray(t), np.asarray(y)
    n = len(t)
    if n <= max_points:
        return t, y
    bucket = _buckets(t, max(1, (max_points - 2) // 2))
    order = np.lexsort((y, bucket))   # by bucket, then by value: each bucket's min first, max last
    sorted_buckets = bucket[order]
    starts = np.flatnonzero(np.r_[True, sorted_buckets[1:] != sorted_buckets[:-1]])
    ends = np.r_[starts[1:] - 1, n - 1]
    keep = np.unique(np.concatenate((order[starts], order[ends], [0, n - 1])))
    return t[keep], y[keep]


def thin_events(t: np.ndarray, weight: np.ndarray, max_points: int = MAX_EVENTS) -> np.ndarray:
    """Indices of the events (``weight > 0``): all up to ``max_points``, else the biggest one per
    time bucket (``max_points`` buckets), in time order."""
    hit = np.flatnonzero(np.asarray(weight) > 0)
    if len(hit) <= max_points:
        return hit
    bucket = _buckets(np.asarray(t)[hit], max_points)
    order = np.lexsort((np.asarray(weight)[hit], bucket))   # each bucket's biggest last
    sorted_buckets = bucket[order]
    ends = np.flatnonzero(np.r_[sorted_buckets[1:] != sorted_buckets[:-1], True])
    return np.sort(hit[order[ends]])


def _buckets(t: np.ndarray, count: int) -> np.ndarray:
    """Each time's bucket among ``count`` equal spans of [min t, max t]."""
    t0, span = float(np.min(t)), float(np.max(t) - np.min(t))
    if not span > 0:
        return np.zeros(len(t), dtype=np.int64)
    return np.minimum(((t - t0) / span * count).astype(np.int64), count - 1)
