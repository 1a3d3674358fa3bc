"""The Python API: ``simulator.run`` returns what `servesim run` writes, as DataFrames, and writes
nothing unless told where."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import simulator
from simulator.results import load
from simulator.results.load import RunResults
from simulator.scenario import ScenarioError
from simulator.scenario.file import read_raw_scenario

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "scenarios" / "toy_unit.yaml"


def test_importing_simulator_loads_nothing_else():
    code = ("import json, sys, simulator; "
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('simulator', 'numpy', 'pandas', 'pydantic', 'simpy'))))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=True)
    assert json.loads(proc.stdout) == ["simulator"]


def test_run_returns_each_scheduler_in_file_order_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    results = simulator.run(TOY)
    assert list(results) == ["static", "orca"] and os.listdir(tmp_path) == []
    static = results["static"]
    assert isinstance(static, RunResults) and isinstance(static.requests, pd.DataFrame)
    assert len(static.requests) == 16 and len(static.steps) == static.summary["num_steps"] == 100
    assert results["orca"].summary["num_steps"] == 77   # the toy's known answers (README)
    assert static.summary["label"] == "static" and static.summary["request_rate"] == "inf"


def test_in_memory_results_equal_the_files_servesim_run_writes(tmp_path):
    written = simulator.run(TOY, out_dir=tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["orca", "static"]
    in_memory = simulator.run(TOY)
    for label, result in in_memory.items():
        from_files = load(tmp_path / "out" / label)
        pd.testing.assert_frame_equal(result.requests, from_files.requests)
        pd.testing.assert_frame_equal(result.steps, from_files.steps)
        assert result.summary == from_files.summary == written[label].summary


def test_a_mapping_takes_overrides_and_a_choice_of_schedulers():
    raw = read_raw_scenario(TOY)
    results = simulator.run(raw, overrides=["workload.num_requests=5"], schedulers=["orca"],
                            save_detailed=True)
    assert list(results) == ["orca"]
    orca = results["orca"]
    assert len(orca.requests) == 5 and orca.summary["input_lens"] == orca.requests["num_prompt_tokens"].tolist()
    assert raw["workload"]["num_requests"] == 16     # the caller's mapping is left as it was


def test_a_mistake_raises_the_one_line_the_command_prints():
    with pytest.raises(ScenarioError, match=r"^workload\.arrival\.rate: 0 is not allowed"):
        simulator.run(read_raw_scenario(TOY), overrides=["workload.arrival={kind: poisson, rate: 0}"])
    with pytest.raises(ScenarioError, match=r"^--scheduler: 'vllm' is not a scheduler of toy-unit"):
        simulator.run(TOY, schedulers=["vllm"])
