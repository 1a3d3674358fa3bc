"""Plots: files exist (PNG and SVG), axes are labelled, one line per scheduler, SLO lines when
given; the batch timeline matches the hand-worked toy (tests/test_toy_static_vs_continuous.py)."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from matplotlib.container import BarContainer
from click.testing import CliRunner

from tests.test_sweep import quiet_sweep, tiny, write

from simulator.cli import EXIT_USER_ERROR, main
from simulator.plots.cdfs import LatencySamples, latency_cdfs_figure
from simulator.plots.curves import sweep_curves, sweep_points_figure, throughput_latency_figure
from simulator.plots.engine_series import engine_timeseries_figure
from simulator.plots.figures import SLO_LABEL_PREFIX, pyplot
from simulator.plots.result_dir import plot_result_dir
from simulator.plots.timeline import read_timeline_csv, record_timeline
from simulator.plots.timeline_plot import plot_batch_timelines, timeline_figure
from simulator.run_command import run_scenario_file
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


# -- one run: CDFs and engine state --------------------------------------------------------------
def test_run_plots_include_latency_cdfs_and_engine_state_per_scheduler(tmp_path):
    outputs = run_scenario_file(SCENARIOS / "toy_unit.yaml", tmp_path, (), plots=False)
    from simulator.plots.run_plots import plot_run
    paths = plot_run(tmp_path, outputs)
    assert_image_files(paths, "run_overview.png", "latency_cdfs.png", "latency_cdfs.svg",
                       "engine_timeseries.png", "engine_timeseries.svg")
    fig = latency_cdfs_figure([LatencySamples.from_requests(o.label, o.result.requests)
                               for o in outputs], "toy", {"ttft": 50_000.0})
    assert [ax.get_xlabel() for ax in fig.axes] == ["TTFT (ms)", "TPOT (ms)", "end-to-end latency (ms)"]
    for ax in fig.axes:
        assert ax.get_ylabel() == "fraction of requests"
        assert scheduler_lines(ax) == ["static", "orca"]
        assert all(line.get_ydata()[-1] == 1.0 for line in ax.get_lines()[:2])
    assert slo_lines(fig.axes[0]) == ["SLO TTFT 50000 ms"]
    # `servesim plot` reads the same samples back from the written requests.csv files.
    from_files = LatencySamples.from_requests_csv("orca", tmp_path / "orca" / "requests.csv")
    from_run = LatencySamples.from_requests("orca", outputs[1].result.requests)
    assert sorted(from_files.ttft_ms) == pytest.approx(sorted(from_run.ttft_ms), rel=1e-12)


def test_engine_state_marks_every_step_that_preempted(tmp_path):
    scenario = load_scenario(SCENARIOS / "kv_starved_preemption.yaml", ["workload.num_requests=40"])
    prepared = prepare(scenario)
    outputs = [simulate(prepared, run) for run in prepared.runs[:2]]
    traces = [(o.label, o.result.step_log.to_columns()) for o in outputs]
    fig = engine_timeseries_figure(traces, "kv")
    assert [ax.get_ylabel() for ax in fig.axes] == ["KV cache usage (0-1)", "running requests",
                                                    "waiting requests"]
    assert fig.axes[-1].get_xlabel() == "time (s)"
    for ax in fig.axes:
        assert scheduler_lines(ax) == ["vllm_v0", "sarathi"]
    marks = fig.axes[0].collections
    assert [len(m.get_offsets()) for m in marks] == [int((c["num_preemptions"] > 0).sum())
                                                     for _, c in traces]
    assert all(o.summary["num_preemptions"] > 0 for o in outputs)


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
