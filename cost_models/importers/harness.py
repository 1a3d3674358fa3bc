"""Whole-step timings in the harness's shape columns: our ``timings.csv`` and the H200 ``steps.csv``.

Both files describe a step by ``chunk`` (one prefill chunk's new tokens, 0 for none) on top of
``prefill_ctx`` cached tokens, plus ``n_decode`` decodes of ``decode_ctx`` context each. timings.csv
has one row per repetition (``rep``, ``time_ms``), steps.csv one row per shape and run (``median_ms``).
Repeated shapes are merged into their median, so every shape counts once in a fit and in its
held-out error.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from cost_models.batch_shape import BatchShape
from cost_models.importers.forms import StepTimings, file_source, number, read_csv_columns

SHAPE_COLUMNS = ("model", "kind", "chunk", "prefill_ctx", "n_decode", "decode_ctx", "tokens", "mode")
TIME_COLUMNS = ("time_ms", "median_ms")  # timings.csv | steps.csv


def read_step_timings(path: Path, model: str | None = None, mode: str | None = None,
                      hardware: str = "") -> StepTimings:
    """One model's steps in one mode; ``model``/``mode`` may be None when the file holds only one."""
    path = Path(path)
    if path.is_dir():
        path = path / "timings.csv"
    rows = read_csv_columns(path, SHAPE_COLUMNS)
    time_column = next((c for c in TIME_COLUMNS if c in rows[0]), None)
    if time_column is None:
        raise ValueError(f"{path}: missing column time_ms (timings.csv) or median_ms (steps.csv)")
    model = _choose(path, rows, "model", model)
    mode = _choose(path, [r for r in rows if r["model"] == model], "mode", mode)
    grouped: dict[tuple[int, int, int, int], list[float]] = defaultdict(list)
    for i, row in enumerate(rows):
        if row["model"] != model or row["mode"] != mode:
            continue
        key = tuple(int(number(path, i, c, row[c])) for c in ("chunk", "prefill_ctx", "n_decode", "decode_ctx"))
        if key[0] == 0 and key[2] == 0:
            raise ValueError(f"{path}: row {i + 2}: a step with no prefill chunk and no decodes")
        grouped[key].append(number(path, i, time_column, row[time_column], allow_zero=False) / 1e3)
    shapes = [_shape(*key) for key in grouped]
    times = np.array([float(np.median(v)) for v in grouped.values()])
    return StepTimings(file_source(f"whole-step timings ({time_column}), model {model}, mode {mode}", path),
                       shapes, times, model=model, hardware=hardware, mode=mode,
                       notes={"rows_merged_per_shape": "median"})


def _choose(path: Path, rows: list[dict], column: str, wanted: str | None) -> str:
    present = sorted({r[column] for r in rows})
    if wanted is None:
        if len(present) != 1:
            raise ValueError(f"{path}: holds {column}s {', '.join(present)}; choose one")
        return present[0]
    if wanted not in present:
        raise ValueError(f"{path}: no rows with {column} {wanted!r} (present: {', '.join(present) or 'none'})")
    return wanted


def _shape(chunk: int, prefill_ctx: int, n_decode: int, decode_ctx: int) -> BatchShape:
    """The harness's step: one chunk over its cached context, then the decodes; every row samples."""
    new = ([chunk] if chunk else []) + [1] * n_decode
    ctx = ([prefill_ctx] if chunk else []) + [decode_ctx] * n_decode
    return BatchShape.of(new, ctx)
