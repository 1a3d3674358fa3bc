"""Shared figure plumbing: a headless pyplot, atomic PNG + SVG saving, CSV columns as floats."""
from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

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


def save_figure(fig, base: Path, formats: tuple[str, ...] = FORMATS) -> list[Path]:
    """``base`` without suffix -> ``base.png``, ``base.svg``; each written whole or not at all."""
    plt = pyplot()
    base.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = base.with_name(f"{base.name}.{fmt}")
        tmp = path.with_name(f".{path.name}.tmp")
        fig.savefig(tmp, dpi=110, format=fmt, metadata=_metadata(fmt))
        os.replace(tmp, path)
        paths.append(path)
    plt.close(fig)
    return paths


def _metadata(fmt: str) -> dict:
    # SVG embeds a date by default; leave it out so the same data gives the same bytes.
    return {"Date": None} if fmt == "svg" else {}


def read_columns(path: Path) -> dict[str, np.ndarray]:
    """A results CSV as float columns (empty cells are NaN)."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, [])
        rows = list(reader)
    return {name: np.array([_float(r[i]) for r in rows], dtype=np.float64)
            for i, name in enumerate(header)}


def _float(cell: str) -> float:
    try:
        return float(cell)
    except ValueError:
        return float("nan")


def draw_slo(ax, value_ms: float | None, name: str) -> None:
    if value_ms is not None:
        ax.axhline(value_ms, label=f"{SLO_LABEL_PREFIX} {name} {value_ms:g} ms", **SLO_STYLE)
