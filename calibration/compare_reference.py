"""Compare our timings with a reference ``steps.csv`` (e.g. ../shared/reference/h200/steps.csv).

    python -m calibration.compare_reference TIMINGS_DIR REF_STEPS_CSV [--model M] [--mode cuda_graph]

Our median per shape and mode is joined with the reference ``median_ms`` on the shared shape
columns (a shape measured in several reference runs gets the median of their medians). Prints, per
kind and mode, the number of shapes, the median ratio ours/reference, the MAPE and the largest
|error|, and writes ``compare.csv`` into TIMINGS_DIR. Needs only the standard library and click.
"""
from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from pathlib import Path

import click

from calibration.output import write_csv_atomic

SHAPE_COLUMNS = ("kind", "chunk", "prefill_ctx", "n_decode", "decode_ctx", "tokens")
COMPARE_COLUMNS = ("model", *SHAPE_COLUMNS, "mode", "ours_ms", "ref_ms", "ratio", "error_pct")

Key = tuple  # (model, *SHAPE_COLUMNS, mode), the shape sizes as ints


def _key(row: dict, model: str | None = None) -> Key:
    return (model or row["model"], row["kind"], *(int(row[c]) for c in SHAPE_COLUMNS[1:]),
            row["mode"])


def our_medians(timings_csv: Path, model: str | None = None) -> dict[Key, float]:
    """Median time_ms per shape and mode; ``model`` renames our rows (to match a reference name)."""
    times: dict[Key, list[float]] = defaultdict(list)
    with open(timings_csv, newline="") as f:
        for row in csv.DictReader(f):
            times[_key(row, model)].append(float(row["time_ms"]))
    return {k: statistics.median(v) for k, v in times.items()}


def reference_medians(steps_csv: Path) -> dict[Key, float]:
    medians: dict[Key, list[float]] = defaultdict(list)
    with open(steps_csv, newline="") as f:
        for row in csv.DictReader(f):
            medians[_key(row)].append(float(row["median_ms"]))
    return {k: statistics.median(v) for k, v in medians.items()}


def compare(ours: dict[Key, float], ref: dict[Key, float], mode: str | None = None) -> list[dict]:
    rows = []
    for key in sorted(set(ours) & set(ref)):
        if mode is not None and key[-1] != mode:
            continue
        ratio = ours[key] / ref[key]
        rows.append({**dict(zip(("model", *SHAPE_COLUMNS, "mode"), key)),
                     "ours_ms": round(ours[key], 4), "ref_ms": round(ref[key], 4),
                     "ratio": round(ratio, 4), "error_pct": round(100 * (ratio - 1), 2)})
    return rows


def summarize(rows: list[dict]) -> list[dict]:
    """Per (kind, mode): n shapes, median ratio, MAPE and max |error| in percent."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["kind"], r["mode"])].append(r)
    summary = []
    for (kind, mode), rs in sorted(groups.items()):
        errors = [abs(r["error_pct"]) for r in rs]
        summary.append({"kind": kind, "mode": mode, "n": len(rs),
                        "median_ratio": statistics.median(r["ratio"] for r in rs),
                        "mape_pct": statistics.fmean(errors), "max_abs_error_pct": max(errors)})
    return summary


def format_summary(summary: list[dict]) -> str:
    header = f"{'kind':<8} {'mode':<11} {'n':>3} {'median ratio':>12} {'MAPE %':>7}"
    lines = [f"{header} {'max |err| %':>11}"]
    for s in summary:
        lines.append(f"{s['kind']:<8} {s['mode']:<11} {s['n']:>3} {s['median_ratio']:>12.3f} "
                     f"{s['mape_pct']:>7.1f} {s['max_abs_error_pct']:>11.1f}")
    return "\n".join(lines)


def write_compare_csv(rows: list[dict], path: Path) -> None:
    write_csv_atomic(path, COMPARE_COLUMNS, rows)


def timings_file(timings_dir: Path) -> Path:
    """timings.csv, or the .partial of a run that was stopped before it finished."""
    for name in ("timings.csv", "timings.csv.partial"):
        if (timings_dir / name).is_file():
            return timings_dir / name
    raise click.UsageError(f"TIMINGS_DIR: {timings_dir} has no timings.csv (nor .partial)")


@click.command()
@click.argument("timings_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("ref_steps_csv", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--model", default=None, help="Reference model to compare with (default: the model "
              "named in our timings).")
@click.option("--mode", type=click.Choice(("eager", "cuda_graph")), default=None,
              help="Compare one mode only (default: both).")
def main(timings_dir: Path, ref_steps_csv: Path, model: str | None, mode: str | None) -> None:
    rows = compare(our_medians(timings_file(timings_dir), model),
                   reference_medians(ref_steps_csv), mode)
    if not rows:
        raise click.UsageError("no shape of TIMINGS_DIR matches REF_STEPS_CSV (check --model)")
    write_compare_csv(rows, timings_dir / "compare.csv")
    click.echo(format_summary(summarize(rows)))
    click.echo(f"wrote {timings_dir / 'compare.csv'} ({len(rows)} shapes)")


if __name__ == "__main__":
    main()
