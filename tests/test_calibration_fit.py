"""The harness runs in CI on CPU and its output fits into a cost model a scenario can run (issue 3).

One quick CPU run of tiny-llama (session fixture, ~20 s on two shared cores; skipped without
torch) feeds two tests: ``servesim fit`` prints a finite held-out MAPE for every family, and the
file it writes times the steps of a simulated run exactly as the model it holds. The grid checks
need no torch.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from calibration.grid import cpu_grid, quick_grid
from cost_models.batch_shape import BatchShape
from cost_models.fit.parametric_fit import MIN_SHAPES_PER_TERM
from cost_models.fit.report import FAMILIES, holdout_mask
from cost_models.parametric import TERMS
from cost_models.profiles import load_cost_model
from simulator.cli import main
from simulator.runner import prepare, simulate
from simulator.scenario import validate_scenario

PROMPT_TOKENS, OUTPUT_TOKENS = 64, 4
_HELD_OUT_LINE = re.compile(r"^\s+(prefill|decode|mixed)\s+n=(\d+)\s+MAPE\s+([-\d.naNinf]+)%", re.M)


def test_quick_grid_leaves_every_family_a_held_out_shape_and_enough_to_fit():
    grid = quick_grid()
    held_out = holdout_mask(len(grid), 5)
    assert len(grid) - held_out.sum() >= MIN_SHAPES_PER_TERM * len(TERMS)
    assert {s.kind for s, h in zip(grid, held_out) if h} == set(FAMILIES)


def test_cpu_grid_stays_within_the_vllm_cpu_runs_limits():
    """max_num_batched_tokens 2048 and max_num_seqs 32 (../shared/reference/vllm-cpu/README.md)."""
    grid = cpu_grid()
    assert [sum(s.kind == k for s in grid) for k in ("decode", "prefill", "mixed")] == [30, 14, 4]
    assert max(s.tokens for s in grid) == 2048
    assert max(s.n_decode + (s.chunk > 0) for s in grid) == 32


def test_calibrate_refuses_two_different_grids(tmp_path):
    result = CliRunner().invoke(main, ["calibrate", "--model", "tiny-llama", "--quick", "--grid", "cpu",
                                       "-o", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "--quick and --grid cpu choose different grids; give one" in result.output
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="session")
def quick_timings(tmp_path_factory) -> Path:
    """timings.csv + meta.json of the quick grid, 2 repetitions after 1 warm-up each."""
    torch = pytest.importorskip("torch", reason="the calibration harness needs torch (pip install '.[calibration]')")
    out = tmp_path_factory.mktemp("calibration") / "quick"
    # One thread, as in the vLLM-CPU runs: two threads on two cores that other work shares thrash
    # (the same run took 6x longer).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = CliRunner().invoke(main, ["calibrate", "--model", "tiny-llama", "--device", "cpu",
                                           "--grid", "quick", "--repeats", "2", "--warmup", "1",
                                           "-o", str(out)])
    finally:
        torch.set_num_threads(threads)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="session")
def fitted(quick_timings: Path) -> tuple[str, Path]:
    """What ``servesim fit DIR -o model.json`` prints, and the file it writes."""
    model_path = quick_timings.parent / "model.json"
    result = CliRunner().invoke(main, ["fit", str(quick_timings), "-o", str(model_path)])
    assert result.exit_code == 0, result.output
    return result.output, model_path


def test_fit_prints_a_finite_held_out_mape_for_every_family(fitted):
    output, model_path = fitted
    print(output)
    printed = {family: (int(n), float(mape)) for family, n, mape in _HELD_OUT_LINE.findall(output)}
    assert set(printed) == set(FAMILIES)
    # 26 quick shapes, every 5th held out: 2 decode, 2 prefill and 1 mixed shape (calibration/grid.py)
    assert {f: n for f, (n, _) in printed.items()} == {"decode": 2, "prefill": 2, "mixed": 1}
    assert all(math.isfinite(mape) and mape >= 0 for _, mape in printed.values())
    recorded = json.loads(model_path.read_text())["holdout"]["errors"]
    assert {f: recorded[f]["mape_pct"] for f in FAMILIES} == pytest.approx(
        {f: mape for f, (_, mape) in printed.items()}, abs=0.01)  # printed to 2 decimals


def test_fitted_file_times_every_step_of_a_scenario_run(fitted):
    """One request alone on the engine: its first token comes after one prefill step and each
    later token after one decode step, each costing what the fitted model says."""
    _, model_path = fitted
    scenario = validate_scenario({
        "name": "harness-fit", "seed": 0, "model": "tiny-llama", "hardware": "l4",
        "cost_model": {"kind": "profiled", "path": str(model_path)},
        "engine": {"block_size": 128, "num_gpu_blocks": 1024, "max_model_len": 2048},
        "workload": {"arrival": {"kind": "inf"}, "prompt_len": {"kind": "fixed", "value": PROMPT_TOKENS},
                     "output_len": {"kind": "fixed", "value": OUTPUT_TOKENS}, "num_requests": 1},
        "schedulers": [{"preset": "vllm_v1", "max_num_seqs": 32, "max_num_batched_tokens": 2048}],
    })
    prepared = prepare(scenario)
    request = simulate(prepared, prepared.runs[0]).requests.rows()[0]
    model = load_cost_model(json.loads(model_path.read_text()))
    prefill_s = model.step_time_s(BatchShape.of([PROMPT_TOKENS], [0]))
    decodes_s = sum(model.step_time_s(BatchShape.of([1], [PROMPT_TOKENS + i]))
                    for i in range(OUTPUT_TOKENS - 1))
    assert request.num_output_tokens == OUTPUT_TOKENS
    assert request.first_token_s - request.arrival_s == pytest.approx(prefill_s, rel=1e-9)
    assert request.finish_s - request.arrival_s == pytest.approx(prefill_s + decodes_s, rel=1e-9)
