"""Attention from a profiled grid of one layer (LLMServingSim's kernel profiles): the grid tables
and their composition into a step's attention time (cost_models/profiled.py's module docstring
says how). Its own module: a profile whose attention is the roofline's (Vidur's) never loads it.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from cost_models.decode_skew import skewed_time_s


class GridTable:
    """Multilinear interpolation on a product grid, linear in each axis's value (see the module
    docstring); flat below the first point, proportional past the last."""

    def __init__(self, axes: list, values):
        self.axes = [np.asarray(a, float) for a in axes]
        self.coords = [a.tolist() for a in self.axes]
        self._ends = [(float(a[0]), float(a[-1])) for a in self.axes]
        self.values = np.asarray(values, float)
        if self.values.shape != tuple(len(a) for a in self.axes) or not np.isfinite(self.values).all():
            raise ValueError(f"grid table: values of shape {self.values.shape} do not fill axes "
                             f"{[len(a) for a in self.axes]} with finite numbers")
        self._nested = self.values.tolist()  # Python lists: scalar indexing is cheaper than numpy's

    def __call__(self, *point: float) -> float:
        scale, weights = 1.0, []
        for (first, last), coord, v in zip(self._ends, self.coords, point):
            if v > last:
                scale *= v / last if last > 0 else 1.0
                v = last
            u = max(v, first)
            i = min(max(bisect_right(coord, u) - 1, 0), len(coord) - 2)
            weights.append((i, (u - coord[i]) / (coord[i + 1] - coord[i])))
        return scale * _blend(self._nested, weights)

    def to_json(self, names: tuple[str, ...], value_name: str = "seconds") -> dict:
        return {**{n: a.tolist() for n, a in zip(names, self.axes)}, value_name: self.values.tolist()}

    @classmethod
    def from_json(cls, data: dict, names: tuple[str, ...], value_name: str = "seconds") -> "GridTable":
        return cls([data[n] for n in names], data[value_name])


_PREFILL_AXES, _DECODE_AXES = ("chunk", "cached"), ("n_decode", "context")
_MIXED_AXES, _EXPONENT_AXES = ("chunk", "n_decode", "context"), ("chunk", "n_decode")


def _blend(nested, weights) -> float:
    """Multilinear blend of the 2^d corners around a point: recursion over the axes."""
    i, w = weights[0]
    if len(weights) == 1:
        return nested[i] * (1 - w) + nested[i + 1] * w
    low = _blend(nested[i], weights[1:]) if w < 1 else 0.0
    high = _blend(nested[i + 1], weights[1:]) if w > 0 else 0.0
    return low * (1 - w) + high * w


@dataclass(frozen=True)
class AttentionGrid:
    """One layer's attention from a profiled grid; see cost_models/profiled.py's module docstring
    for the composition."""
    per_layer = True   # a TableCostModel adds it to each layer's time (the roofline's counts all)
    prefill: GridTable   # (chunk, cached context)
    decode: GridTable    # (n_decode, context)
    mixed: GridTable     # (chunk, n_decode, context): what decodes add to a prefill on no context
    base_s: float
    exponent: GridTable  # (chunk, n_decode) -> overlap exponent p
    decode_skew: float = 0.0  # alpha of t(mean) + alpha (t(max) - t(mean)) for unequal decode contexts

    def time_s(self, new: np.ndarray, ctx: np.ndarray, counts: tuple, longest_decode: int = 0) -> float:
        """``longest_decode``: the longest context among the step's decodes (0: no skew term)."""
        return skewed_time_s(lambda context: self._at(new, ctx, counts, context), counts[2], counts[1],
                             longest_decode, self.decode_skew)

    def _at(self, new: np.ndarray, ctx: np.ndarray, counts: tuple, decode_context: float) -> float:
        """The step's attention with every decode at ``decode_context``."""
        num_decodes = counts[2]
        if counts[5] == 0:
            return self.decode(num_decodes, decode_context) if num_decodes else 0.0
        if counts[5] == 1:  # one chunk, the usual case: no boolean indexing
            at = int(np.argmax(new))
            chunks, cached = [int(new[at])], [int(ctx[at])]
        else:
            is_prefill = new > 1
            chunks, cached = new[is_prefill].tolist(), ctx[is_prefill].tolist()
        above = sum(self.prefill(c, k) - self.base_s for c, k in zip(chunks, cached))
        if not num_decodes:
            return self.base_s + above
        extra = max(self.mixed(sum(chunks), num_decodes, decode_context), 0.0)
        p = self.exponent(sum(chunks), num_decodes)
        return self.base_s + (max(above, 0.0) ** p + extra ** p) ** (1 / p)

    def to_json(self) -> dict:
        return {"kind": "grid", "base_s": self.base_s,
                "exponent": self.exponent.to_json(_EXPONENT_AXES, "p"),
                "prefill": self.prefill.to_json(_PREFILL_AXES), "decode": self.decode.to_json(_DECODE_AXES),
                "mixed": self.mixed.to_json(_MIXED_AXES)}

    @classmethod
    def from_json(cls, d: dict, decode_skew: float = 0.0) -> "AttentionGrid":
        return cls(GridTable.from_json(d["prefill"], _PREFILL_AXES), GridTable.from_json(d["decode"], _DECODE_AXES),
                   GridTable.from_json(d["mixed"], _MIXED_AXES), float(d["base_s"]),
                   GridTable.from_json(d["exponent"], _EXPONENT_AXES, "p"), float(decode_skew))
