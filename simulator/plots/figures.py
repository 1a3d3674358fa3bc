"""Shared figure plumbing: a headless figure, atomic PNG + SVG saving, CSV columns as floats."""
from __future__ import annotations

import csv
import os
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

FORMATS = ("png", "svg")
SLO_STYLE = {"color": "crimson", "linestyle": "--", "linewidth": 1.0}
SLO_LABEL_PREFIX = "SLO"


def pyplot():
    """pyplot, on the headless Agg backend unless the caller (a notebook) already chose one."""
    import matplotlib
    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")   # files only: no display needed in CI or over ssh
    import matplotlib.pyplot as plt
    return plt


def new_figure(**kwargs):
    """A figure to draw and save: pyplot's when pyplot is loaded (so a notebook shows it), else a
    bare one on the Agg canvas (writing a file needs neither pyplot nor its figure manager)."""
    if "matplotlib.pyplot" in sys.modules:
        return pyplot().figure(**kwargs)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(**kwargs)
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig, base: Path, formats: tuple[str, ...] = FORMATS) -> list[Path]:
    """``base`` without suffix -> ``base.png``, ``base.svg``; each written whole or not at all."""
    base.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = base.with_name(f"{base.name}.{fmt}")
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            import matplotlib
            # SVG ids are random unless salted: a fixed salt gives the same bytes for the same data.
            with matplotlib.rc_context({"svg.hashsalt": "servesim"}):
                fig.savefig(tmp, dpi=110, format=fmt, metadata=_metadata(fmt))
            os.replace(tmp, path)
        except BaseException:   # Ctrl-C while drawing: no temp file left behind
            tmp.unlink(missing_ok=True)
            raise
        paths.append(path)
    if "matplotlib.pyplot" in sys.modules:   # a pyplot figure stays open until closed
        pyplot().close(fig)
    return paths


def _metadata(fmt: str) -> dict:
    # SVG embeds a date by default; leave it out so the same data gives the same bytes.
    return {"Date": None} if fmt == "svg" else {}


def read_columns(path: Path, names: Sequence[str]) -> dict[str, np.ndarray]:
    """The ``names`` columns of a results CSV (those the file lacks are left out) as floats (empty or
    non-numeric cells are NaN)."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, [])
        rows = list(reader)
    wanted = [n for n in names if n in header]
    return {name: _floats([r[i] for r in rows]) for name, i in ((n, header.index(n)) for n in wanted)}


def _floats(cells: list[str]) -> np.ndarray:
    try:
        return np.array([c or "nan" for c in cells], dtype=np.float64)
    except ValueError:   # a non-numeric cell (e.g. a label): NaN for that cell only
        return np.array([_float(c) for c in cells], dtype=np.float64)


def _float(cell: str) -> float:
    try:
        return float(cell)
    except ValueError:
        return float("nan")


def draw_slo(ax, value_ms: float | None, name: str) -> None:
    if value_ms is not None:
        ax.axhline(value_ms, label=f"{SLO_LABEL_PREFIX} {name} {value_ms:g} ms", **SLO_STYLE)
