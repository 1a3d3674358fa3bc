"""Issue 4's accuracy bounds on the measured vLLM 0.19 run of Llama-3.1-8B on one RTX PRO 6000.

The cost model is the shipped kernel profile of that GPU (LLMServingSim's per-layer kernel tables,
cost_models/profiles/rtx-pro-6000-llama-3.1-8b.json): nothing in it was fitted to this run's
latencies. Bounds: |error| <= 3% on mean TTFT, 1% on mean TPOT, 1.5% on mean E2E, 5% on every p99
(the best published simulator: -4.0%, -1.0%, -1.8%). Measured when written: +0.94, +0.93, +0.89;
p99 TTFT +2.67, TPOT +2.10, E2E +1.15 (+1.26, +0.99, +1.02 before unprofiled attention grid cells
were filled linearly instead of on log2 axes: held-out attention MAPE 5.25% -> 3.91%).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from simulator.validate.pipeline import ValidateRequest, run_validation

REFERENCE = Path(__file__).resolve().parents[1] / ".." / "shared" / "reference"
RTX_RUN = REFERENCE / "llmservingsim" / "vllm-runs" / "RTXPRO6000-Llama-3.1-8B"
BOUNDS_PCT = {"mean_ttft_ms": 3.0, "mean_tpot_ms": 1.0, "mean_e2el_ms": 1.5,
              "p99_ttft_ms": 5.0, "p99_tpot_ms": 5.0, "p99_e2el_ms": 5.0}


def _errors_pct(tmp_path_factory, cost_model: str) -> dict[str, float]:
    """servesim validate of the run with ``cost_model``: metric -> signed error %."""
    if not RTX_RUN.is_dir():
        pytest.skip(f"{RTX_RUN} absent: the LLMServingSim measured run is not on this machine")
    validation = run_validation(ValidateRequest(run=RTX_RUN, cost_model=cost_model,
                                                out_dir=tmp_path_factory.mktemp("rtx"), plots=False))
    assert validation.output.summary["completed"] == 300
    return {row.key: row.error_pct for row in validation.rows}


@pytest.fixture(scope="module")
def errors_pct(tmp_path_factory) -> dict[str, float]:
    return _errors_pct(tmp_path_factory, "rtx-pro-6000-llama-3.1-8b")


@pytest.mark.parametrize("metric", list(BOUNDS_PCT))
def test_rtx_pro_6000_llama_run_is_within_the_issue_bound(errors_pct, metric):
    assert abs(errors_pct[metric]) <= BOUNDS_PCT[metric], f"{metric}: {errors_pct[metric]:+.2f}%"


# Issue 18: the physics model of that GPU (cost_models/profiles/physics-rtx-pro-6000-kernels.json,
# fitted on the kernel sums of Llama-3.1-8B, Qwen3-32B and Qwen3-30B-A3B, nothing of this run).
# The acceptance asks 3% on the three means (the figures: cost_models/profiles/README.md).
PHYSICS_BOUNDS_PCT = {"mean_ttft_ms": 3.0, "mean_tpot_ms": 3.0, "mean_e2el_ms": 3.0}


@pytest.fixture(scope="module")
def physics_errors_pct(tmp_path_factory) -> dict[str, float]:
    return _errors_pct(tmp_path_factory, "physics-rtx-pro-6000-kernels")


@pytest.mark.parametrize("metric", list(PHYSICS_BOUNDS_PCT))
def test_the_physics_model_of_the_gpu_predicts_the_run(physics_errors_pct, metric):
    assert abs(physics_errors_pct[metric]) <= PHYSICS_BOUNDS_PCT[metric], f"{metric}: {physics_errors_pct[metric]:+.2f}%"
