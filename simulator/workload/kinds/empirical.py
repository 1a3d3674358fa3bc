"""``kind: empirical`` lengths: resampled from a file."""
from __future__ import annotations

import csv
import functools
import os
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from cost_models.options import OPTIONS_CONFIG
from simulator.workload.lengths import invalid, parse_length


@dataclass(frozen=True)
class EmpiricalLength:
    """Resample, with replacement, lengths read from a file: one integer per line (blank lines and
    ``#`` comments skipped), or, when ``column`` is given, that column of a CSV file with a header."""

    kind: Literal["empirical"] = field(default="empirical", kw_only=True)
    path: str
    column: str | None = None
    __pydantic_config__ = OPTIONS_CONFIG

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path:
            raise invalid("EmpiricalLength.path", self.path, "a file path")

    def values(self) -> np.ndarray:
        """The lengths in the file (read once per file version, then cached)."""
        try:
            stat = os.stat(self.path)
        except OSError:
            raise ValueError(f"EmpiricalLength.path: file {self.path!r} does not exist or cannot be read") \
                from None
        return _read_lengths(self.path, self.column, stat.st_mtime_ns, stat.st_size)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        values = self.values()
        return values[rng.integers(0, values.size, size=n)]


@functools.lru_cache(maxsize=32)
def _read_lengths(path: str, column: str | None, mtime_ns: int, size: int) -> np.ndarray:
    with open(path, newline="") as f:
        if column is None:
            values = [parse_length(line, f"EmpiricalLength.path: {path}:{i}")
                      for i, line in enumerate(f, 1) if line.strip() and not line.lstrip().startswith("#")]
        else:
            reader = csv.DictReader(f)
            if column not in (reader.fieldnames or []):
                raise ValueError(f"EmpiricalLength.column: {column!r} is not a column of {path}; "
                                 f"its columns are {reader.fieldnames}")
            values = [parse_length(row[column] or "", f"EmpiricalLength.path: {path}:{i}")
                      for i, row in enumerate(reader, 2)]
    if not values:
        raise ValueError(f"EmpiricalLength.path: {path} holds no lengths")
    array = np.asarray(values, dtype=np.int64)
    array.setflags(write=False)  # shared through the cache
    return array
