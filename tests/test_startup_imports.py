"""Start-up counts when the simulator runs in loops: each command imports only what it needs.

Each check runs a fresh interpreter and lists the modules it ended up with; none is timed.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Heavy packages no `servesim run --no-plots` needs (plots, fitting, calibration, sweeps).
NOT_FOR_RUN = ("matplotlib", "pandas", "scipy", "torch", "ray", "tqdm", "jsonschema")

RUN_AND_LIST_MODULES = """
import json, sys
from simulator.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
finally:
    sys.stdout.flush()
    print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def modules_after(*args: str) -> set[str]:
    """The modules a fresh `servesim ARGS` process has imported when it finishes."""
    proc = subprocess.run([sys.executable, "-c", RUN_AND_LIST_MODULES, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stderr.strip().splitlines()[-1]))


def top_level(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def write_scenario(tmp_path: Path, cost_model: str) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(f"""\
name: tiny
model: llama-3.1-8b
hardware: h100-sxm
cost_model: {cost_model}
workload:
  arrival: {{kind: poisson, rate: 4.0}}
  prompt_len: {{kind: fixed, value: 64}}
  output_len: {{kind: fixed, value: 8}}
  num_requests: 8
schedulers:
  - {{preset: vllm_v1}}
""")
    return path


def test_run_without_plots_imports_no_plotting_or_fitting_package(tmp_path: Path):
    modules = modules_after("run", str(write_scenario(tmp_path, "{kind: unit}")), "--no-plots",
                            "-o", str(tmp_path / "out"))
    assert "simulator.engine.simulation" in modules          # precondition: the run really ran
    assert top_level(modules).isdisjoint(NOT_FOR_RUN), sorted(top_level(modules) & set(NOT_FOR_RUN))
    assert not any(m.startswith("simulator.plots") for m in modules)


@pytest.mark.parametrize("kind, needed, not_needed", [
    ("{kind: unit}", "cost_models.unit", ("cost_models.roofline", "cost_models.profiles")),
    ("{kind: roofline}", "cost_models.roofline", ("cost_models.profiles", "cost_models.profiled")),
    ("{kind: profiled, profile: h200-llama-3.1-8b-eager}", "cost_models.parametric",   # parametric form
     ("cost_models.profiled", "cost_models.roofline")),
    ("{kind: profiled, profile: vidur-a100-llama-2-7b}", "cost_models.profiled",   # roofline attention
     ("cost_models.attention_grid",)),
    ("{kind: profiled, profile: rtx-4090-llama-3.1-8b}", "cost_models.attention_grid", ()),   # a grid
])
def test_run_imports_only_its_own_cost_model_kind(tmp_path: Path, kind, needed, not_needed):
    modules = modules_after("run", str(write_scenario(tmp_path, kind)), "--no-plots",
                            "-o", str(tmp_path / "out"))
    assert needed in modules
    assert modules.isdisjoint(not_needed), sorted(modules & set(not_needed))


def test_a_bad_value_gets_a_one_line_error_and_exit_2(tmp_path: Path):
    path = write_scenario(tmp_path, "{kind: unit}")
    proc = subprocess.run([sys.executable, "-m", "simulator.cli", "run", str(path), "--no-plots",
                           "-o", str(tmp_path / "out"), "--set", "workload.arrival.rate=0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stderr) == (2, "error: workload.arrival.rate: 0 is not allowed: "
                                                 "Input should be greater than 0\n")


def test_listing_commands_import_neither_numpy_nor_pydantic():
    modules = modules_after("models")
    assert "cost_models.model_spec" in modules
    assert top_level(modules).isdisjoint({"numpy", "pydantic", "simpy", *NOT_FOR_RUN})


RUN_AND_SHOW_BLAS_THREADS = """
import os, sys
from simulator.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
finally:
    threads = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else -1
    print(f"threads={threads}", file=sys.stderr)
    print("OPENBLAS_NUM_THREADS=" + os.environ.get("OPENBLAS_NUM_THREADS", "unset"), file=sys.stderr)
"""


@pytest.mark.parametrize("preset, expected", [(None, "1"), ("3", "3")])
def test_run_keeps_blas_to_one_thread_unless_told(tmp_path: Path, preset, expected):
    """numpy's OpenBLAS starts a thread per core as it loads unless told otherwise; a simulation
    uses none of them. (The process's thread count is not a check: pyarrow keeps a pool of its
    own for the result files.)"""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if preset:
        env["OPENBLAS_NUM_THREADS"] = preset
    proc = subprocess.run([sys.executable, "-c", RUN_AND_SHOW_BLAS_THREADS, "run",
                           str(write_scenario(tmp_path, "{kind: unit}")), "--no-plots",
                           "-o", str(tmp_path / "out")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    *_, threads, setting = proc.stderr.strip().splitlines()
    assert setting == f"OPENBLAS_NUM_THREADS={expected}"
