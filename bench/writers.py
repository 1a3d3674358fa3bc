"""pyarrow against polars on the result tables' job (issue 17 chose the writer by this).

    python bench/writers.py [--rows 1000000] [--rounds 5]

Writes a table shaped like requests.csv (9 float and 5 integer columns of random values) in
chunks of 65,536 rows: servesim's own TableFile (pyarrow's CSVWriter or ParquetWriter, each chunk
written on a thread), and polars writing each chunk's DataFrame to one open file (CSV) or the
whole table (Parquet: polars has no writer that appends row groups). Rounds interleaved, order
reversed every other one; one line per writer, median wall seconds and the file's size; then each
library's import in a fresh interpreter (median of 5). polars is not a servesim dependency:
without it only the pyarrow lines print.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CHUNK_ROWS = 65_536


def table(num_rows: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    columns = {f"f{i}": rng.random(num_rows) * 100 for i in range(9)}
    columns.update({f"i{i}": rng.integers(0, 4000, num_rows) for i in range(5)})
    return columns


def chunks(columns: dict, num_rows: int):
    for start in range(0, num_rows, CHUNK_ROWS):
        yield {k: v[start:start + CHUNK_ROWS] for k, v in columns.items()}


def pyarrow_writer(kind: str):
    """servesim's own writer (simulator/results/files.py: pyarrow, a chunk on a thread)."""
    from simulator.results.files import TableFile

    def write(columns: dict, num_rows: int, path: Path) -> None:
        file = TableFile(path, tuple(columns), {k: v.dtype for k, v in columns.items()}, kind)
        for chunk in chunks(columns, num_rows):
            file.write(chunk)
        file.close()
    return write


def polars_writer(kind: str):
    import polars as pl

    def write(columns: dict, num_rows: int, path: Path) -> None:
        if kind == "parquet":
            pl.DataFrame(columns).write_parquet(path)
            return
        with open(path, "wb") as f:
            for i, chunk in enumerate(chunks(columns, num_rows)):
                pl.DataFrame(chunk).write_csv(f, include_header=i == 0)
    return write


def import_s(module: str) -> float:
    times = []
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"import {module}"], check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    writers = {f"pyarrow_{k}": pyarrow_writer(k) for k in ("csv", "parquet")}
    modules = ["pyarrow.csv"]
    try:
        writers.update({f"polars_{k}": polars_writer(k) for k in ("csv", "parquet")})
        modules.append("polars")
    except ImportError:
        print("polars not installed: pyarrow only")
    columns = table(args.rows)
    walls: dict[str, list[float]] = {name: [] for name in writers}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name in (list(writers) if r % 2 == 0 else list(writers)[::-1]):
                start = time.perf_counter()
                writers[name](columns, args.rows, Path(tmp) / name)
                walls[name].append(time.perf_counter() - start)
        for name, times in walls.items():
            size_mb = (Path(tmp) / name).stat().st_size / 1e6
            print(f"writer={name} rows={args.rows} wall_s={statistics.median(times):.3f} "
                  f"wall_min_s={min(times):.3f} size_mb={size_mb:.1f}")
    for module in modules:
        print(f"import={module} wall_s={import_s(module):.3f}")


if __name__ == "__main__":
    main()
