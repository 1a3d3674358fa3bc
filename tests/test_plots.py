"""Plots: files exist (PNG, and SVG where asked), axes are labelled, one line per scheduler, SLO
lines when given; a run draws only its overview and `servesim plot` the rest from the files;
decimation keeps the endpoints and bounds the points; the batch timeline matches the hand-worked
toy (tests/test_toy_static_vs_continuous.py)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from matplotlib.container import BarContainer
from click.testing import CliRunner

from tests.test_sweep import quiet_sweep, tiny, write

from simulator.cli import EXIT_USER_ERROR, main
from simulator.plots.cdfs import latency_cdfs_figure
from simulator.plots.curves import sweep_curves, sweep_points_figure, throughput_latency_figure
from simulator.results.decimate import (MAX_CDF_POINTS, MAX_EVENTS, MAX_SERIES_POINTS, cdf_points,
                                      envelope, thin_events)
from simulator.plots.engine_series import engine_timeseries_figure
from simulator.plots.figures import SLO_LABEL_PREFIX, pyplot
from simulator.plots.overview import overview_figure
from simulator.plots.run_plots import plot_run
from simulator.plots.run_series import read_result_dir_series, run_series_from_columns
from simulator.plots.timeline import read_timeline_csv, record_timeline
from simulator.plots.timeline_plot import plot_batch_timelines, timeline_figure
from simulator.commands.run import run_scenario_file, run_series
from simulator.runner import prepare, simulate
from simulator.scenario import load_scenario
from simulator.sweep.table import read_sweep_csv

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    pyplot().close("all")


def scheduler_lines(ax) -> list[str]:
    return [line.get_label() for line in ax.get_lines()
            if not line.get_label().startswith((SLO_LABEL_PREFIX, "_"))]


def slo_lines(ax) -> list[str]:
    return [line.get_label() for line in ax.get_lines() if line.get_label().startswith(SLO_LABEL_PREFIX)]


def assert_image_files(paths, *names):
    by_name = {p.name: p for p in paths}
    for name in names:
        assert name in by_name, (name, sorted(by_name))
        data = by_name[name].read_bytes()
        assert data.startswith(b"\x89PNG") if name.endswith(".png") else b"<svg" in data[:500]


# -- sweep curves --------------------------------------------------------------------------------
def test_sweep_writes_throughput_latency_curves_one_line_per_scheduler_with_slo_lines(tmp_path):
    raw = tiny(metrics={"goodput": {"ttft_ms": 3000.0, "tpot_ms": 30.0}})
    result = CliRunner().invoke(main, ["sweep", str(write(tmp_path, raw)), "-o", str(tmp_path),
                                       "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert_image_files([tmp_path / "throughput_latency.png", tmp_path / "throughput_latency.svg"],
                       "throughput_latency.png", "throughput_latency.svg")
    drawn_ns = (tmp_path / "throughput_latency.png").stat().st_mtime_ns
    again = CliRunner().invoke(main, ["sweep", str(tmp_path / "tiny.yaml"), "-o", str(tmp_path),
                                      "--workers", "1"])
    assert "0 to run" in again.output and "plots: up to date" in again.output   # no work at all
    assert (tmp_path / "throughput_latency.png").stat().st_mtime_ns == drawn_ns
    rows = read_sweep_csv(tmp_path / "sweep.csv")
    curves = sweep_curves(rows, "workload.arrival.rate", ["workload.arrival.rate"])
    fig = throughput_latency_figure(curves, "tiny", {"ttft": 3000.0, "tpot": 30.0})
    assert len(fig.axes) == 4
    for ax in fig.axes:
        assert ax.get_xlabel() == "output throughput (tokens/s)"
        assert ax.get_ylabel().endswith("(ms)") and ax.get_ylabel()[:4] in ("TTFT", "TPOT")
        assert sorted(scheduler_lines(ax)) == ["orca", "static"]
        assert len(slo_lines(ax)) == 1
        for line in ax.get_lines()[:2]:
            assert len(line.get_xdata()) == 3   # one point per rate: the mean over 2 seeds
    assert slo_lines(fig.axes[0]) == ["SLO TTFT 3000 ms"]
    assert slo_lines(fig.axes[3]) == ["SLO TPOT 30 ms"]


def test_each_other_swept_value_is_its_own_curve(tmp_path):
    quiet_sweep(tiny(sweep={"workload.arrival.rate": [2.0, 8.0], "schedulers.*.max_num_seqs": [4, 8]},
                     num_seeds=1), tmp_path)
    rows = read_sweep_csv(tmp_path / "sweep.csv")
    keys = ["workload.arrival.rate", "schedulers.*.max_num_seqs"]
    fig = throughput_latency_figure(sweep_curves(rows, keys[0], keys), "tiny")
    assert sorted(scheduler_lines(fig.axes[1])) == [
        "orca (max_num_seqs=4)", "orca (max_num_seqs=8)", "static (max_num_seqs=4)",
        "static (max_num_seqs=8)"]
    assert slo_lines(fig.axes[1]) == []


def test_sweep_without_a_load_axis_draws_bars_per_point_and_scheduler(tmp_path):
    quiet_sweep(tiny(sweep={"schedulers.*.max_num_seqs": [4, 8]}, num_seeds=1), tmp_path)
    fig = sweep_points_figure(read_sweep_csv(tmp_path / "sweep.csv"), ["schedulers.*.max_num_seqs"], "t")
    for ax in fig.axes:
        assert ax.get_ylabel()
        bars = [c for c in ax.containers if isinstance(c, BarContainer)]
        assert [(b.get_label(), len(b)) for b in bars] == [("static", 2), ("orca", 2)]
    assert [t.get_text() for t in fig.axes[-1].get_xticklabels()] == ["max_num_seqs=4", "max_num_seqs=8"]


# -- one run: the overview, then `servesim plot` for the rest -----------------------------------
IMAGE_SUFFIXES = (".png", ".svg", ".gif")


def images_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.suffix in IMAGE_SUFFIXES)


@pytest.fixture(scope="module")
def toy_results(tmp_path_factory):
    """The toy's result folder from a real `servesim run` process (its overview drawn by the
    forked child where Linux allows) and the same run's outputs in this process."""
    out_dir = tmp_path_factory.mktemp("toy") / "toy"
    proc = subprocess.run([sys.executable, "-m", "simulator.cli", "run",
                           str(SCENARIOS / "toy_unit.yaml"), "-o", str(out_dir)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    outputs = run_scenario_file(SCENARIOS / "toy_unit.yaml", tmp_path_factory.mktemp("here"), (),
                                plots=False)
    return out_dir, outputs


def test_a_run_in_process_draws_the_same_overview(toy_results, tmp_path):
    out_dir, _ = toy_results
    run_scenario_file(SCENARIOS / "toy_unit.yaml", tmp_path / "toy", ())
    assert images_in(tmp_path / "toy") == ["run_overview.png"]
    assert (tmp_path / "toy" / "run_overview.png").read_bytes() == (out_dir / "run_overview.png").read_bytes()


def test_a_run_draws_only_the_overview_png(toy_results):
    out_dir, _ = toy_results
    assert images_in(out_dir) == ["run_overview.png"]
    assert (out_dir / "run_overview.png").read_bytes().startswith(b"\x89PNG")


def test_overview_has_latency_cdfs_and_engine_state_one_line_per_scheduler(toy_results):
    out_dir, outputs = toy_results
    fig = overview_figure([run_series(o) for o in outputs], "toy")
    assert [ax.get_xlabel() for ax in fig.axes] == [
        "TTFT (ms)", "TPOT (ms)", "end-to-end latency (ms)", "time (s)", "time (s)", "time (s)"]
    assert [ax.get_ylabel() for ax in fig.axes[3:]] == [
        "running requests", "waiting requests", "KV cache usage (0-1)"]
    for ax in fig.axes[:3]:
        lines = ax.get_lines()[:2]
        assert len(lines) == 2 and all(line.get_ydata()[-1] == 1.0 for line in lines)
    for ax in fig.axes[3:]:
        assert len(ax.get_lines()) == 2
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == ["static", "orca"]


def test_overview_from_the_files_is_the_same_picture_as_from_the_run(toy_results, tmp_path):
    out_dir, outputs = toy_results
    from_files = {s.label: s for s in read_result_dir_series(out_dir)}
    for output in outputs:
        here, there = run_series(output), from_files[output.label]
        for field in ("ttft_ms", "tpot_ms", "e2el_ms", "step_end_s", "num_running", "num_waiting",
                      "kv_usage", "num_preemptions"):
            assert getattr(there, field) == pytest.approx(getattr(here, field), rel=1e-12), field
    redrawn = plot_run(tmp_path / out_dir.name, [from_files[o.label] for o in outputs])
    assert redrawn[0].read_bytes() == (out_dir / "run_overview.png").read_bytes()


def test_servesim_plot_draws_the_rest_png_unless_svg_is_asked(toy_results, tmp_path):
    out_dir, _ = toy_results
    folder = tmp_path / "toy"
    shutil.copytree(out_dir, folder)
    (folder / "run_overview.png").unlink()
    result = CliRunner().invoke(main, ["plot", str(folder)])
    assert result.exit_code == 0, result.output
    names = ["engine_timeseries.png", "latency_cdfs.png", "run_overview.png"]
    assert images_in(folder) == names
    assert [line.split("/")[-1] for line in result.output.splitlines()] == [
        "run_overview.png", "latency_cdfs.png", "engine_timeseries.png"]
    result = CliRunner().invoke(main, ["plot", str(folder), "--svg"])
    assert result.exit_code == 0, result.output
    assert images_in(folder) == sorted(names + [n.replace(".png", ".svg") for n in names])
    assert_image_files([folder / n for n in images_in(folder)], *images_in(folder))


def test_run_figures_read_only_the_files_without_pandas_or_the_simulator(toy_results):
    """The run plots need numpy, matplotlib and the CSVs: not pandas, nor the simulator's
    requests, step log or result writer (which are being replaced)."""
    out_dir, _ = toy_results
    code = ("import sys\n"
            "from simulator.plots.run_series import read_result_dir_series\n"
            "from simulator.plots.overview import overview_figure\n"
            "from simulator.plots.cdfs import latency_cdfs_figure\n"
            "from simulator.plots.engine_series import engine_timeseries_figure\n"
            "from simulator.plots.run_plots import plot_run\n"
            f"series = read_result_dir_series({str(out_dir)!r})\n"
            "overview_figure(series, 't'); latency_cdfs_figure(series, 't')\n"
            "engine_timeseries_figure(series, 't')\n"
            "bad = [m for m in ('pandas', 'simulator.request', 'simulator.metrics.step_log',\n"
            "                   'simulator.output', 'simulator.engine') if m in sys.modules]\n"
            "print(len(series), bad)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["2", "[]"]


def test_run_cdfs_have_one_line_per_scheduler_ending_at_1_and_slo_lines(toy_results):
    _, outputs = toy_results
    fig = latency_cdfs_figure([run_series(o) for o in outputs], "toy", {"ttft": 50_000.0})
    assert [ax.get_xlabel() for ax in fig.axes] == ["TTFT (ms)", "TPOT (ms)", "end-to-end latency (ms)"]
    for ax in fig.axes:
        assert ax.get_ylabel() == "fraction of requests"
        assert scheduler_lines(ax) == ["static", "orca"]
        assert all(line.get_ydata()[-1] == 1.0 for line in ax.get_lines()[:2])
    assert slo_lines(fig.axes[0]) == ["SLO TTFT 50000 ms"]


def test_engine_state_marks_every_step_that_preempted():
    scenario = load_scenario(SCENARIOS / "kv_starved_preemption.yaml", ["workload.num_requests=40"])
    prepared = prepare(scenario)
    outputs = [simulate(prepared, run) for run in prepared.runs[:2]]
    series = [run_series(o) for o in outputs]
    fig = engine_timeseries_figure(series, "kv")
    assert [ax.get_ylabel() for ax in fig.axes] == ["KV cache usage (0-1)", "running requests",
                                                    "waiting requests"]
    assert fig.axes[-1].get_xlabel() == "time (s)"
    for ax in fig.axes:
        assert scheduler_lines(ax) == ["vllm_v0", "sarathi"]
    marks = fig.axes[0].collections
    assert [len(m.get_offsets()) for m in marks] == [int((s.num_preemptions > 0).sum())
                                                     for s in series]
    assert all(o.summary["num_preemptions"] > 0 for o in outputs)


# -- decimation ----------------------------------------------------------------------------------
def test_cdf_points_keep_every_sample_up_to_the_bound_then_evenly_spaced_ranks():
    few = np.array([3.0, 1.0, 2.0])
    x, y = cdf_points(few)
    assert x.tolist() == [1.0, 2.0, 3.0] and y.tolist() == pytest.approx([1 / 3, 2 / 3, 1.0])
    samples = np.random.default_rng(0).lognormal(size=100_001)
    x, y = cdf_points(samples)
    assert len(x) == MAX_CDF_POINTS
    assert (x[0], y[0]) == (samples.min(), 1 / len(samples)) and (x[-1], y[-1]) == (samples.max(), 1.0)
    ranks = np.rint(y * len(samples)).astype(int) - 1   # exact points of the empirical CDF
    assert np.array_equal(x, np.sort(samples)[ranks]) and np.all(np.diff(ranks) > 0)
    assert len(cdf_points(samples, 10)[0]) == 10


def test_envelope_keeps_the_endpoints_and_each_buckets_extremes_within_the_bound():
    rng = np.random.default_rng(1)
    t = np.cumsum(rng.exponential(size=50_000))
    y = rng.integers(0, 50, size=len(t)).astype(float)
    y[12_345] = 999.0   # one spike: a stride would likely skip it
    tt, yy = envelope(t, y)
    assert len(tt) <= MAX_SERIES_POINTS
    assert (tt[0], yy[0], tt[-1], yy[-1]) == (t[0], y[0], t[-1], y[-1])
    assert np.all(np.diff(tt) >= 0) and set(zip(tt, yy)) <= set(zip(t, y))   # real samples, in order
    assert yy.max() == 999.0 and yy.min() == y.min()
    short_t, short_y = envelope(t[:100], y[:100])
    assert np.array_equal(short_t, t[:100]) and np.array_equal(short_y, y[:100])
    assert len(envelope(np.zeros(5000), y[:5000])[0]) <= MAX_SERIES_POINTS   # all at one time


def test_thin_events_keeps_all_marks_up_to_the_bound_then_the_biggest_per_bucket():
    t = np.arange(20_000, dtype=float)
    weight = np.where(t % 3 == 0, 1.0, 0.0)
    weight[6_000] = 7.0
    kept = thin_events(t, weight)
    assert len(kept) <= MAX_EVENTS and np.all(weight[kept] > 0) and 6_000 in kept
    assert np.all(np.diff(kept) > 0)
    assert thin_events(t[:30], weight[:30]).tolist() == list(range(0, 30, 3))


# -- batch timeline ------------------------------------------------------------------------------
def _toy_timelines():
    prepared = prepare(load_scenario(SCENARIOS / "toy_unit.yaml"))
    return prepared, [record_timeline(prepared, run) for run in prepared.runs]


def test_timeline_of_the_toy_matches_the_hand_worked_step_counts():
    prepared, timelines = _toy_timelines()
    fig = timeline_figure(timelines, "toy")
    assert [ax.get_title() for ax in fig.axes] == ["static: 100 steps, last token at 100 s",
                                                   "orca: 77 steps, last token at 77 s"]
    assert all(ax.get_ylabel() == "slot" for ax in fig.axes) and fig.axes[-1].get_xlabel() == "time (s)"
    outputs = prepared.trace.max_output_tokens.tolist()
    for timeline in timelines:
        assert timeline.num_lanes == 4
        kinds = Counter((rid, kind) for _, _, _, rid, kind in timeline.rows)
        for rid, out in enumerate(outputs):   # one prefill step samples token 1 (rule 1.3.1)
            assert (kinds[(rid, "prefill")], kinds[(rid, "decode")]) == (1, out - 1), rid
        occupied = Counter((lane, start) for lane, start, _, _, _ in timeline.rows)
        assert max(occupied.values()) == 1   # a slot holds one request per step


def test_timeline_marks_each_preemption_once():
    prepared = prepare(load_scenario(SCENARIOS / "kv_starved_preemption.yaml",
                                     ["workload.num_requests=40"]))
    run = prepared.runs[2]   # vllm_v1
    timeline = record_timeline(prepared, run)
    preempted = sum(kind == "preempted" for *_, kind in timeline.rows)
    assert preempted == simulate(prepared, run).summary["num_preemptions"] > 0


def test_timeline_command_writes_csv_and_plots_that_servesim_plot_redraws(tmp_path):
    result = CliRunner().invoke(main, ["timeline", str(SCENARIOS / "toy_unit.yaml"), "-o", str(tmp_path),
                                       "--scheduler", "orca"])
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "static").exists()
    prepared = prepare(load_scenario(SCENARIOS / "toy_unit.yaml"))
    recorded = record_timeline(prepared, prepared.runs[1])
    assert read_timeline_csv("orca", tmp_path / "orca" / "timeline.csv").rows == recorded.rows
    assert_image_files([tmp_path / "batch_timeline.png", tmp_path / "batch_timeline.svg"],
                       "batch_timeline.png", "batch_timeline.svg")


def test_timeline_gif_is_written(tmp_path):
    prepared = prepare(load_scenario(SCENARIOS / "toy_unit.yaml", ["workload.num_requests=4"]))
    timeline = record_timeline(prepared, prepared.runs[1])
    paths = plot_batch_timelines([timeline], tmp_path / "t", "toy", gif=True, gif_frames=3)
    assert [p.name for p in paths] == ["t.gif", "t.png", "t.svg"]
    assert paths[0].read_bytes()[:4] == b"GIF8"


def test_plot_of_a_folder_without_results_is_a_one_line_error(tmp_path):
    result = CliRunner().invoke(main, ["plot", str(tmp_path)])
    assert result.exit_code == EXIT_USER_ERROR
    assert result.stderr.strip().count("\n") == 0 and "nothing to plot" in result.stderr
