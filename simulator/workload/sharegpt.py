"""Lengths drawn from the packaged ShareGPT table (data/sharegpt_lengths.csv; data/README.md names
its source: 300 ShareGPT requests, Llama-3.1-8B tokenizer counts).

- ``prompt_len: {kind: sharegpt}`` / ``output_len: {kind: sharegpt}``: one field's column, drawn
  independently of the other field (``SharegptLength``);
- ``lengths: {kind: sharegpt}``: whole (prompt, output) rows, so each drawn request keeps the
  pairing of one source request (``SharegptLengths``).

Both draw with the empirical kind's rule (``lengths.resample``) from the table as the empirical
kind reads it. A ``max`` drops the rows above it before drawing (vLLM's ShareGPT sampler drops
too-long requests the same way) rather than clipping, so every drawn length is one of the table's.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from cost_models.options import OPTIONS_CONFIG, PositiveInt
from simulator.workload.lengths import EmpiricalLength, _require_int, invalid, resample

TABLE_PATH = Path(__file__).resolve().parent / "data" / "sharegpt_lengths.csv"
COLUMNS = ("prompt_len", "output_len")
Column = Literal["prompt_len", "output_len"]


def table_column(column: str) -> np.ndarray:
    """One column of the table, in row order (read once, then cached by the empirical kind)."""
    return EmpiricalLength(str(TABLE_PATH), column).values()


def _rows_within(owner: str, limits: dict[str, tuple[str, int | None]]) -> np.ndarray:
    """The table's rows (one per request, in COLUMNS order) whose column is <= its limit, for
    ``limits``: column -> (the option giving the limit, its value or None). A limit that leaves no
    row is the user's error, named by its option."""
    rows = np.stack([table_column(c) for c in COLUMNS], axis=1)
    keep = np.ones(len(rows), dtype=bool)
    for column, (name, limit) in limits.items():
        if limit is None:
            continue
        values = rows[:, COLUMNS.index(column)]
        if limit < values.min():
            raise invalid(f"{owner}.{name}", limit, f">= {values.min()}, the shortest {column} in "
                          f"the ShareGPT table")
        keep &= values <= limit
    if not keep.any():
        names = "/".join(name for name, _ in limits.values())
        given = tuple(limit for _, limit in limits.values())
        raise ValueError(f"{owner}.{names}: {given} is not allowed; together they leave no row of "
                         f"the ShareGPT table: raise one of them")
    return rows[keep]


@dataclass(frozen=True)
class SharegptLength:
    """One field's lengths from the ShareGPT table. ``column`` defaults to the workload field the
    kind is given in (prompt_len or output_len); ``max`` drops longer rows before drawing."""

    kind: Literal["sharegpt"] = field(default="sharegpt", kw_only=True)
    column: Column | None = None
    max: PositiveInt | None = None
    __pydantic_config__ = OPTIONS_CONFIG

    def __post_init__(self) -> None:
        if self.column is not None and self.column not in COLUMNS:
            raise invalid("SharegptLength.column", self.column, f"one of {', '.join(COLUMNS)}")
        if self.max is not None:
            _require_int("SharegptLength", "max", self.max, 1)
        if self.column is not None:
            self.values()   # a max below the column's shortest length fails here, before a run

    def for_field(self, name: str) -> SharegptLength:
        """This kind given in workload field ``name``: its column, unless one was given; errors
        name the field."""
        if self.column is not None:
            return self
        try:
            return dataclasses.replace(self, column=name)
        except ValueError as exc:
            raise ValueError(str(exc).replace("SharegptLength.", f"WorkloadSpec.{name}.", 1)) from None

    def values(self) -> np.ndarray:
        """The lengths this kind draws from: the column's rows at or below ``max``."""
        if self.column is None:
            raise invalid("SharegptLength.column", None, f"one of {', '.join(COLUMNS)} (a workload "
                          f"sets it to the field the kind is given in)")
        rows = _rows_within("SharegptLength", {self.column: ("max", self.max)})
        return rows[:, COLUMNS.index(self.column)]

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return resample(self.values(), n, rng)


@dataclass(frozen=True)
class SharegptLengths:
    """(prompt, output) rows of the ShareGPT table drawn together, keeping their pairing; rows
    longer than ``max_prompt_len`` or ``max_output_len`` are dropped before drawing."""

    kind: Literal["sharegpt"] = field(default="sharegpt", kw_only=True)
    max_prompt_len: PositiveInt | None = None
    max_output_len: PositiveInt | None = None
    __pydantic_config__ = OPTIONS_CONFIG

    def __post_init__(self) -> None:
        for name in ("max_prompt_len", "max_output_len"):
            if getattr(self, name) is not None:
                _require_int("SharegptLengths", name, getattr(self, name), 1)
        self.rows()

    def rows(self) -> np.ndarray:
        """The (prompt_len, output_len) rows this kind draws from."""
        return _rows_within("SharegptLengths", {"prompt_len": ("max_prompt_len", self.max_prompt_len),
                                                "output_len": ("max_output_len", self.max_output_len)})

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, None]:
        """(num_prompt_tokens, max_output_tokens, no token ids) for ``n`` requests."""
        drawn = resample(self.rows(), n, rng)
        return np.ascontiguousarray(drawn[:, 0]), np.ascontiguousarray(drawn[:, 1]), None
