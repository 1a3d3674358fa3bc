"""Engine-state plots of runs of several replicas: each replica's (or P/D pool replica's) steps are
one line, named from summary.json's replicas list, equal to that replica's steps.csv rows; the
latency CDFs stay one line per scheduler; a run of one replica draws what it drew before."""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from tests.test_plots import scheduler_lines

from simulator.commands.run import run_scenario_file, run_series
from simulator.plots.engine_series import engine_timeseries_figure
from simulator.plots.figures import pyplot
from simulator.plots.overview import overview_figure
from simulator.plots.run_plots import plot_run
from simulator.plots.run_series import (engine_state_series, read_result_dir_series,
                                        run_series_from_columns)

ROOT = Path(__file__).resolve().parents[1]
# Unit steps, 12 requests at once: the prefill replica prefills, the decode replica pulls and decodes.
PD = {"name": "pd", "model": "llama-2-7b", "hardware": "a100-80gb",
      "cost_model": {"kind": "unit", "fixed_step_time_s": 1.0},
      "engine": {"max_model_len": 256},
      "workload": {"arrival": {"kind": "poisson", "rate": 2.0},
                   "prompt_len": {"kind": "fixed", "value": 40},
                   "output_len": {"kind": "fixed", "value": 6}, "num_requests": 12},
      "disaggregation": {"prefill": {"num_gpu_blocks": 100}, "decode": {"num_gpu_blocks": 100},
                         "kv_transfer": {"bandwidth_GBps": 1.0}},
      "schedulers": [{"preset": "vllm_v1", "max_num_seqs": 4, "max_num_batched_tokens": 64}]}


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    pyplot().close("all")


def run_to(tmp_path: Path, raw: dict, name: str):
    import yaml
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    out_dir = tmp_path / name
    return out_dir, run_scenario_file(path, out_dir, (), plots=False)


def steps_of(run_dir: Path) -> list[dict]:
    with open(run_dir / "steps.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def lines_of(fig, ylabel: str) -> dict:
    ax = next(a for a in fig.axes if a.get_ylabel() == ylabel)
    return {line.get_label(): line for line in ax.get_lines()
            if not line.get_label().startswith("_")}


def test_a_pd_run_draws_each_pool_replica_as_its_own_line_of_its_own_steps(tmp_path):
    out_dir, _ = run_to(tmp_path, PD, "pd")
    steps = steps_of(out_dir / "vllm_v1")
    series = read_result_dir_series(out_dir)
    fig = engine_timeseries_figure(series, "pd")
    for ylabel, column in (("KV cache usage (0-1)", "kv_usage"), ("waiting requests", "num_waiting")):
        lines = lines_of(fig, ylabel)
        assert list(lines) == ["prefill 0", "decode 1"], ylabel
        for label, line in lines.items():
            replica = label.split()[-1]
            rows = [r for r in steps if r["replica"] == replica]
            assert rows, label
            assert list(line.get_xdata()) == [float(r["end_s"]) for r in rows]
            assert list(line.get_ydata()) == [float(r[column]) for r in rows]


def test_the_overview_keeps_one_cdf_per_scheduler_and_is_the_same_from_the_files(tmp_path):
    out_dir, outputs = run_to(tmp_path, PD, "pd")
    here = overview_figure([run_series(o) for o in outputs], "pd")
    cdf_axes = [ax for ax in here.axes if ax.get_ylabel() == "fraction of requests"]
    assert [scheduler_lines(ax) for ax in cdf_axes] == [["vllm_v1"]] * len(cdf_axes)
    state = lines_of(here, "KV cache usage (0-1)")
    assert list(state) == ["prefill 0", "decode 1"]
    # Colours after the scheduler's (C0): the legend tells the run from its replicas.
    assert [line.get_color() for line in state.values()] == ["C1", "C2"]
    assert [t.get_text() for t in here.legends[0].get_texts()] == ["vllm_v1", "prefill 0",
                                                                  "decode 1"]
    drawn = plot_run(tmp_path / "from_run" / "pd", [run_series(o) for o in outputs])
    redrawn = plot_run(tmp_path / "from_files" / "pd", read_result_dir_series(out_dir))
    assert drawn[0].read_bytes() == redrawn[0].read_bytes()


def test_co_located_replicas_are_named_replica_k_after_the_scheduler_when_there_are_several(
        tmp_path):
    raw = {**PD, "engine": {"max_model_len": 256, "num_replicas": 2, "num_gpu_blocks": 100}}
    del raw["disaggregation"]
    raw["schedulers"] = [PD["schedulers"][0], {**PD["schedulers"][0], "name": "other",
                                               "max_num_seqs": 2}]
    out_dir, _ = run_to(tmp_path, raw, "two")
    series = read_result_dir_series(out_dir)
    assert [s.label for s in engine_state_series(series)] == [
        "other: replica 0", "other: replica 1", "vllm_v1: replica 0", "vllm_v1: replica 1"]
    one = engine_state_series(series[:1])
    assert [s.label for s in one] == ["replica 0", "replica 1"]
    # The replicas' steps are the run's steps, split: none lost, none twice.
    assert sorted(np.concatenate([s.step_end_s for s in one]).tolist()) == sorted(
        series[0].step_end_s.tolist())
    assert all(len(s.ttft_ms) == 0 for s in one)


def test_a_run_of_one_replica_is_drawn_as_it_was():
    steps = {"end_s": [1.0, 2.0], "num_running": [1, 2], "num_waiting": [0, 1],
             "kv_usage": [0.1, 0.2], "num_preemptions": [0, 0]}
    series = [run_series_from_columns("a", {"ttft_ms": [5.0]}, steps)]
    assert engine_state_series(series)[0] is series[0]
    # A replica column without summary.json's names: "replica k".
    split = run_series_from_columns("a", {}, {**steps, "replica": [0, 1]})
    assert [s.label for s in engine_state_series([split])] == ["replica 0", "replica 1"]
