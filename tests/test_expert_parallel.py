"""Expert parallelism (docs/expert-parallel-semantics.md): the busiest rank's expert load, worked by
hand, and what the cost models and the scenario make of vLLM's --enable-expert-parallel."""
from __future__ import annotations

import itertools
import math
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml

from cost_models.batch_shape import BatchShape
from cost_models.hardware import load_hardware
from cost_models.model_spec import load_model
from cost_models.moe import expected_distinct_experts, expected_max_binomial, expert_load
from cost_models.physics import PhysicsCostModel
from cost_models.physics_file import load_physics
from cost_models.profiles import PROFILES_DIR, build_profiled, read_model_file
from cost_models.roofline import RooflineCostModel

ROOT = Path(__file__).resolve().parents[1]


def _binomial_cdf(n: int, p: float, x: int) -> float:
    return sum(math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(x + 1)) if x >= 0 else 0.0


def _max_by_pmf(n: int, p: float, draws: int) -> float:
    """E[max] as sum of x P(max = x), P(max = x) = F(x)^N - F(x - 1)^N: another form than the code's."""
    return sum(x * (_binomial_cdf(n, p, x) ** draws - _binomial_cdf(n, p, x - 1) ** draws) for x in range(n + 1))


@pytest.mark.parametrize("n, p, draws", [(4, 0.3, 3), (8, 0.25, 4), (32, 0.0625, 4), (16, 0.5, 8), (5, 0.9, 2)])
def test_the_expected_maximum_of_binomials_against_its_distribution(n, p, draws):
    assert expected_max_binomial(n, p, draws) == pytest.approx(_max_by_pmf(n, p, draws), rel=1e-12)


def test_the_expected_maximum_by_enumeration_and_in_the_normal_limit():
    # Three Binomial(4, 0.3) draws, every outcome enumerated.
    pmf = [math.comb(4, k) * 0.3**k * 0.7 ** (4 - k) for k in range(5)]
    enumerated = sum(max(o) * pmf[o[0]] * pmf[o[1]] * pmf[o[2]] for o in itertools.product(range(5), repeat=3))
    assert expected_max_binomial(4, 0.3, 3) == pytest.approx(enumerated, rel=1e-12)
    # One draw is the mean; many trials tend to mean + sd x E[max of N standard normals] (1/sqrt(pi) for 2).
    assert expected_max_binomial(1000, 0.2, 1) == 200.0
    assert expected_max_binomial(65536, 0.5, 2) == pytest.approx(32768 + 128 / math.sqrt(math.pi), rel=1e-5)


def test_expert_load_is_the_mean_field_count_unless_experts_are_placed_whole():
    # Qwen3-30B-A3B's 128 experts, top 8. Tensor parallel, or one rank, or no tokens: T and E(1 - (1 - k/E)^T).
    moe = load_model("qwen3-30b-a3b")
    assert moe.expert_parallel_ranks(4) == 1 and moe.with_expert_parallel(True).expert_parallel_ranks(4) == 4
    for tokens in (1, 8, 4096):
        distinct = expected_distinct_experts(tokens, 128, 8)
        assert expert_load(tokens, 128, 8, moe.expert_parallel_ranks(4)) == (tokens, distinct)
        one_rank = moe.with_expert_parallel(True).expert_parallel_ranks(1)
        assert expert_load(tokens, 128, 8, one_rank) == (tokens, distinct)
    assert expert_load(0, 128, 8, 4) == (0, 0.0)
    # One token over 4 expert-parallel ranks: a rank's passes are Binomial(8, 1/4), its experts
    # Binomial(32, 8/128); the busiest rank's, x 4 ranks (passes as tokens: over top_k 8).
    routed, distinct = expert_load(1, 128, 8, 4)
    assert routed == pytest.approx(4 * _max_by_pmf(8, 0.25, 4) / 8, rel=1e-12)
    assert distinct == pytest.approx(4 * _max_by_pmf(32, 8 / 128, 4), rel=1e-12)
    assert (routed, distinct) == pytest.approx((1.638105, 13.807945), rel=1e-6)   # vs 1 and 8 spread evenly
    # 4,096 tokens touch every expert and spread their passes within 1%.
    routed, distinct = expert_load(4096, 128, 8, 4)
    assert distinct == pytest.approx(128.0) and 4096 < routed < 1.01 * 4096


