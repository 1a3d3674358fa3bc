"""The data of `servesim report DIR`'s page, gathered from a result folder's files only.

- a run folder (``<scheduler>/summary.json`` with ``requests.csv`` or ``.parquet``, as `servesim
  run` writes; or DIR itself being one): per scheduler its summary, latency CDFs (TTFT, TPOT,
  E2EL) and engine series (running, waiting, KV usage over step end times; a line per replica
  where the run has several, as the PNG plots draw them), both decimated
  (``simulator/results/decimate.py``) so the page's size is bounded whatever the run's length;
- a sweep folder (``sweep.csv``, ``sweep.json``): throughput-vs-latency curves per series, each
  point the mean over seeds with its 95% half-width and labelled by its load (rate or
  concurrency), or by its sweep point where no load axis was swept.

Everything is plain JSON values (non-finite floats become null), in a fixed order: the same files
give the same data.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from simulator.plots.curves import PANELS, X_METRIC, sweep_curves
from simulator.plots.result_dir import sweep_meta
from simulator.plots.run_series import STEP_COLUMNS, engine_state_series, run_series_from_columns
from simulator.results import load
from simulator.results.decimate import cdf_points, envelope
from simulator.results.columns import REPLICA
from simulator.results.files import FORMATS, REQUESTS, SUMMARY_JSON
from simulator.sweep.stats import mean_ci95, point_label, short_key, to_float
from simulator.sweep.table import SWEEP_CSV, read_sweep_csv

# A chart is ~650 px wide: more points than this per line only add bytes to the page.
SERIES_POINTS = 1_000
CDF_POINTS = 1_000
LATENCIES = (("ttft_ms", "TTFT (ms)"), ("tpot_ms", "TPOT (ms)"), ("e2el_ms", "E2EL (ms)"))
ENGINE_SERIES = (("num_running", "running requests"), ("num_waiting", "waiting requests"),
                 ("kv_usage", "KV cache usage (0-1)"))
# The summary table: (summary.json key, column header).
SUMMARY_COLUMNS = (
    ("completed", "done"), ("request_throughput", "req/s"), ("output_throughput", "out tok/s"),
    ("median_ttft_ms", "TTFT p50"), ("p99_ttft_ms", "TTFT p99"),
    ("median_tpot_ms", "TPOT p50"), ("p99_tpot_ms", "TPOT p99"),
    ("median_itl_ms", "ITL p50"), ("p99_itl_ms", "ITL p99"),
    ("median_e2el_ms", "E2EL p50"), ("p99_e2el_ms", "E2EL p99"),
    ("num_preemptions", "preempt"), ("peak_kv_usage", "KV peak"))


def json_safe(value):
    """``value`` with numpy scalars as Python numbers and NaN or infinity as None (JSON has
    neither), containers walked through."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


def run_folders(result_dir: Path) -> list[Path]:
    """DIR itself when it is one scheduler's folder, else its scheduler folders, by name."""
    if _is_run_folder(result_dir):
        return [result_dir]
    return sorted(p for p in result_dir.iterdir() if p.is_dir() and _is_run_folder(p))


def _is_run_folder(path: Path) -> bool:
    return (path / SUMMARY_JSON).is_file() and any(
        (path / f"{REQUESTS}.{fmt}").is_file() for fmt in FORMATS)


def run_data(folder: Path) -> dict:
    """One scheduler's summary, latency CDFs and decimated engine series."""
    try:
        results = load(folder)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{folder}: unreadable result folder ({str(exc).splitlines()[0]})") from None
    requests, steps = results.requests, results.steps
    cdfs = {}
    for column, _ in LATENCIES:
        values = requests[column].to_numpy(dtype=np.float64)
        x, y = cdf_points(values[np.isfinite(values)], CDF_POINTS)
        cdfs[column] = {"x": x.tolist(), "y": y.tolist()}
    series = {column: [] for column, _ in ENGINE_SERIES}
    for name, line in _engine_lines(folder.name, steps, results.summary):
        for column, _ in ENGINE_SERIES:
            t, y = envelope(line.step_end_s, getattr(line, column), SERIES_POINTS)
            series[column].append({"name": name, "t": t.tolist(), "y": y.tolist()})
    # Scalars only: a summary saved with per-request lists (--save-detailed) would grow the page.
    summary = {k: v for k, v in results.summary.items() if not isinstance(v, (list, dict))}
    return {"label": folder.name, "summary": json_safe(summary), "cdfs": json_safe(cdfs),
            "series": json_safe(series), "num_steps": len(steps), "num_requests": len(requests)}


