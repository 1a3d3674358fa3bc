"""timings.csv, meta.json and device.csv, written so that a killed run never leaves a file that looks complete.

Rows are appended to ``timings.csv.partial`` shape by shape (a killed run keeps what it measured)
and the file is renamed to ``timings.csv`` only when the run ends; meta.json and device.csv are
replaced atomically.
"""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path

TIMINGS_COLUMNS = ("model", "kind", "chunk", "prefill_ctx", "n_decode", "decode_ctx", "tokens",
                   "mode", "rep", "time_ms")
TIMINGS_FILE = "timings.csv"
META_FILE = "meta.json"
PARTIAL_SUFFIX = ".partial"


class TimingsWriter:
    def __init__(self, out_dir: Path):
        self.final_path = out_dir / TIMINGS_FILE
        self.partial_path = out_dir / (TIMINGS_FILE + PARTIAL_SUFFIX)
        self._file = open(self.partial_path, "w", newline="")
        self._csv = csv.DictWriter(self._file, fieldnames=TIMINGS_COLUMNS)
        self._csv.writeheader()
        self.num_rows = 0

    def append(self, rows: list[dict]) -> None:
        self._csv.writerows(rows)
        self._file.flush()
        os.fsync(self._file.fileno())
        self.num_rows += len(rows)

    def finish(self) -> Path:
        self._file.close()
        os.replace(self.partial_path, self.final_path)
        return self.final_path

    def close(self) -> None:
        """Leaves the .partial file in place (the run did not finish)."""
        if not self._file.closed:
            self._file.close()


def write_csv_atomic(path: Path, columns: tuple[str, ...], rows: list[dict]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)


def write_json_atomic(path: Path, payload: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1, sort_keys=False) + "\n")
    os.replace(tmp, path)
