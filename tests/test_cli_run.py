"""`servesim run` end to end: the table, the result files, determinism, --set, and the listing
commands (schema, models, hardware, schedulers)."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cost_models.hardware import list_hardware
from cost_models.model_spec import PRESETS
from simulator.cli import EXIT_USER_ERROR, main
from simulator.policies.registry import preset_names

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "scenarios" / "toy_unit.yaml"          # static and orca, 16 requests at t=0, 4 slots
SCHEDULERS = ("static", "orca")
RESULT_FILES = ("requests.csv", "steps.csv", "summary.json")


def run_cli(*args: str):
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, f"{result.exception!r}\n{result.stderr}"
    return result


def run_toy(out_dir: Path, *overrides: str):
    args = ["run", str(TOY), "-o", str(out_dir), "--no-plots"]
    for item in overrides:
        args += ["--set", item]
    return run_cli(*args)


def table_rows(stdout: str) -> list[list[str]]:
    """The rows under the table's dashed rule, up to the next non-table line."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line and set(line) == {"-"}) + 1
    rows = []
    for line in lines[start:]:
        if line.startswith(("plot:", "results:")):
            break
        rows.append(line.split())
    return rows


def read_requests(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def result_bytes(out_dir: Path) -> dict[str, bytes]:
    return {f"{s}/{name}": (out_dir / s / name).read_bytes() for s in SCHEDULERS for name in RESULT_FILES}


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    """One real `python -m simulator.cli run` with plots, shared by the checks on its output."""
    out_dir = tmp_path_factory.mktemp("toy") / "out"
    proc = subprocess.run([sys.executable, "-m", "simulator.cli", "run", str(TOY), "-o", str(out_dir)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    return proc, out_dir


def test_run_exits_0_and_prints_one_table_row_per_scheduler(toy_run):
    proc, out_dir = toy_run
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(
        "toy-unit: 16 requests, llama-2-7b on a100-80gb x1, cost model unit, seed 0\n")
    rows = table_rows(proc.stdout)
    assert [(r[0], r[1]) for r in rows] == [("static", "16"), ("orca", "16")]   # name, done
    for row, scheduler in zip(rows, SCHEDULERS):  # the steps column is the run's step count
        summary = json.loads((out_dir / scheduler / "summary.json").read_text())
        assert int(row[-1]) == summary["num_steps"]


def test_run_writes_three_result_files_per_scheduler_and_one_overview_png(toy_run):
    proc, out_dir = toy_run
    for scheduler in SCHEDULERS:
        for name in RESULT_FILES:
            assert (out_dir / scheduler / name).is_file(), f"{scheduler}/{name}"
        assert len(read_requests(out_dir / scheduler / "requests.csv")) == 16
        summary = json.loads((out_dir / scheduler / "summary.json").read_text())
        assert (summary["scheduler"], summary["completed"], summary["seed"]) == (scheduler, 16, 0)
    images = sorted(p.name for p in out_dir.iterdir() if p.suffix in (".png", ".svg"))
    assert images == ["run_overview.png"]   # the other plots are `servesim plot`'s
    assert (out_dir / "run_overview.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert [line for line in proc.stdout.splitlines() if line.startswith("plot:")] == [
        f"plot: {out_dir / 'run_overview.png'}"]


def test_static_batching_takes_the_longest_member_of_each_batch_of_four(toy_run):
    """Unit cost, 4 slots, all 16 requests at t=0 in id order: batch k holds requests 4k..4k+3
    and runs max(output) steps (the prefill step samples the first token), with no refill."""
    _, out_dir = toy_run
    outputs = {int(r["request_id"]): int(r["num_output_tokens"])
               for r in read_requests(out_dir / "static" / "requests.csv")}
    expected = sum(max(outputs[i] for i in range(k, k + 4)) for k in range(0, 16, 4))
    summary = json.loads((out_dir / "static" / "summary.json").read_text())
    assert summary["num_steps"] == expected
    with open(out_dir / "static" / "steps.csv") as f:
        assert sum(1 for _ in f) - 1 == expected


def test_same_seed_gives_byte_identical_results(tmp_path: Path):
    run_toy(tmp_path / "a")
    run_toy(tmp_path / "b")
    assert result_bytes(tmp_path / "a") == result_bytes(tmp_path / "b")


def test_seed_override_changes_the_results(tmp_path: Path):
    run_toy(tmp_path / "seed0")
    result = run_toy(tmp_path / "seed1", "seed=1")
    assert result.stdout.splitlines()[0].endswith(", seed 1")
    before, after = result_bytes(tmp_path / "seed0"), result_bytes(tmp_path / "seed1")
    for scheduler in SCHEDULERS:  # output lengths are uniform(1, 32) draws: new seed, new lengths
        assert before[f"{scheduler}/requests.csv"] != after[f"{scheduler}/requests.csv"]
        assert json.loads(after[f"{scheduler}/summary.json"])["seed"] == 1


def test_num_requests_override_gives_that_many_rows(tmp_path: Path):
    result = run_toy(tmp_path / "out", "workload.num_requests=5")
    assert result.stdout.startswith("toy-unit: 5 requests,")
    for scheduler in SCHEDULERS:
        rows = read_requests(tmp_path / "out" / scheduler / "requests.csv")
        assert [int(r["request_id"]) for r in rows] == [0, 1, 2, 3, 4]
    assert [r[1] for r in table_rows(result.stdout)] == ["5", "5"]


def test_default_result_folder_is_results_slash_scenario_name(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_cli("run", str(TOY), "--no-plots", "--set", "workload.num_requests=2")
    assert sorted(p.name for p in (tmp_path / "results" / "toy-unit").iterdir()) == sorted(SCHEDULERS)


def test_schema_prints_json_schema_with_the_workload_field():
    schema = json.loads(run_cli("schema").stdout)
    assert {"name", "model", "workload", "schedulers"} <= set(schema["required"])
    assert "workload" in schema["properties"]
    assert schema["additionalProperties"] is False   # unknown top-level keys are errors


def test_models_lists_every_model_preset():
    stdout = run_cli("models").stdout
    names = [line.split()[0] for line in stdout.splitlines()[1:]]
    assert names == [m.name for m in PRESETS.values()]


def test_hardware_lists_every_hardware_preset():
    stdout = run_cli("hardware").stdout
    names = [line.split()[0] for line in stdout.splitlines()[1:]]
    assert names == [h.name for h in list_hardware()]
    assert "h100-sxm" in names


def test_schedulers_lists_every_scheduler_preset():
    stdout = run_cli("schedulers").stdout
    assert [line.split()[0] for line in stdout.splitlines()] == preset_names()
    assert {"static", "orca", "vllm_v0", "sarathi", "vllm_v1"} <= set(preset_names())


def test_scheduler_option_runs_only_that_scheduler_on_the_same_workload(tmp_path: Path):
    run_toy(tmp_path / "all")
    result = run_cli("run", str(TOY), "-o", str(tmp_path / "one"), "--no-plots", "--scheduler", "orca")
    assert [r[0] for r in table_rows(result.stdout)] == ["orca"]
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == ["orca"]
    for name in RESULT_FILES:   # the paired workload does not depend on which schedulers run
        assert (tmp_path / "one" / "orca" / name).read_bytes() == \
            (tmp_path / "all" / "orca" / name).read_bytes(), name


def test_scheduler_option_repeated_keeps_the_file_order(tmp_path: Path):
    result = run_cli("run", str(TOY), "-o", str(tmp_path / "out"), "--no-plots",
                     "--scheduler", "orca", "--scheduler", "static")
    assert [r[0] for r in table_rows(result.stdout)] == ["static", "orca"]


def test_unknown_scheduler_is_one_line_listing_the_files_schedulers(tmp_path: Path):
    out_dir = tmp_path / "out"
    result = CliRunner().invoke(main, ["run", str(TOY), "-o", str(out_dir), "--scheduler", "vllm_v0"])
    assert result.exit_code == EXIT_USER_ERROR
    assert result.stderr == "error: --scheduler: 'vllm_v0' is not a scheduler of toy-unit; one of static, orca\n"
    assert result.stdout == "" and not out_dir.exists()
