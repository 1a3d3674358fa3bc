"""The rules every plot follows, each in one function (issue 22):

- curves that are exactly equal are drawn once and named together (``identical_groups``,
  ``draw_group_kwargs``), never one hidden under the other;
- an axis is logarithmic only where its positive values span a decade (``spans_decade``), and its
  tick labels are plain numbers either way (``set_scale``, ``plain_number``);
- a panel with nothing to show is left out (``has_data``), and the layout closes up
  (``grid_axes``);
- small labels beside markers never overlap (``place_point_labels``);
- one legend entry per label, gathered over panels (``legend_entries``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

DECADE = 10.0   # max/min of the positive values at or above which an axis goes logarithmic
IDENTICAL = "(identical)"


def spans_decade(values) -> bool:
    """The positive finite values reach a factor of ``DECADE``: 9.9 -> False, 10 -> True."""
    x = np.asarray(values, dtype=np.float64).ravel()
    x = x[np.isfinite(x) & (x > 0)]
    return bool(x.size) and float(x.max()) >= DECADE * float(x.min())


def plain_number(value: float, _pos=None) -> str:
    """A tick label without exponents: 0.1, 1, 10, 1,000, 0.00002 (``_pos``: FuncFormatter's)."""
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else ""
    if abs(value) >= 1000 or float(value).is_integer():
        return f"{value:,.0f}"
    return np.format_float_positional(value, precision=3, unique=False, fractional=False,
                                      trim="-")


def round_number(value: float, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits, as a plain number (224,000; 0.5; 12.3)."""
    if value == 0 or not math.isfinite(value):
        return plain_number(value)
    return plain_number(float(f"{value:.{digits}g}"))


def set_scale(ax, axis: str, values, counts: bool = False) -> bool:
    """``axis`` ("x" or "y") logarithmic where ``spans_decade(values)``, else linear; plain tick
    labels either way. ``counts``: the data include zeros (queue lengths), so the log axis is
    linear below 1 (symlog) and 0 stays on the picture. Returns whether the axis is logarithmic."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullLocator
    scale_axis = ax.xaxis if axis == "x" else ax.yaxis
    if not spans_decade(values):
        ax.ticklabel_format(axis=axis, style="plain", useOffset=False)
        if counts:   # no 2.5 requests
            scale_axis.set_major_locator(MaxNLocator(nbins="auto", integer=True))
        return False
    if counts:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("symlog", linthresh=1.0, linscale=0.5)
    else:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
        scale_axis.set_major_locator(LogLocator(subs=_log_subs(values)))
    scale_axis.set_major_formatter(FuncFormatter(plain_number))
    scale_axis.set_minor_locator(NullLocator())   # unlabelled ticks only clutter (and cost time)
    return True


def _log_subs(values) -> tuple[float, ...]:
    """Ticks per decade: 1-2-5 over one or two decades, 1-3 up to three, then decades only."""
    x = np.asarray(values, dtype=np.float64).ravel()
    x = x[np.isfinite(x) & (x > 0)]
    decades = math.log10(float(x.max()) / float(x.min()))
    return (1.0, 2.0, 5.0) if decades <= 1.5 else (1.0, 3.0) if decades <= 3 else (1.0,)


def has_data(arrays: Iterable, zero_is_nothing: bool = False) -> bool:
    """A panel shows something: some array has a finite value (a non-zero one where zeros mean
    nothing happened, as an always-empty queue or no preemptions)."""
    for a in arrays:
        x = np.asarray(a, dtype=np.float64)
        x = x[np.isfinite(x)]
        if x.size and (not zero_is_nothing or np.any(x != 0)):
            return True
    return False


@dataclass(frozen=True)
class CurveGroup:
    """Items whose data are exactly equal: drawn once, from ``index`` (the first of them)."""
    labels: tuple[str, ...]
    index: int
    members: tuple[int, ...]

    @property
    def label(self) -> str:
        if len(self.labels) == 1:
            return self.labels[0]
        return f"{' = '.join(self.labels)} {IDENTICAL}"


def identical_groups(labels: Sequence[str], data: Sequence[Sequence]) -> list[CurveGroup]:
    """Group items whose arrays (``data[i]``: x, y and whatever else is drawn) are all exactly
    equal (``np.array_equal``, NaN equal to NaN), in order of first appearance."""
    arrays = [tuple(np.asarray(a, dtype=np.float64) for a in d) for d in data]
    groups: list[list[int]] = []
    for i, item in enumerate(arrays):
        for group in groups:
            first = arrays[group[0]]
            if len(first) == len(item) and all(
                    np.array_equal(a, b, equal_nan=True) for a, b in zip(first, item)):
                group.append(i)
                break
        else:
            groups.append([i])
    return [CurveGroup(tuple(labels[i] for i in g), g[0], tuple(g)) for g in groups]


def draw_group_kwargs(group: CurveGroup, colors: Sequence[str]) -> dict:
    """Line style of a group: its own colour; identical curves dashed in their first two members'
    colours, so the merged line reads as both."""
    kwargs = {"color": colors[group.index], "label": group.label}
    if len(group.members) > 1:
        kwargs.update(linestyle=(0, (4, 3)), gapcolor=colors[group.members[1]])
    return kwargs


def default_colors(n: int) -> list[str]:
    return [f"C{i % 10}" for i in range(n)]


def legend_entries(axes) -> dict[str, object]:
    """Label -> first handle over all ``axes``, leaving out matplotlib's unlabelled artists."""
    entries: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if not label.startswith("_"):
                entries.setdefault(label, handle)
    return entries


def grid_axes(fig, per_row: Sequence[int]) -> list[list]:
    """Rows of axes, ``per_row[i]`` panels in row i; a row of none is left out and a row of
    fewer panels shares the width among them, so no empty axes are drawn."""
    per_row = [n for n in per_row if n > 0]
    return [[fig.add_subplot(len(per_row), n, r * n + c + 1) for c in range(n)]
            for r, n in enumerate(per_row)]


def rows_of(count: int, ncols: int) -> list[int]:
    """``count`` panels in rows of ``ncols``: [2, 2], [2, 1], ..."""
    return [min(ncols, count - i) for i in range(0, count, ncols)]


LABEL_OFFSETS_PT = ((4, 3), (4, -10), (-4, 3), (-4, -10))   # right/left of the marker, up/down
CHAR_WIDTH_EM = 0.65   # a digit is about 0.64 em wide in matplotlib's default font (DejaVu Sans)


def place_point_labels(ax, points, fontsize: float = 7.0) -> list:
    """Small labels next to markers, ``points``: (x, y, text, color) in data coordinates. Each
    takes the first spot beside its marker that overlaps no label already placed in ``ax`` and
    is left out when all four do, so no two labels overlap. Call once the axes' limits and size
    are final (after the layout)."""
    to_px = ax.transData.transform
    pt = ax.figure.dpi / 72.0
    placed: list[tuple[float, float, float, float]] = []
    texts = []
    for x, y, text, color in points:
        if not (math.isfinite(x) and math.isfinite(y)):
            continue
        px, py = to_px((x, y))
        w, h = CHAR_WIDTH_EM * fontsize * len(text) * pt, fontsize * pt
        for dx, dy in LABEL_OFFSETS_PT:
            x0 = px + dx * pt - (w if dx < 0 else 0.0)
            box = (x0, py + dy * pt, x0 + w, py + dy * pt + h)
            if not any(_overlap(box, other) for other in placed):
                placed.append(box)
                texts.append(ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points",
                                         ha="right" if dx < 0 else "left", va="bottom",
                                         fontsize=fontsize, color=color))
                break
    return texts


def _overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
