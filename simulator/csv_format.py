"""Numeric CSV text, byte for byte what ``csv.writer`` writes, at a fraction of its cost.

A result table has millions of cells but far fewer distinct values: a run repeats batch shapes,
queue lengths and KV usages, and each step starts where the previous one ended. So each piece of
rows is written column-wise: every distinct value of a kind is formatted once (a float's ``repr``
is ~1 µs, most of the cost), each cell becomes a code into that table of texts, and a piece's text
is one ``"".join`` over the codes, with the separator already on each text (no per-row join).
"""
from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np


class BlankableColumn:
    """A numeric column with blank cells: ``values[i]`` where ``present[i]``, else "" (None)."""

    def __init__(self, values: np.ndarray, present: np.ndarray):
        self.values, self.present = values, present

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, rows: slice) -> "BlankableColumn":
        return BlankableColumn(self.values[rows], self.present[rows])

    def tolist(self) -> list:
        return [v if p else None for v, p in zip(self.values.tolist(), self.present.tolist())]


def csv_text(header: Sequence[str], columns: Sequence[Sequence]) -> str:
    """A numeric CSV table, byte for byte what ``csv.writer`` writes from the same values: an int
    by ``str``, a float by ``repr`` (shortest round trip), None as an empty cell, LF line ends.

    A column is a sequence of cells, a numeric numpy array or a ``BlankableColumn``."""
    return "".join(csv_chunks(header, columns))


def csv_chunks(header: Sequence[str], columns: Sequence[Sequence],
               chunk_rows: int = 65536) -> Iterator[str]:
    """``csv_text`` in pieces of ``chunk_rows`` rows, so memory stays bounded on long runs."""
    yield ",".join(header) + "\n"
    yield from csv_row_chunks(columns, chunk_rows)


def csv_row_chunks(columns: Sequence[Sequence], chunk_rows: int = 65536) -> Iterator[str]:
    """The rows of ``csv_chunks`` without the header: a table's rows may be written in parts,
    each part's text the same as in the whole table's."""
    num_rows = len(columns[0]) if columns else 0
    for start in range(0, num_rows, chunk_rows):
        piece = [_column_parts(c[start:start + chunk_rows]) for c in columns]
        yield _piece_text(piece, min(chunk_rows, num_rows - start))


def _reprs(bits: np.ndarray) -> list[str]:
    return [*map(repr, bits.view(np.float64).tolist())]


# A column part: "f" (floats) or "i" (ints), their values, and their rows (None: every row).
_Part = tuple[str, np.ndarray, "np.ndarray | None"]
_DTYPES = {"f": np.float64, "i": np.int64}


def _column_parts(values) -> list[_Part]:
    """The cells of a column split by type: a cell keeps its own type's text, as in csv.writer
    (SimPy's clock starts at the int 0, so a time column can hold both 0 and 0.5)."""
    if isinstance(values, BlankableColumn):
        kind = _array_kind(values.values)
        if values.present.all():
            return [(kind, values.values, None)]
        rows = np.flatnonzero(values.present)
        return [(kind, values.values[rows], rows)]
    if isinstance(values, np.ndarray) and values.dtype.kind in "iuf":
        return [(_array_kind(values), values, None)]
    kind_of = {t: _cell_kind(t) for t in set(map(type, values))}
    kinds = set(kind_of.values())
    if len(kinds) == 1:   # the usual case: one type down the whole column
        kind = kinds.pop()
        return [(kind, np.array(values, dtype=_DTYPES[kind]), None)] if kind else []
    row_kinds = np.array([kind_of[type(v)] for v in values])
    cells = np.array(values, dtype=object)
    return [(kind, cells[rows].astype(_DTYPES[kind]), rows) for kind in sorted(kinds - {""})
            for rows in [np.flatnonzero(row_kinds == kind)]]


def _array_kind(values: np.ndarray) -> str:
    return "f" if values.dtype.kind == "f" else "i"


def _cell_kind(cell_type: type) -> str:
    if issubclass(cell_type, (float, np.floating)):
        return "f"
    if issubclass(cell_type, (int, np.integer)) and not issubclass(cell_type, bool):
        return "i"
    if cell_type is type(None):
        return ""
    raise TypeError(f"csv_text: a {cell_type.__name__} cell in a numeric table")


def _piece_text(columns: list[list[_Part]], num_rows: int) -> str:
    """The CSV lines of one piece: each cell's text with its separator, joined once."""
    texts, codes = _cell_codes(columns, num_rows)
    # Every cell ends in "," but a row's last, which ends the line: that column's texts get "\n".
    last = codes[:, -1]
    used = np.zeros(len(texts), dtype=bool)
    used[last] = True
    used_codes = np.flatnonzero(used)
    codes[:, -1] = len(texts) + (np.cumsum(used) - 1)[last]
    cells = np.array([*map(str.__add__, texts, [","] * len(texts)),
                      *(texts[j] + "\n" for j in used_codes.tolist())], dtype=object)
    return "".join(cells.take(codes.ravel()).tolist())


def _cell_codes(columns: list[list[_Part]], num_rows: int) -> tuple[list[str], np.ndarray]:
    """(texts, codes): every cell as an index into ``texts`` (0, the empty text, for a missing
    cell). Each distinct value of a kind is formatted once for all columns; floats are told apart
    by their bits, so -0.0 and 0.0 keep their own ``repr``."""
    texts = [""]
    codes = np.zeros((num_rows, len(columns)), dtype=np.int64)
    for kind in "fi":
        parts = [(c, part) for c, column in enumerate(columns) for part in column if part[0] == kind]
        if not parts:
            continue
        keys = np.concatenate([values.astype(_DTYPES[kind]).view(np.int64) for _, (_, values, _) in parts])
        distinct, inverse = _distinct(keys, dense=kind == "i")
        inverse += len(texts)
        texts.extend(map(str, distinct.tolist()) if kind == "i" else _reprs(distinct))
        offsets = np.cumsum([0] + [len(values) for _, (_, values, _) in parts])
        for (c, (_, _, rows)), start, end in zip(parts, offsets[:-1], offsets[1:]):
            codes[slice(None) if rows is None else rows, c] = inverse[start:end]
    return texts, codes


def _distinct(keys: np.ndarray, dense: bool) -> tuple[np.ndarray, np.ndarray]:
    """(distinct keys, index of each key in them). Counts span a short range: index them
    directly (no sort) when the range is no longer than the data."""
    if dense and len(keys):
        low, high = int(keys.min()), int(keys.max())
        if high - low <= max(len(keys), 1024):
            return np.arange(low, high + 1, dtype=np.int64), keys - low
    return np.unique(keys, return_inverse=True)
