"""`servesim sweep`: the plan (points x seeds x schedulers), bad sweep blocks, sweep.csv rows,
paired workloads, resuming, and identical bytes whatever ran it."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from simulator.cli import EXIT_USER_ERROR, main
from simulator.commands.run import run_scenario_file
from simulator.runner import prepare, simulate
from simulator.scenario import ScenarioError, validate_scenario
from simulator.sweep import execute
from simulator.sweep.execute import run_sweep
from simulator.scenario.paths import set_path
from simulator.scenario.sweep_plan import build_plan
from simulator.sweep.table import SWEEP_CSV, SweepTable, format_cell

TINY = {
    "name": "tiny", "seed": 0, "model": "llama-2-7b", "hardware": "a100-80gb",
    "cost_model": {"kind": "unit", "fixed_step_time_s": 0.02},
    "engine": {"block_size": 16, "num_gpu_blocks": 10000, "max_model_len": 512},
    "workload": {"arrival": {"kind": "poisson", "rate": 4.0},
                 "prompt_len": {"kind": "fixed", "value": 16},
                 "output_len": {"kind": "uniform", "low": 1, "high": 63}, "num_requests": 40},
    "schedulers": [{"preset": "static", "max_num_seqs": 4},
                   {"preset": "orca", "max_num_seqs": 4, "max_num_batched_tokens": 4096}],
    "sweep": {"workload.arrival.rate": [2.0, 4.0, 8.0]},
    "num_seeds": 2,
}


def tiny(**changes) -> dict:
    raw = json.loads(json.dumps(TINY))
    raw.update(changes)
    return raw


def write(tmp_path: Path, raw: dict, name: str = "tiny.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def quiet_sweep(raw: dict, out: Path, workers: int = 1, **kwargs):
    """In-process (workers=1) unless asked: a process pool costs seconds to start."""
    return run_sweep(build_plan(raw, None), out, workers=workers, progress=False,
                     log=lambda _: None, **kwargs)


def csv_rows(path: Path) -> list[dict]:
    return list(csv.DictReader(io.StringIO(path.read_text())))


# -- paths and plan ------------------------------------------------------------------------------
def test_set_path_star_sets_every_scheduler_and_index_sets_one():
    raw = tiny()
    both = set_path(raw, "schedulers.*.max_num_seqs", 8)
    assert [s["max_num_seqs"] for s in both["schedulers"]] == [8, 8]
    for path in ("schedulers[1].max_num_seqs", "schedulers.1.max_num_seqs"):
        one = set_path(raw, path, 8)
        assert [s["max_num_seqs"] for s in one["schedulers"]] == [4, 8]
    assert raw["schedulers"][0]["max_num_seqs"] == 4   # the input is not modified
    assert set_path(raw, "metrics.goodput.ttft_ms", 5.0)["metrics"] == {"goodput": {"ttft_ms": 5.0}}


def test_plan_crosses_points_then_seeds_then_schedulers():
    raw = tiny(sweep={"workload.arrival.rate": [2.0, 4.0], "schedulers.*.max_num_seqs": [4, 8]})
    plan = build_plan(raw, None)
    assert plan.param_keys == ("workload.arrival.rate", "schedulers.*.max_num_seqs")
    assert plan.seeds == (0, 1)
    assert plan.scheduler_labels == ("static", "orca")
    assert plan.load_key == "workload.arrival.rate"
    assert [(dict(r.params)["workload.arrival.rate"], dict(r.params)["schedulers.*.max_num_seqs"],
             r.seed, r.scheduler) for r in plan.runs[:5]] == [
        (2.0, 4, 0, "static"), (2.0, 4, 0, "orca"), (2.0, 4, 1, "static"), (2.0, 4, 1, "orca"),
        (2.0, 8, 0, "static")]
    assert len(plan.runs) == 2 * 2 * 2 * 2
    assert len({r.run_key for r in plan.runs}) == len(plan.runs)
    workload = plan.workloads[3]   # rate 2, 8 slots, seed 1: its scenario carries the point
    assert workload.scenario.seed == 1
    assert workload.scenario.schedulers[1]["max_num_seqs"] == 8


def test_sweep_seed_list_replaces_num_seeds():
    raw = tiny(sweep={"seed": [7, 3]})
    del raw["num_seeds"]
    plan = build_plan(raw, None)
    assert plan.seeds == (7, 3) and plan.param_keys == ()
    assert [w.scenario.seed for w in plan.workloads] == [7, 3]


@pytest.mark.parametrize("sweep, extra, expected", [
    ({"workload.arrival.rat": [1.0]}, {},
     "sweep.workload.arrival.rat: unknown field (not allowed here; check the spelling)"),
    ({"workload.arrival.rate": []}, {},
     "sweep.workload.arrival.rate: an empty list is not allowed; give at least one value"),
    ({"workload.arrival.rate": [2.0, -1.0]}, {}, "sweep.workload.arrival.rate: -1.0 is not allowed"),
    ({"workload.arrival.rate": 2.0}, {}, "sweep.workload.arrival.rate: 2.0 is not allowed"),
    ({"schedulers[5].max_num_seqs": [2]}, {}, "sweep.schedulers[5].max_num_seqs: index 5 is out of range"),
    ({"schedulers.*.max_num_sequences": [2]}, {}, "max_num_sequences: unknown field"),
    ({"engine.gpu_memory_utilization": [0.5, 0.5]}, {},
     "sweep.engine.gpu_memory_utilization: 0.5 is given twice"),
    ({"name": ["a", "b"]}, {}, "sweep.name: 'name' cannot be swept"),
    ({"seed": [0, 1]}, {"num_seeds": 2}, "num_seeds: give either num_seeds or sweep.seed"),
])
def test_bad_sweep_fails_before_any_run_with_one_line_naming_the_key(tmp_path, sweep, extra, expected):
    path = write(tmp_path, {**tiny(sweep=sweep), **extra})
    result = CliRunner().invoke(main, ["sweep", str(path), "-o", str(tmp_path / "out")])
    assert result.exit_code == EXIT_USER_ERROR
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], result.stderr
    assert not (tmp_path / "out").exists()   # nothing ran, nothing written


def test_impossible_crossed_point_fails_before_any_run(tmp_path):
    """Each value is fine alone; the pair (16 seats, an 8-token budget) is not (vLLM refuses a
    budget below max_num_seqs), and the first point, which is fine, must not have run either."""
    raw = tiny(schedulers=[TINY["schedulers"][0], {"preset": "vllm_v1", "max_num_seqs": 4}],
               sweep={"schedulers[1].max_num_seqs": [2, 16], "schedulers[1].max_num_batched_tokens": [8]})
    with pytest.raises(ScenarioError, match=r"^sweep point \(schedulers\[1\]\.max_num_seqs=16, "
                                            r"schedulers\[1\]\.max_num_batched_tokens=8, seed=0\): "
                                            r".*max_num_batched_tokens: 8 must be >= max_num_seqs \(16\)"):
        quiet_sweep(raw, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_run_ignores_the_sweep_block_and_runs_the_file_as_written(tmp_path):
    raw = tiny(sweep={"workload.arrival.rate": [2.0, 4.0]})
    outputs = run_scenario_file(write(tmp_path, raw), tmp_path / "run", (), plots=False)
    quiet_sweep(raw, tmp_path / "sweep")
    rows = [r for r in csv_rows(tmp_path / "sweep" / SWEEP_CSV)
            if r["workload.arrival.rate"] == "4.0" and r["seed"] == "0"]   # the file's own point
    assert [o.label for o in outputs] == [r["scheduler"] for r in rows] == ["static", "orca"]
    for output, row in zip(outputs, rows):
        assert row["output_throughput"] == repr(output.summary["output_throughput"])
        assert row["p99_ttft_ms"] == repr(output.summary["p99_ttft_ms"])


# -- rows ----------------------------------------------------------------------------------------
def test_sweep_csv_has_one_row_per_run_with_parameters_and_every_summary_metric(tmp_path):
    raw = tiny(sweep={"workload.arrival.rate": [2.0, 8.0], "schedulers.*.max_num_seqs": [4, 8]})
    outcome = quiet_sweep(raw, tmp_path)
    rows = csv_rows(tmp_path / SWEEP_CSV)
    assert (outcome.num_runs, outcome.num_ran, outcome.num_skipped, len(rows)) == (16, 16, 0, 16)
    header = list(rows[0])
    assert header[:6] == ["run_key", "scheduler", "seed", "workload.arrival.rate",
                          "schedulers.*.max_num_seqs", "error"]
    # The row of (rate 8, 8 slots, seed 1, orca) is exactly that run's summary.
    point = validate_scenario(set_path(set_path(set_path(tiny(), "workload.arrival.rate", 8.0),
                                                "schedulers.*.max_num_seqs", 8), "seed", 1))
    prepared = prepare(point)
    summary = simulate(prepared, prepared.runs[1]).summary
    row = next(r for r in rows if (r["workload.arrival.rate"], r["schedulers.*.max_num_seqs"],
                                   r["seed"], r["scheduler"]) == ("8.0", "8", "1", "orca"))
    assert all(row[k] == format_cell(v) for k, v in summary.items()), \
        {k: (row[k], v) for k, v in summary.items() if row[k] != format_cell(v)}
    assert row["max_num_seqs"] == "8" and row["error"] == ""


def test_each_point_and_seed_is_generated_once_and_shared_by_its_schedulers(tmp_path, monkeypatch):
    prepared_scenarios = []
    real_prepare = execute.prepare

    def counting_prepare(scenario, **kwargs):
        prepared_scenarios.append((scenario.workload.arrival.rate, scenario.seed))
        return real_prepare(scenario, **kwargs)
    monkeypatch.setattr(execute, "prepare", counting_prepare)
    quiet_sweep(tiny(), tmp_path)
    assert prepared_scenarios == [(2.0, 0), (2.0, 1), (4.0, 0), (4.0, 1), (8.0, 0), (8.0, 1)]


# -- resuming ------------------------------------------------------------------------------------
def test_rerun_does_no_work_and_leaves_the_file_unchanged(tmp_path, monkeypatch):
    quiet_sweep(tiny(), tmp_path)
    before = (tmp_path / SWEEP_CSV).read_bytes()

    def no_simulation(*args):
        raise AssertionError("a finished run was simulated again")
    monkeypatch.setattr(execute, "simulate_summary", no_simulation)
    monkeypatch.setattr(execute, "prepare", no_simulation)
    outcome = quiet_sweep(tiny(), tmp_path)
    assert (outcome.num_ran, outcome.num_skipped) == (0, 12)
    assert (tmp_path / SWEEP_CSV).read_bytes() == before


def test_added_sweep_values_run_only_the_new_points(tmp_path):
    quiet_sweep(tiny(sweep={"workload.arrival.rate": [2.0, 4.0]}), tmp_path)
    outcome = quiet_sweep(tiny(), tmp_path)   # adds 8.0
    assert (outcome.num_ran, outcome.num_skipped) == (4, 8)
    fresh = tmp_path / "fresh"
    quiet_sweep(tiny(), fresh)
    assert (tmp_path / SWEEP_CSV).read_bytes() == (fresh / SWEEP_CSV).read_bytes()


def test_rows_of_a_changed_scenario_are_refused_unless_restart(tmp_path):
    quiet_sweep(tiny(), tmp_path)
    changed = tiny(workload={**TINY["workload"], "num_requests": 30})
    with pytest.raises(ScenarioError, match="12 of its rows are runs this sweep does not contain"):
        quiet_sweep(changed, tmp_path)
    outcome = quiet_sweep(changed, tmp_path, restart=True)
    assert outcome.num_ran == 12 and len(csv_rows(tmp_path / SWEEP_CSV)) == 12
    assert {r["num_prompts"] for r in csv_rows(tmp_path / SWEEP_CSV)} == {"30"}


def test_a_torn_last_row_is_cut_off_and_its_run_done_again(tmp_path):
    quiet_sweep(tiny(), tmp_path)
    whole = (tmp_path / SWEEP_CSV).read_bytes()
    lines = whole.splitlines(keepends=True)
    (tmp_path / SWEEP_CSV).write_bytes(b"".join(lines[:-2]) + lines[-2][:40])   # killed mid-write
    assert len(SweepTable(tmp_path / SWEEP_CSV, ()).load()) == 10
    assert (tmp_path / SWEEP_CSV).read_bytes().endswith(b"\n")   # repaired on load
    outcome = quiet_sweep(tiny(), tmp_path)
    assert (outcome.num_ran, outcome.num_skipped) == (2, 10)
    assert (tmp_path / SWEEP_CSV).read_bytes() == whole


def test_sweep_command_prints_the_plan_writes_csv_and_json_and_resumes(tmp_path):
    path = write(tmp_path, tiny())
    args = ["sweep", str(path), "-o", str(tmp_path / "out"), "--workers", "1", "--set", "num_seeds=1",
            "--no-plots"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "tiny: 6 runs (2 schedulers x 3 points x 1 seeds); 0 already in" in result.output
    meta = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert meta["load_key"] == "workload.arrival.rate" and meta["seeds"] == [0]
    assert len(csv_rows(tmp_path / "out" / SWEEP_CSV)) == 6
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["sweep.csv", "sweep.json"]
    again = CliRunner().invoke(main, args)
    assert "6 already in" in again.output and "0 to run" in again.output


def test_a_sweep_killed_before_its_final_rewrite_is_put_in_plan_order_without_running(tmp_path):
    quiet_sweep(tiny(), tmp_path)
    canonical = (tmp_path / SWEEP_CSV).read_text()
    header, *rows = canonical.splitlines(keepends=True)
    (tmp_path / SWEEP_CSV).write_text(header + "".join(reversed(rows)))   # completion order
    outcome = quiet_sweep(tiny(), tmp_path)
    assert outcome.num_ran == 0 and (tmp_path / SWEEP_CSV).read_text() == canonical


def test_a_foreign_sweep_csv_is_a_one_line_error(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / SWEEP_CSV).write_text("a,b\n1,2\n")
    result = CliRunner().invoke(main, ["sweep", str(write(tmp_path, tiny())), "-o", str(tmp_path / "out")])
    assert result.exit_code == EXIT_USER_ERROR
    assert result.stderr == (f"error: {tmp_path / 'out' / SWEEP_CSV}: not a servesim sweep.csv (no "
                             f"run_key column); move it away or use -o another folder\n")


def _children_of(pid: int) -> list[int]:
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            children.append(int(stat.parent.name))
    return children


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
def test_a_sweep_killed_by_sigkill_leaves_no_worker_behind(tmp_path):
    # Issue 22: SIGKILL of `servesim sweep` left its pool workers running for minutes.
    import signal
    import subprocess
    import sys
    import time
    root = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "simulator.cli", "sweep", "scenarios/sweep_static_vs_continuous.yaml",
           "-o", str(tmp_path / "out"), "--workers", "2", "--set", "workload.num_requests=200000"]
    sweep = subprocess.Popen(cmd, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(_children_of(sweep.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    children = _children_of(sweep.pid)
    assert len(children) >= 2, "the pool did not start"
    time.sleep(1.0)   # the workers are inside a point now
    sweep.send_signal(signal.SIGKILL)
    sweep.wait()
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{c}").exists() for c in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    alive = [c for c in children if Path(f"/proc/{c}/stat").exists()
             and Path(f"/proc/{c}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"]
    assert not alive, f"processes left running: {alive}"
