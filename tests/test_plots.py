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
from simulator.plots.axes import (identical_groups, place_point_labels, round_number, set_scale,
                                  spans_decade)
from simulator.plots.cdfs import latency_cdfs_figure
from simulator.plots.curves import sweep_curves, sweep_points_figure, throughput_latency_figure
from simulator.results.decimate import (MAX_CDF_POINTS, MAX_EVENTS, MAX_SERIES_POINTS, cdf_points,
                                      envelope, thin_events)
from simulator.plots.engine_series import engine_timeseries_figure
from simulator.plots.figures import SLO_LABEL_PREFIX, new_figure, pyplot
from simulator.plots.overview import overview_figure
from simulator.plots.run_plots import plot_run
from simulator.plots.run_series import read_result_dir_series, run_series_from_columns
from simulator.plots.timeline import SlotTimeline, read_timeline_csv, record_timeline
from simulator.plots.timeline_plot import (DENSE_LANES, GIF_DPI, MAX_GIF_FRAMES, MAX_LANE_IN,
                                           MIN_LANE_IN, gif_frame_count, lane_height_in,
                                           plot_batch_timelines, timeline_figure)
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
    fig = throughput_latency_figure(curves, "tiny", {"ttft": 3000.0, "tpot": 30.0},
                                    "workload.arrival.rate")
    assert len(fig.axes) == 4
    assert fig.get_suptitle().endswith("points labelled by request rate (req/s))")
    for ax in fig.axes:
        assert ax.get_xlabel() == "output throughput (tokens/s)"
        assert ax.get_ylabel().endswith("(ms)") and ax.get_ylabel()[:4] in ("TTFT", "TPOT")
        assert sorted(scheduler_lines(ax)) == ["orca", "static"]
        assert len(slo_lines(ax)) == 1
        for i, line in enumerate(ax.get_lines()[:2]):
            assert len(line.get_xdata()) == 3   # one point per rate: the mean over 2 seeds
            labels = ax.texts[3 * i:3 * i + 3]   # each point labelled with its rate, beside it
            assert [t.get_text() for t in labels] == ["2", "4", "8"]
            assert [t.xy for t in labels] == list(zip(line.get_xdata(), line.get_ydata()))
            assert {t.get_color() for t in labels} == {line.get_color()}
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
    # No run preempted: no preemption panel.
    assert [ax.get_ylabel() for ax in fig.axes] == ["output tokens/s", "TTFT p99 (ms)",
                                                    "TPOT p99 (ms)"]
    for ax in fig.axes:
        bars = [c for c in ax.containers if isinstance(c, BarContainer)]
        assert [(b.get_label(), len(b)) for b in bars] == [("static", 2), ("orca", 2)]
        heights = [round_number(r.get_height()) for b in bars for r in b]
        assert [t.get_text() for t in ax.texts] == heights   # each bar's value above it
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
    # Unit steps: every TPOT of both is exactly 1000 ms, so the TPOT CDFs are one line.
    assert [scheduler_lines(ax) for ax in fig.axes] == [
        ["static", "orca"], ["static = orca (identical)"], ["static", "orca"],
        ["static", "orca"], ["static", "orca"], ["static", "orca"]]
    for ax in fig.axes[:3]:
        assert all(line.get_ydata()[-1] == 1.0 for line in ax.get_lines())
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == ["static", "orca",
                                                         "static = orca (identical)"]


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
        assert all(line.get_ydata()[-1] == 1.0 for line in ax.get_lines()[:2])
    assert [scheduler_lines(ax) for ax in fig.axes] == [
        ["static", "orca"], ["static = orca (identical)"], ["static", "orca"]]
    assert slo_lines(fig.axes[0]) == ["SLO TTFT 50000 ms"]


def test_engine_state_marks_every_step_that_preempted():
    scenario = load_scenario(SCENARIOS / "kv_starved_preemption.yaml", ["workload.num_requests=40"])
    prepared = prepare(scenario)
    outputs = [simulate(prepared, run) for run in prepared.runs[:2]]
    series = [run_series(o) for o in outputs]
    fig = engine_timeseries_figure(series, "kv")
    assert [ax.get_ylabel() for ax in fig.axes] == ["KV cache usage (0-1)", "running requests",
                                                    "waiting requests", "preemptions so far"]
    assert fig.axes[-1].get_xlabel() == "time (s)"
    for ax in fig.axes:
        assert scheduler_lines(ax) == ["vllm_v0", "sarathi"]
    for line, s in zip(fig.axes[3].get_lines(), series):   # the running total ends at the total
        assert line.get_ydata()[-1] == s.total_preemptions
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
    from PIL import Image
    with Image.open(paths[0]) as gif:
        assert (gif.n_frames, gif.size[0]) == (3, 12 * GIF_DPI)
    assert [gif_frame_count(n) for n in (1, 20, 10_000)] == [2, 20, MAX_GIF_FRAMES]
    again = plot_batch_timelines([timeline], tmp_path / "u", "toy", gif=True, gif_frames=3)
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in paths]   # same bytes


