"""A run's result files, written by pyarrow: ``requests.csv``, ``steps.csv`` (or ``.parquet``)
and ``summary.json``, in a folder that appears whole or not at all.

The tables are written a chunk at a time as the run goes (appended CSV, or a Parquet row group
per chunk) into a staging folder (atomic.py), renamed into place once the summary is written; any
failure removes the staging folder. pyarrow formats and writes a chunk without holding the GIL,
so each chunk is written on a thread while the run goes on, one chunk per table at a time. CSV
floats are pyarrow's shortest round-trip text (an integral value without ".0"); JSON keys are
sorted and floats their repr, so a seed gives the same bytes.
"""
from __future__ import annotations

import json
import math
import os
import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from simulator.results.atomic import atomic_write, put_in_place, staging_folder
from simulator.results.columns import ALL_STEP_DTYPES, OPTIONAL_STEP_COLUMNS, REQUEST_COLUMNS, STEP_COLUMNS

REQUESTS, STEPS, SUMMARY_JSON = "requests", "steps", "summary.json"
FORMATS = ("csv", "parquet")


class TableFile:
    """One table written in chunks of columns (a dict of numpy arrays, in ``names`` order)."""

    def __init__(self, path: Path, names: tuple[str, ...], dtypes: dict, file_format: str):
        import pyarrow as pa
        self.path, self.names, self.format = path, names, file_format
        self.schema = pa.schema([(name, pa.from_numpy_dtype(dtypes[name])) for name in names])
        self._writer = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=path.name)
        self._writing: Future | None = None

    def write(self, columns: dict[str, np.ndarray]) -> None:
        import pyarrow as pa
        batch = pa.RecordBatch.from_arrays(
            [_arrow_column(columns[name], self.missing(name, columns)) for name in self.names],
            schema=self.schema)
        writer = self._open()
        self.wait()
        self._writing = self._thread.submit(writer.write_batch, batch)

    def wait(self) -> None:
        """Until the chunk being written is written (raising what writing it raised)."""
        if self._writing is not None:
            writing, self._writing = self._writing, None
            writing.result()

    def missing(self, name: str, columns: dict) -> np.ndarray | None:
        """Which cells of a column are empty (none by default)."""
        return None

    def close(self) -> None:
        try:
            self.wait()
            self._open().close()
        finally:
            self._thread.shutdown()

    def _open(self):
        if self._writer is None:
            if self.format == "csv":
                import pyarrow.csv as pv
                options = pv.WriteOptions(quoting_header="none")   # names as they are, unquoted
                self._writer = pv.CSVWriter(self.path, self.schema, write_options=options)
            else:
                import pyarrow.parquet as pq
                self._writer = pq.ParquetWriter(self.path, self.schema)
        return self._writer


def _arrow_column(values: np.ndarray, missing: np.ndarray | None = None):
    """A numpy column as a pyarrow array over the same memory (from_buffers: pa.array would
    import pandas); ``missing`` marks empty cells."""
    import pyarrow as pa
    values = np.ascontiguousarray(values)
    validity = None if missing is None else pa.py_buffer(np.packbits(~missing, bitorder="little"))
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values),
                                 [validity, pa.py_buffer(values)])


class StepFile(TableFile):
    """steps.csv: STEP_COLUMNS, then the optional columns the run's chunks carry (its first
    chunk, before the header is written, decides)."""

    def __init__(self, path: Path, file_format: str):
        super().__init__(path, STEP_COLUMNS, ALL_STEP_DTYPES, file_format)

    def write(self, columns: dict[str, np.ndarray]) -> None:
        extra = tuple(name for name in OPTIONAL_STEP_COLUMNS if name in columns)
        if self._writer is None and extra:
            import pyarrow as pa
            self.names = STEP_COLUMNS + extra
            for name in extra:
                self.schema = self.schema.append(pa.field(name, pa.int64()))
        super().write(columns)


class RequestFile(TableFile):
    """requests.csv: the table's rows with TTFT, TPOT and E2EL in ms (REQUEST_COLUMNS)."""

    def __init__(self, path: Path, file_format: str):
        dtypes = {name: np.float64 for name in REQUEST_COLUMNS}
        dtypes.update(request_id=np.int64, num_prompt_tokens=np.int64, num_output_tokens=np.int64,
                      num_preemptions=np.int64, num_cached_tokens=np.int64)
        super().__init__(path, REQUEST_COLUMNS, dtypes, file_format)

    def write(self, rows: dict[str, np.ndarray]) -> None:
        super().write(request_file_columns(rows))

    def missing(self, name: str, columns: dict) -> np.ndarray | None:
        return columns["num_output_tokens"] <= 1 if name == "tpot_ms" else None   # no TPOT


def request_file_columns(rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """REQUEST_COLUMNS from a request table's columns (TPOT missing where out <= 1)."""
    from simulator.results.summary import latency_arrays_s
    ttft_s, tpot_s, e2el_s = latency_arrays_s(rows["arrival_s"], rows["first_token_s"],
                                              rows["last_token_s"], rows["num_output_tokens"])
    return {**rows, "ttft_ms": ttft_s * 1000,
            "tpot_ms": np.where(rows["num_output_tokens"] > 1, tpot_s * 1000, np.nan),   # NaN: none
            "e2el_ms": e2el_s * 1000, "client_queue_ms": rows["client_queue_s"] * 1000}


class ResultFolder:
    """A run's result folder: ``steps`` and ``requests`` take chunks as the run goes;
    ``finish(summary)`` writes the summary and puts the folder in place (replacing an older
    one). Leaving the ``with`` block without ``finish`` leaves no folder behind."""

    def __init__(self, result_dir: str | os.PathLike, file_format: str = "csv"):
        if file_format not in FORMATS:
            raise ValueError(f"--format: {file_format!r} is not one of {', '.join(FORMATS)}")
        self.target = Path(result_dir)
        if self.target.exists() and not self.target.is_dir():
            raise ValueError(f"result_dir: {str(self.target)!r} exists and is not a folder")
        self.format = file_format
        self._staging: Path | None = None

    def __enter__(self) -> "ResultFolder":
        self._staging = staging_folder(self.target)
        self.steps = StepFile(self._staging / f"{STEPS}.{self.format}", self.format)
        self.requests = RequestFile(self._staging / f"{REQUESTS}.{self.format}", self.format)
        return self

    def finish(self, summary: dict) -> Path:
        self.steps.close()
        self.requests.close()
        atomic_write(self._staging / SUMMARY_JSON, lambda f: f.write(summary_json(summary)))
        put_in_place(self._staging, self.target)
        self._staging = None
        return self.target

    def __exit__(self, *exc_info) -> None:
        if self._staging is not None:
            for table in (self.steps, self.requests):
                table._thread.shutdown()   # a chunk still being written goes on into the staging folder
            shutil.rmtree(self._staging, ignore_errors=True)


def summary_json(summary: dict) -> str:
    """Deterministic JSON: sorted keys, repr floats, non-finite floats as strings (vLLM's "inf")."""
    return json.dumps(_jsonable(summary), sort_keys=True, indent=2, allow_nan=False) + "\n"


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)   # "inf", "-inf", "nan": strict JSON has no such numbers
    return value
