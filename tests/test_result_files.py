"""Result folders: requests and steps written by pyarrow as the run goes, CSV or Parquet, a
folder that appears whole or not at all, read back by simulator.results.load."""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np
import pytest

import simulator.results.request_table as request_table
import simulator.results.files as result_files
import simulator.results.step_table as step_table
from simulator.results import load
from simulator.results.columns import REQUEST_COLUMNS, STEP_COLUMNS
from simulator.results.files import ResultFolder, summary_json
from simulator.runner import prepare, simulate
from simulator.scenario import validate_scenario
from tests.test_fast_paths import random_scenario


def scenario(**workload) -> dict:
    raw = random_scenario(6)   # vllm_v1 on the unit cost model
    raw["workload"] = {**raw["workload"], **workload}
    return raw


def run_into(folder: Path, raw: dict, file_format: str = "csv"):
    prepared = prepare(validate_scenario(raw))
    with ResultFolder(folder, file_format) as files:
        out = simulate(prepared, prepared.runs[0], files=files)
        files.finish(out.summary)
    return out


def read_csv(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_a_folder_holds_the_three_files_with_the_documented_columns(tmp_path):
    raw = scenario(prompt_len={"kind": "uniform", "low": 1, "high": 40},
                   output_len={"kind": "uniform", "low": 1, "high": 4}, num_requests=30)
    out = run_into(tmp_path / "run", raw)
    folder = tmp_path / "run"
    assert sorted(p.name for p in folder.iterdir()) == ["requests.csv", "steps.csv", "summary.json"]
    rows = read_csv(folder / "requests.csv")
    assert tuple(rows[0]) == REQUEST_COLUMNS
    assert [int(r[0]) for r in rows[1:]] == list(range(30))          # by request id
    table = out.requests.arrays()
    for row in rows[1:]:
        i = int(row[0])
        assert float(row[1]) == table["arrival_s"][i] and float(row[4]) == table["finish_s"][i]
        assert int(row[6]) == table["num_output_tokens"][i]
        assert float(row[9]) == (table["first_token_s"][i] - table["arrival_s"][i]) * 1000
        assert (row[10] == "") == (table["num_output_tokens"][i] <= 1)   # no TPOT for 1 token
    steps = read_csv(folder / "steps.csv")
    assert tuple(steps[0]) == STEP_COLUMNS and len(steps) == 1 + out.summary["num_steps"]
    assert json.loads((folder / "summary.json").read_text()) == json.loads(summary_json(out.summary))


def test_load_reads_csv_and_parquet_alike(tmp_path):
    raw = scenario(num_requests=25)
    run_into(tmp_path / "csv", raw)
    run_into(tmp_path / "parquet", raw, "parquet")
    a, b = load(tmp_path / "csv"), load(tmp_path / "parquet")
    assert sorted(p.name for p in (tmp_path / "parquet").iterdir()) == \
        ["requests.parquet", "steps.parquet", "summary.json"]
    assert list(a.requests.columns) == list(REQUEST_COLUMNS) and list(a.steps.columns) == list(STEP_COLUMNS)
    assert a.requests.equals(b.requests) and a.steps.equals(b.steps) and a.summary == b.summary
    assert str(a.requests["request_id"].dtype) == "int64" and str(a.steps["end_s"].dtype) == "float64"
    assert a.requests["tpot_ms"].isna().sum() == (a.requests["num_output_tokens"] <= 1).sum()


def test_tables_written_in_chunks_during_the_run_are_the_same_file(tmp_path, monkeypatch):
    raw = scenario(num_requests=39)
    run_into(tmp_path / "whole", raw)
    monkeypatch.setattr(request_table, "CHUNK_ROWS", 3)
    monkeypatch.setattr(step_table, "CHUNK_ROWS", 5)
    run_into(tmp_path / "chunked", raw)
    for name in ("requests.csv", "steps.csv", "summary.json"):
        assert (tmp_path / "whole" / name).read_bytes() == (tmp_path / "chunked" / name).read_bytes(), name


def test_csv_floats_round_trip_exactly(tmp_path):
    out = run_into(tmp_path / "run", scenario(num_requests=20))
    back = load(tmp_path / "run")
    table = out.requests.arrays()
    assert back.requests["arrival_s"].tolist() == table["arrival_s"].tolist()
    assert back.steps["end_s"].tolist() == out.steps.to_columns()["end_s"].tolist()


def test_same_run_gives_byte_identical_files(tmp_path):
    raw = scenario(num_requests=20)
    run_into(tmp_path / "a", raw)
    run_into(tmp_path / "b", raw)
    for name in ("requests.csv", "steps.csv", "summary.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_summary_json_is_sorted_and_strict():
    text = summary_json({"b": 1, "a": float("inf"), "c": np.float64(0.5)})
    assert text == '{\n  "a": "inf",\n  "b": 1,\n  "c": 0.5\n}\n'


def test_a_new_folder_replaces_an_older_one_whole(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "stale.txt").write_text("old")
    run_into(tmp_path / "run", scenario(num_requests=5))
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["requests.csv", "steps.csv", "summary.json"]


def test_a_failure_leaves_no_folder_and_the_older_one_intact(tmp_path):
    prepared = prepare(validate_scenario(scenario(num_requests=5)))
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "old.txt").write_text("old")
    for name in ("new", "keep"):
        with pytest.raises(RuntimeError, match="stop"):
            with ResultFolder(tmp_path / name) as files:
                simulate(prepared, prepared.runs[0], files=files)
                raise RuntimeError("stop")
    assert sorted(os.listdir(tmp_path)) == ["keep"]          # no half-written folder, no staging
    assert os.listdir(tmp_path / "keep") == ["old.txt"]


def test_a_chunk_that_cannot_be_written_stops_the_run_and_leaves_no_folder(tmp_path, monkeypatch):
    """Chunks are written on a thread: what writing one raised comes back to the run."""
    class FullDisk:
        def write_batch(self, batch):
            raise OSError(28, "No space left on device")
    monkeypatch.setattr(result_files.TableFile, "_open", lambda self: FullDisk())
    monkeypatch.setattr(step_table, "CHUNK_ROWS", 5)
    with pytest.raises(OSError, match="No space left"):
        run_into(tmp_path / "run", scenario(num_requests=20))
    assert os.listdir(tmp_path) == []


def test_a_result_dir_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="exists and is not a folder"):
        ResultFolder(tmp_path / "f")