def test_plot_of_a_folder_without_results_is_a_one_line_error(tmp_path):
    result = CliRunner().invoke(main, ["plot", str(tmp_path)])
    assert result.exit_code == EXIT_USER_ERROR
    assert result.stderr.strip().count("\n") == 0 and "nothing to plot" in result.stderr


# -- the axis rules (simulator/plots/axes.py) ----------------------------------------------------
def synthetic(label, ttft=(10.0, 20.0), tpot=(1.0, 2.0), e2el=(100.0, 300.0), waiting=(0, 0, 0),
              preemptions=(0, 0, 0), running=(1, 2, 1)):
    """A RunSeries of three steps (at 1, 2, 3 s) from the columns the result files name."""
    requests = {"ttft_ms": np.array(ttft, float), "tpot_ms": np.array(tpot, float),
                "e2el_ms": np.array(e2el, float)}
    steps = {"end_s": np.array([1.0, 2.0, 3.0]), "num_running": np.array(running, float),
             "num_waiting": np.array(waiting, float), "kv_usage": np.array([0.1, 0.2, 0.1]),
             "num_preemptions": np.array(preemptions, float)}
    return run_series_from_columns(label, requests, steps)


def test_an_axis_is_logarithmic_only_over_a_decade_of_positive_values_with_plain_labels():
    assert not spans_decade([1.0, 9.9]) and spans_decade([1.0, 10.0]) and spans_decade([0.1, 1.0])
    assert not spans_decade([0.0, -50.0, 2.0, 19.0])   # zeros and negatives cannot be on a log axis
    assert not spans_decade([]) and not spans_decade([0.0, 0.0]) and not spans_decade([np.nan, 5.0])
    linear, log, counts = new_figure().subplots(1, 3)
    assert set_scale(linear, "x", [1.0, 9.9]) is False and linear.get_xscale() == "linear"
    assert set_scale(log, "x", [1.0, 10.0]) is True and log.get_xscale() == "log"
    assert set_scale(counts, "y", [0.0, 3.0, 5000.0], counts=True) and counts.get_yscale() == "symlog"
    label = log.xaxis.get_major_formatter()
    assert [label(v) for v in (0.1, 1.0, 10.0, 100.0, 1e6, 2e-5, 0.1 + 0.2)] == [
        "0.1", "1", "10", "100", "1,000,000", "0.00002", "0.3"]
    assert [round_number(v) for v in (223957.1, 0.5, 12.34, 0.0)] == ["224,000", "0.5", "12.3", "0"]


def test_exactly_equal_curves_are_one_line_named_for_both():
    groups = identical_groups(["a", "b", "c", "d"], [([1, 2], [3, 4]), ([1, 2], [3, 4.000001]),
                                                     ([1, 2], [3, 4]), ([1, 2, 3], [3, 4, 5])])
    assert [(g.labels, g.index, g.label) for g in groups] == [
        (("a", "c"), 0, "a = c (identical)"), (("b",), 1, "b"), (("d",), 3, "d")]
    v1, sarathi = synthetic("vllm_v1", ttft=(5.0, 7.0, 9.0)), synthetic("sarathi", ttft=(9.0, 5.0, 7.0))
    orca = synthetic("orca", ttft=(5.0, 7.0, 9.000001))
    fig = latency_cdfs_figure([v1, sarathi, orca], "t")
    assert scheduler_lines(fig.axes[0]) == ["vllm_v1 = sarathi (identical)", "orca"]
    merged = fig.axes[0].get_lines()[0]   # dashed in both colours, so it reads as both
    assert (merged.get_color(), merged.get_gapcolor()) == ("C0", "C1")
    assert scheduler_lines(fig.axes[1]) == ["vllm_v1 = sarathi = orca (identical)"]