def _engine_lines(label: str, steps, summary: dict) -> list:
    """(name, RunSeries) of each engine-state line: the run's steps (name ""), or each replica's
    where the run has several, as the PNG plots draw them (``engine_state_series``)."""
    columns = {c: steps[c].to_numpy() for c in (*STEP_COLUMNS, REPLICA) if c in steps}
    run = run_series_from_columns(label, {}, columns, summary.get("replicas") or [])
    lines = engine_state_series([run])
    return [("" if line is run else line.label, line) for line in lines]


def sweep_data(result_dir: Path) -> dict | None:
    """The sweep's curves (None when sweep.csv has no finished run)."""
    rows = read_sweep_csv(result_dir / SWEEP_CSV)
    finished = [r for r in rows if not r.get("error")]
    if not finished:
        return None
    meta = sweep_meta(result_dir, rows)
    load_key, param_keys = meta.get("load_key"), list(meta.get("param_keys") or [])
    metrics = [X_METRIC, *(m for m, _, _ in PANELS)]
    if load_key:
        curves = [{"label": c.label, "labels": [f"{short_key(load_key)}={x:g}" for x in c.x],
                   "load": c.x, "metrics": {m: _estimates(c.metrics[m]) for m in metrics}}
                  for c in sweep_curves(rows, load_key, param_keys)]
    else:
        curves = _point_curves(finished, param_keys, metrics)
    return json_safe({
        "scenario": meta.get("scenario") or result_dir.name, "load_key": load_key,
        "param_keys": param_keys, "x_metric": X_METRIC,
        "panels": [{"metric": m, "label": label, "slo_ms": (meta.get("slos_ms") or {}).get(slo)}
                   for m, label, slo in PANELS],
        "num_runs": len(rows), "num_errors": len(rows) - len(finished), "curves": curves})


def _estimates(estimates) -> dict:
    return {"mean": [e.mean for e in estimates], "ci": [e.half_width for e in estimates]}


def _point_curves(rows: list[dict], param_keys: list[str], metrics: list[str]) -> list[dict]:
    """Without a load axis: one curve per scheduler through its sweep points, in file order."""
    groups: dict[str, dict[str, list[dict]]] = {}
    for row in rows:
        groups.setdefault(row["scheduler"], {}).setdefault(
            point_label(row, param_keys), []).append(row)
    out = []
    for label, by_point in groups.items():
        estimates = {m: [mean_ci95(_values(group, m) or [math.nan]) for group in by_point.values()]
                     for m in metrics}
        out.append({"label": label, "labels": list(by_point), "load": None,
                    "metrics": {m: _estimates(e) for m, e in estimates.items()}})
    return out


def _values(rows: list[dict], metric: str) -> list[float]:
    return [v for v in (to_float(r.get(metric, "")) for r in rows) if v is not None]


def report_data(result_dir: Path) -> dict:
    """Everything the page shows but the toy; ValueError (one line) when DIR has nothing."""
    result_dir = Path(result_dir)
    if not result_dir.is_dir():
        raise ValueError(f"{result_dir}: no such result folder")
    runs = [run_data(p) for p in run_folders(result_dir)]
    sweep = sweep_data(result_dir) if (result_dir / SWEEP_CSV).is_file() else None
    if not runs and sweep is None:
        raise ValueError(f"{result_dir}: nothing to report (no <scheduler>/summary.json with "
                         f"requests.csv or .parquet, no sweep.csv with a finished run)")
    title = sweep["scenario"] if sweep and not runs else result_dir.resolve().name
    return {"title": title, "summary_columns": [list(c) for c in SUMMARY_COLUMNS],
            "latencies": [list(c) for c in LATENCIES],
            "engine_series": [list(c) for c in ENGINE_SERIES], "runs": runs, "sweep": sweep}


def dumps(data: dict) -> str:
    """Compact JSON, safe inside an HTML ``<script>`` element (no ``<`` can close it)."""
    return json.dumps(data, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")
