"""Means over seeds with 95% confidence intervals, and sweep rows grouped into curves.

The interval is Student's t: mean ± t(0.975, n-1) · s / sqrt(n), s the sample standard deviation
over seeds (each seed one independent replicate of the whole run). One seed gives no interval.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

# Two-sided 95% critical values of Student's t by degrees of freedom (standard tables).
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120,
        17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064,
        25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000,
        120: 1.980}
_Z95 = 1.960


def t_critical_95(df: int) -> float:
    """t(0.975, df): the table, linear in 1/df between its rows beyond 30, 1.96 at infinity."""
    if df < 1:
        raise ValueError(f"df: {df} must be >= 1")
    if df in _T95:
        return _T95[df]
    rows = sorted(_T95.items()) + [(math.inf, _Z95)]
    for (df0, t0), (df1, t1) in zip(rows, rows[1:]):
        if df0 < df < df1:
            w = (1 / df0 - 1 / df) / (1 / df0 - (0 if df1 == math.inf else 1 / df1))
            return t0 + w * (t1 - t0)
    return _Z95


@dataclass(frozen=True)
class Estimate:
    mean: float
    half_width: float | None   # of the 95% interval; None with fewer than two seeds
    n: int


def mean_ci95(values: Iterable[float]) -> Estimate:
    x = [float(v) for v in values]
    if not x:
        raise ValueError("mean_ci95: no values")
    n, mean = len(x), math.fsum(x) / len(x)
    if n < 2:
        return Estimate(mean, None, n)
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in x) / (n - 1))
    return Estimate(mean, t_critical_95(n - 1) * sd / math.sqrt(n), n)


@dataclass
class Curve:
    """One scheduler (and one value of every other swept path) along the load axis."""
    label: str
    x: list[float] = field(default_factory=list)
    metrics: dict[str, list[Estimate]] = field(default_factory=dict)


def to_float(cell: str) -> float | None:
    try:
        return float(cell)
    except (TypeError, ValueError):
        return None


def short_value(cell: str) -> str:
    """A swept value for a legend: ``{"kind":"fixed","value":128}`` -> ``fixed 128``; a block
    swept to null (e.g. ``engine.speculative``: off) is an empty cell -> ``none``."""
    if cell == "":
        return "none"
    try:
        value = json.loads(cell)
    except (TypeError, ValueError):
        return cell
    if isinstance(value, dict):
        return " ".join(str(v) for v in value.values())
    return cell


# Legends name a swept path by its last field; these are too long for a legend.
SHORT_NAMES = {"gpu_memory_utilization": "gpu_util", "tensor_parallel_size": "TP",
               "max_num_batched_tokens": "budget"}


def short_key(key: str) -> str:
    last = key.split(".")[-1]
    return SHORT_NAMES.get(last, last)


def point_label(row: dict[str, str], keys: Sequence[str], sep: str = ", ") -> str:
    return sep.join(f"{short_key(k)}={short_value(row[k])}" for k in keys)


def series_label(row: dict[str, str], keys: Sequence[str]) -> str:
    extra = point_label(row, keys)
    return f"{row['scheduler']} ({extra})" if extra else row["scheduler"]


def curves(rows: list[dict[str, str]], x_key: str, param_keys: Sequence[str],
           metrics: Sequence[str]) -> list[Curve]:
    """Rows of finished runs grouped by series, then by x; each metric averaged over seeds."""
    others = [k for k in param_keys if k != x_key]
    groups: dict[str, dict[float, list[dict]]] = {}
    for row in rows:
        x = to_float(row.get(x_key, ""))
        if row.get("error") or x is None:
            continue
        groups.setdefault(series_label(row, others), {}).setdefault(x, []).append(row)
    out = []
    for label, by_x in groups.items():
        curve = Curve(label, sorted(by_x))
        for metric in metrics:
            curve.metrics[metric] = [_estimate(by_x[x], metric) for x in curve.x]
        out.append(curve)
    return out


def _estimate(rows: list[dict], metric: str) -> Estimate:
    values = [v for v in (to_float(r.get(metric, "")) for r in rows) if v is not None]
    return mean_ci95(values) if values else Estimate(math.nan, None, 0)
