"""The internal forms every importer produces, and the provenance each carries."""
from __future__ import annotations

import csv
import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cost_models.batch_shape import BatchShape


@dataclass(frozen=True)
class Source:
    """Where timings came from: paths (as given) with the sha256 of each file read."""
    description: str
    files: dict[str, str]  # path -> sha256

    def to_json(self) -> dict:
        return {"description": self.description, "files": dict(self.files)}


def sha256_of(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def file_source(description: str, *paths: Path) -> Source:
    return Source(description, {str(p): sha256_of(p) for p in paths})


@dataclass(frozen=True)
class StepTimings:
    """Whole-step times: one BatchShape and one time (seconds) per measured shape."""
    source: Source
    shapes: list[BatchShape]
    time_s: np.ndarray
    model: str = ""
    hardware: str = ""
    mode: str = ""
    notes: dict = field(default_factory=dict)  # importer facts worth keeping (dropped rows, estimates)

    @property
    def families(self) -> list[str]:
        return [s.kind for s in self.shapes]


@dataclass(frozen=True)
class OperatorTables:
    """Kernel times of one tensor-parallel degree (seconds, on one rank).

    layer_ops: operator -> (tokens, time_s) for ONE decoder layer, repeated num_layers times;
    model_ops: whole-model operators against tokens (embedding, final norm);
    sequence_ops: per sampling sequence (lm_head, sampler) against the number of sampled rows;
    attention: (prefill_chunk, kv_prefill, n_decode, kv_decode, time_s) of ONE layer, or None where
    the source has none (Vidur here) and the roofline fills in;
    allreduce: (bytes, time_s) of one all-reduce among tensor_parallel_size ranks, or None;
    moe: (tokens, activated_experts, time_s) of ONE MoE layer's experts, or None (dense models, or
    a source without expert timings).
    """
    source: Source
    model: str
    hardware: str
    tensor_parallel_size: int
    layer_ops: dict[str, tuple[np.ndarray, np.ndarray]]
    model_ops: dict[str, tuple[np.ndarray, np.ndarray]]
    sequence_ops: dict[str, tuple[np.ndarray, np.ndarray]]
    attention: tuple[np.ndarray, ...] | None = None
    allreduce: tuple[np.ndarray, np.ndarray] | None = None
    moe: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    notes: dict = field(default_factory=dict)


def read_csv_columns(path: Path, required: tuple[str, ...]) -> list[dict]:
    """Rows of a CSV file, with a one-line error naming the file if a required column is missing."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    with open(path, newline="") as f:
        reader = csv.DictReader(line for line in f if not line.startswith("#"))
        rows = list(reader)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)} (needs {', '.join(required)})")
    if not rows:
        raise ValueError(f"{path}: no data rows")
    return rows


def number(path: Path, row_index: int, column: str, text: str, allow_zero: bool = True) -> float:
    """A non-negative finite number from a CSV cell, or a one-line error naming file, row and column."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"{path}: row {row_index + 2}, column {column}: {text!r} is not a number") from None
    if math.isnan(value) or math.isinf(value) or value < 0 or (value == 0 and not allow_zero):
        allowed = "a non-negative" if allow_zero else "a positive"
        raise ValueError(f"{path}: row {row_index + 2}, column {column}: {text!r} is not {allowed} finite number")
    return value
