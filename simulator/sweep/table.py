"""``sweep.csv``: one row per run, appended as runs finish, never half-written.

Each finished run is appended as one complete line with a single write, then flushed and fsynced,
so a killed sweep leaves whole rows only; should a kill land inside that write anyway, the torn
tail (a last line without its newline, or with the wrong number of cells) is cut off when the file
is next opened and that run is simply done again. When a sweep completes, the file is rewritten
atomically in plan order (point, seed, scheduler), so its bytes depend on the plan and the results
only, not on which backend or how many workers ran it.

Cells: floats as ``repr`` (shortest exact round trip), None as an empty cell, lists, mappings and
booleans as compact JSON, text as is.
"""
from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from simulator.results.atomic import atomic_write

SWEEP_CSV = "sweep.csv"
KEY_COLUMNS = ("run_key", "scheduler", "seed")
ERROR_COLUMN = "error"   # empty when the run finished; else why it could not (e.g. a livelock)


def format_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return " ".join(str(value).split("\n"))  # one physical line per row


class SweepFileError(ValueError):
    """sweep.csv exists but is not one (no run_key column): one line for the user."""


class SweepTable:
    """The rows of one sweep.csv, keyed by ``run_key``."""

    def __init__(self, path: Path, leading_columns: Iterable[str]):
        self.path = Path(path)
        self.leading = tuple(leading_columns)
        self.header: list[str] = []
        self.rows: dict[str, dict[str, str]] = {}

    def load(self) -> dict[str, dict[str, str]]:
        """Read the rows already done, dropping a torn last line or malformed rows."""
        if not self.path.exists():
            return self.rows
        text = self.path.read_text(encoding="utf-8")
        complete = text[:text.rfind("\n") + 1]
        records = list(csv.reader(io.StringIO(complete)))
        self.header = records[0] if records else []
        if self.header and "run_key" not in self.header:
            raise SweepFileError(f"{self.path}: not a servesim sweep.csv (no run_key column); "
                                 f"move it away or use -o another folder")
        good = [r for r in records[1:] if len(r) == len(self.header)]
        for record in good:
            row = dict(zip(self.header, record))
            self.rows.setdefault(row["run_key"], row)
        if complete != text or len(good) != len(records) - 1 or len(self.rows) != len(good):
            self.rewrite(self.rows.values())   # repair now, before anything is appended
        return self.rows

    def append(self, row: dict[str, Any]) -> None:
        cells = {k: format_cell(v) for k, v in row.items()}
        if not self.header or any(k not in self.header for k in cells):
            self.rows[cells["run_key"]] = cells
            self.rewrite(self.rows.values())   # a new column: the header changes, write it whole
            return
        line = _csv_line([cells.get(c, "") for c in self.header])
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, line.encode("utf-8"))  # one write: the whole row or, if killed, a torn tail
            os.fsync(fd)
        finally:
            os.close(fd)
        self.rows[cells["run_key"]] = cells

    def rewrite(self, rows: Iterable[dict[str, str]]) -> None:
        """Replace the file with these rows (atomically), header = leading columns + the rest."""
        rows = list(rows)
        self.header = _header(self.leading, rows)
        self.rows = {r["run_key"]: r for r in rows}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, lambda f: f.write(
            "".join(_csv_line(cols) for cols in
                    [self.header, *([r.get(c, "") for c in self.header] for r in rows)])))


def _header(leading: tuple[str, ...], rows: list[dict]) -> list[str]:
    """Leading columns, then every other key in order of first appearance (rows in file order)."""
    header = list(leading)
    for name in (k for r in rows for k in r):
        if name not in header:
            header.append(name)
    return header


def _csv_line(cells: list[str]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(cells)
    return buffer.getvalue()


def read_sweep_csv(path: Path) -> list[dict[str, str]]:
    """The complete rows of a sweep.csv as text cells (read only: nothing is repaired)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file (run `servesim sweep` first)")
    text = path.read_text(encoding="utf-8")
    records = list(csv.reader(io.StringIO(text[:text.rfind("\n") + 1])))
    if not records:
        return []
    return [dict(zip(records[0], r)) for r in records[1:] if len(r) == len(records[0])]