def test_panels_with_nothing_to_show_are_left_out_and_the_figure_shrinks():
    one_token = [synthetic("a", tpot=()), synthetic("b", tpot=())]   # no second token: no TPOT
    assert [ax.get_title() for ax in latency_cdfs_figure(one_token, "t").axes] == [
        "TTFT CDF", "end-to-end latency CDF"]
    fig = overview_figure(one_token, "t")   # and the queue was always empty: no waiting panel
    assert [(ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes[2:]] == [
        ("time (s)", "running requests"), ("time (s)", "KV cache usage (0-1)")]
    assert [ax.get_xlabel() for ax in fig.axes[:2]] == ["TTFT (ms)", "end-to-end latency (ms)"]
    quiet = engine_timeseries_figure(one_token, "t")   # no preemptions: no preemption panel
    assert [ax.get_ylabel() for ax in quiet.axes] == ["KV cache usage (0-1)", "running requests"]
    busy = engine_timeseries_figure([synthetic("a", waiting=(0, 3, 1), preemptions=(0, 1, 0)),
                                     synthetic("b", waiting=(0, 2, 0))], "t")
    assert [ax.get_ylabel() for ax in busy.axes] == [
        "KV cache usage (0-1)", "running requests", "waiting requests", "preemptions so far"]
    assert quiet.get_figheight() < busy.get_figheight()


def test_queues_whose_peaks_differ_tenfold_get_one_row_each_on_its_own_scale():
    runs = [synthetic("static", waiting=(0, 5000, 10)), synthetic("orca", waiting=(0, 3, 1)),
            synthetic("v1", waiting=(0, 0, 0))]
    fig = engine_timeseries_figure(runs, "t")
    rows = [ax for ax in fig.axes if ax.get_ylabel().startswith("waiting")]
    assert [(ax.get_ylabel(), scheduler_lines(ax)) for ax in rows] == [
        ("waiting\n(own scale)", ["static"]), ("waiting\n(own scale)", ["orca"])]
    assert [ax.get_ylim()[1] for ax in rows] == [pytest.approx(5250), pytest.approx(3.15)]
    assert rows[0].get_title(loc="left") == ("waiting requests: one row per scheduler, each on its "
                                             "own y-scale (peaks 3 to 5000); always 0: v1")
    assert scheduler_lines(fig.axes[1]) == ["static = orca = v1 (identical)"]   # same running
    shared = engine_timeseries_figure([synthetic("a", waiting=(0, 99, 1)),
                                       synthetic("b", waiting=(0, 10, 1))], "t")   # 9.9x: shared
    assert [scheduler_lines(ax) for ax in shared.axes if ax.get_ylabel() == "waiting requests"] == [
        ["a", "b"]]
    overview = overview_figure(runs[:2], "t")   # a fixed grid: a log count axis that keeps 0
    assert [(ax.get_ylabel(), ax.get_yscale()) for ax in overview.axes[3:5]] == [
        ("running requests", "linear"), ("waiting requests (log scale)", "symlog")]


def test_point_labels_never_overlap_and_give_way_when_no_spot_is_free():
    ax = new_figure(figsize=(4, 4)).subplots()
    ax.set(xlim=(0, 10), ylim=(0, 10))
    texts = place_point_labels(ax, [(5.0, 5.0, "2", "C0"), (5.0, 5.0, "4", "C1"), (9.0, 1.0, "8", "C0"),
                                    (5.0, 5.0, "10", "C2"), (5.0, 5.0, "12", "C3"),
                                    (5.0, 5.0, "14", "C4"), (np.nan, 1.0, "16", "C0")])
    assert [t.get_text() for t in texts] == ["2", "4", "8", "10", "12"]   # four spots per point
    renderer = ax.figure.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in texts]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_dense_timelines_merge_back_to_back_steps_and_say_they_are_dense():
    assert lane_height_in(4) == MAX_LANE_IN and lane_height_in(1000) == MIN_LANE_IN
    assert MIN_LANE_IN * GIF_DPI >= 12   # pixels per lane in the GIF, at the least
    steps = [(0, i / 100, (i + 1) / 100, 7, "decode") for i in range(3000)]
    dense = SlotTimeline("x", steps + [(0, 30.0, 30.5, 8, "prefill"), (0, 30.5, 31.0, 8, "decode")]
                         + [(lane, 0.0, 1.0, 100 + lane, "decode") for lane in range(1, DENSE_LANES + 1)])
    fig = timeline_figure([dense], "d")
    lane0 = [len(c.get_paths()) for c in fig.axes[0].collections
             if c.get_paths()[0].vertices[:, 1].max() < 0.5]
    assert lane0 == [2, 1]   # lane 0: one decode bar each for requests 7 and 8, 8's prefill
    assert fig.get_suptitle().splitlines()[1].startswith(
        f"dense: {DENSE_LANES + 1} slots in all, {DENSE_LANES + 2} requests")
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "prefill (prompt or recompute)", "decode (one token)", "stalled (holds slot, not computed)",
        "idle (free slot)", "preempted"]
    sparse = timeline_figure([SlotTimeline("x", steps[:DENSE_LANES])], "s")
    assert "dense" not in sparse.get_suptitle()
    assert len(sparse.axes[0].collections[0].get_paths()) == DENSE_LANES   # each step outlined
