"""`servesim plot RESULT_DIR`: every picture the files in a result folder allow.

- ``sweep.csv`` (+ ``sweep.json``): throughput vs latency curves when a load axis was swept,
  else bars per sweep point;
- ``<scheduler>/requests.csv`` and ``steps.csv`` (from `servesim run`): the run overview (the one
  figure `servesim run` draws itself), latency CDFs and the engine state over time;
- ``<scheduler>/timeline.csv`` (from `servesim timeline`): the batch timeline.
"""
from __future__ import annotations

import json
from pathlib import Path

from simulator.plots.cdfs import plot_latency_cdfs
from simulator.plots.curves import plot_sweep_points, plot_throughput_latency, sweep_curves
from simulator.plots.engine_series import plot_engine_timeseries
from simulator.plots.figures import FORMATS
from simulator.plots.overview import RUN_OVERVIEW, plot_run_overview
from simulator.plots.run_series import read_result_dir_series
from simulator.plots.timeline import TIMELINE_CSV, read_timeline_csv
from simulator.plots.timeline_plot import plot_batch_timelines
from simulator.scenario.sweep_plan import LOAD_KEYS
from simulator.sweep.table import KEY_COLUMNS, SWEEP_CSV, read_sweep_csv

THROUGHPUT_LATENCY, SWEEP_POINTS = "throughput_latency", "sweep_points"
LATENCY_CDFS, ENGINE_TIMESERIES, BATCH_TIMELINE = "latency_cdfs", "engine_timeseries", "batch_timeline"


def plot_result_dir(result_dir: Path, formats: tuple[str, ...] = ("png",)) -> list[Path]:
    """Every figure the folder's files allow, in each of ``formats``."""
    result_dir = Path(result_dir)
    if not result_dir.is_dir():
        raise ValueError(f"{result_dir}: no such result folder")
    paths: list[Path] = []
    if (result_dir / SWEEP_CSV).is_file():
        paths += plot_sweep_csv(result_dir, formats)
    series = read_result_dir_series(result_dir)
    if series:
        title = result_dir.name
        paths += plot_run_overview(series, result_dir / RUN_OVERVIEW, title, formats)
        paths += plot_latency_cdfs(series, result_dir / LATENCY_CDFS, title, formats=formats)
        with_steps = [s for s in series if len(s.step_end_s)]
        if with_steps:
            paths += plot_engine_timeseries(with_steps, result_dir / ENGINE_TIMESERIES, title,
                                            formats)
    timelines = sorted(p for p in result_dir.iterdir() if (p / TIMELINE_CSV).is_file())
    if timelines:
        paths += plot_batch_timelines([read_timeline_csv(p.name, p / TIMELINE_CSV) for p in timelines],
                                      result_dir / BATCH_TIMELINE, result_dir.name, formats=formats)
    return paths


def sweep_meta(result_dir: Path, rows: list[dict]) -> dict:
    """sweep.json if present; else the swept paths are the columns between seed and error."""
    path = result_dir / "sweep.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    header = list(rows[0]) if rows else []
    params = header[len(KEY_COLUMNS):header.index("error")] if "error" in header else []
    return {"scenario": result_dir.name, "param_keys": params, "slos_ms": {},
            "load_key": next((k for k in LOAD_KEYS if k in params), None)}


def sweep_plots_up_to_date(result_dir: Path) -> bool:
    """A sweep plot exists and is newer than sweep.csv and sweep.json (a rerun changed nothing)."""
    inputs = [result_dir / SWEEP_CSV, result_dir / "sweep.json"]
    plots = [result_dir / f"{name}.{fmt}" for name in (THROUGHPUT_LATENCY, SWEEP_POINTS)
             for fmt in ("png", "svg")]
    newest_input = max((p.stat().st_mtime for p in inputs if p.exists()), default=0.0)
    return any(p.exists() and p.stat().st_mtime >= newest_input for p in plots)


def plot_sweep_csv(result_dir: Path, formats: tuple[str, ...] = FORMATS) -> list[Path]:
    rows = read_sweep_csv(result_dir / SWEEP_CSV)
    if not rows:
        return []
    meta = sweep_meta(result_dir, rows)
    title = meta.get("scenario") or result_dir.name
    if meta.get("load_key"):
        curves = sweep_curves(rows, meta["load_key"], meta["param_keys"])
        return plot_throughput_latency(curves, result_dir / THROUGHPUT_LATENCY, title,
                                       meta.get("slos_ms"), formats, meta["load_key"])
    return plot_sweep_points(rows, meta["param_keys"], result_dir / SWEEP_POINTS, title, formats)