def test_an_unknown_format_is_refused(tmp_path):
    with pytest.raises(ValueError, match="--format: 'xlsx'"):
        ResultFolder(tmp_path / "r", "xlsx")


def test_a_run_killed_by_sigkill_leaves_a_staging_folder_that_the_next_run_removes(tmp_path):
    # Issue 22: SIGKILL or SIGTERM of a run left its staging folder (up to 56 MB) for good.
    import signal
    import subprocess
    import sys
    import time
    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "out"
    scenario = root / "bench" / "v1_roofline.yaml"
    cmd = [sys.executable, "-m", "simulator.cli", "run", str(scenario), "--no-plots", "-o", str(out),
           "--set", "workload.num_requests=2000000"]
    child = subprocess.Popen(cmd, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not list(out.glob(f"vllm_v1.tmp-{child.pid}-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert list(out.glob("vllm_v1.tmp-*")) and not (out / "vllm_v1").exists()   # killed mid-run
    small = subprocess.run(cmd[:-1] + ["workload.num_requests=20"], cwd=root, capture_output=True)
    assert small.returncode == 0, small.stderr
    assert sorted(p.name for p in out.iterdir()) == ["vllm_v1"]   # the stale staging folder went


def test_a_live_processes_staging_folder_is_kept(tmp_path):
    from simulator.results.atomic import remove_stale_siblings
    mine = tmp_path / f"out.tmp-{os.getpid()}-abc"
    unknown = tmp_path / "out.tmp-notapid"
    for folder in (mine, unknown):
        folder.mkdir()
    remove_stale_siblings(tmp_path / "out")
    assert mine.is_dir() and unknown.is_dir()
