"""Merge several harness passes over the same grid into one timings.csv + meta.json.

    python calibration/data/cpu-tiny-llama/merge_passes.py OUT_DIR PASS_DIR [PASS_DIR ...]

On a shared CPU a burst of other work can slow every repetition of one shape; passes minutes
apart, merged, let the per-shape median (cost_models/importers/harness.py) ride over such bursts.
Repetitions are renumbered pass after pass (rep = pass * repeats + rep); meta.json is the first
pass's, with a ``passes`` list (date, elapsed, load average before and after each pass).
"""
from __future__ import annotations

import csv
import json
import sys
from pathlib import Path


def merge(out_dir: Path, pass_dirs: list[Path]) -> None:
    metas = [json.loads((p / "meta.json").read_text()) for p in pass_dirs]
    if any(m["grid"] != metas[0]["grid"] or not m["completed"] for m in metas):
        raise SystemExit("passes differ in grid or did not complete")
    rows, fields = [], None
    for index, (pass_dir, meta) in enumerate(zip(pass_dirs, metas)):
        with open(pass_dir / "timings.csv", newline="") as f:
            reader = csv.DictReader(f)
            fields = reader.fieldnames
            for row in reader:
                row["rep"] = str(index * meta["repeats"] + int(row["rep"]))
                rows.append(row)
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "timings.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    meta = dict(metas[0])
    meta["passes"] = [{"date": m["date"], "elapsed_s": m["elapsed_s"], **_load(p)}
                      for m, p in zip(metas, pass_dirs)]
    meta["num_rows"] = len(rows)
    (out_dir / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")


def _load(pass_dir: Path) -> dict:
    """load_before.txt / load_after.txt beside a pass: `date -u` then /proc/loadavg."""
    out = {}
    for when in ("before", "after"):
        path = pass_dir / f"load_{when}.txt"
        if path.is_file():
            out[f"loadavg_{when}"] = " ".join(path.read_text().split()[1:4])
    return out


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    merge(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]])