def test_the_roofline_prices_the_busiest_rank_under_expert_parallelism():
    model, h100 = load_model("qwen3-30b-a3b"), load_hardware("h100-sxm")
    ep = model.with_expert_parallel(True)
    decode = BatchShape.of([1] * 4, [1000] * 4)
    tp4, ep4 = RooflineCostModel(model, h100, 4), RooflineCostModel(ep, h100, 4)
    assert ep4.step_time_s(decode) > tp4.step_time_s(decode)
    # At one rank there is nothing to place: the same time, to the bit.
    assert RooflineCostModel(ep, h100, 1).step_time_s(decode) == RooflineCostModel(model, h100, 1).step_time_s(decode)
    # The excess is the experts' alone: the busiest rank's distinct experts over the mean rank's.
    k = tp4._k
    _, distinct = expert_load(4, 128, 8, 4)
    mean_distinct = expected_distinct_experts(4, 128, 8)
    assert ep4.step_time_s(decode) - tp4.step_time_s(decode) == pytest.approx(k.expert_s * (distinct - mean_distinct),
                                                                              rel=1e-9)


def test_the_physics_model_prices_the_busiest_rank_under_expert_parallelism():
    data = read_model_file(PROFILES_DIR / "physics-rtx-pro-6000-kernels.json")
    model, gpu = load_model("qwen3-30b-a3b"), load_hardware("rtx-pro-6000")
    tp2 = load_physics(data, model, gpu, 2)
    ep2 = load_physics(data, model.with_expert_parallel(True), gpu, 2)
    assert isinstance(ep2, PhysicsCostModel)
    decode = BatchShape.of([1] * 2, [500] * 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the file's fitted range, said once, is not the point here
        assert ep2.step_time_s(decode) > tp2.step_time_s(decode)


def test_expert_parallelism_is_refused_where_it_cannot_be_priced():
    with pytest.raises(ValueError, match=r"engine.enable_expert_parallel: true, but llama-3.1-8b has no experts"):
        load_model("llama-3.1-8b").with_expert_parallel(True)
    table = "rtx-pro-6000-qwen3-30b-a3b"
    if not (PROFILES_DIR / f"{table}.json").is_file():
        pytest.skip(f"no shipped kernel-table profile {table}")
    with pytest.raises(ValueError, match=r"engine.enable_expert_parallel: kernel tables"):
        build_profiled({"profile": table}, load_model("qwen3-30b-a3b").with_expert_parallel(True),
                       load_hardware("rtx-pro-6000"), 2)


def _run(tmp_path: Path, engine: dict, model: str = "qwen3-30b-a3b") -> subprocess.CompletedProcess:
    scenario = {"name": "ep", "model": model, "hardware": "h100-sxm", "engine": engine,
                "workload": {"num_requests": 20, "arrival": {"kind": "poisson", "rate": 5.0},
                             "prompt_len": {"kind": "fixed", "value": 64},
                             "output_len": {"kind": "fixed", "value": 8}},
                "schedulers": [{"preset": "vllm_v1"}]}
    path = tmp_path / "ep.yaml"
    path.write_text(yaml.safe_dump(scenario))
    return subprocess.run([sys.executable, "-m", "simulator.cli", "run", str(path), "--no-plots",
                           "-o", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_a_scenario_turns_expert_parallelism_on_or_says_why_not(tmp_path):
    ok = _run(tmp_path, {"tensor_parallel_size": 2, "enable_expert_parallel": True})
    assert ok.returncode == 0, ok.stderr
    for engine, model, message in (
            ({"tensor_parallel_size": 2, "enable_expert_parallel": True, "num_replicas": 2}, "qwen3-30b-a3b",
             "engine.enable_expert_parallel: true with engine.num_replicas 2"),
            ({"tensor_parallel_size": 2, "enable_expert_parallel": True}, "llama-3.1-8b",
             "engine.enable_expert_parallel: true, but llama-3.1-8b has no experts")):
        bad = _run(tmp_path, engine, model)
        assert bad.returncode == 2 and message in bad.stderr and "Traceback" not in bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1
    # E2: MoE replicas without the flag run, and say what they leave out.
    replicas = _run(tmp_path, {"tensor_parallel_size": 2, "num_replicas": 2})
    assert replicas.returncode == 0 and "vLLM's data-parallel ranks share the MoE layers" in replicas.stderr
