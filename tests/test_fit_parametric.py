"""The parametric step-cost fit: coefficient recovery, held-out error on real timings, bad input."""
from pathlib import Path

import numpy as np
import pytest

from cost_models.batch_shape import BatchShape
from cost_models.fit.nnls import nnls
from cost_models.fit.parametric_fit import fit_parametric
from cost_models.fit.report import format_errors
from cost_models.fit.run import FitRequest, run_fit
from cost_models.importers import StepTimings, read_step_timings, read_vllm_log
from cost_models.importers.forms import Source
from cost_models.parametric import TERMS, ParametricCostModel

REFERENCE = Path(__file__).resolve().parents[1] / ".." / "shared" / "reference"
TRUE = dict(zip(TERMS, (2e-3, 1e-5, 2e-6, 3e-8, 5e-6, 2e-9, 1e-7, 1e-4, 5e-6, 3e-4), strict=True))
TRUE_KNEE = 64.0


def _random_shapes(rng: np.random.Generator, count: int) -> list[BatchShape]:
    shapes = []
    for _ in range(count):
        num_decodes = int(rng.integers(0, 257))
        num_prefills = int(rng.integers(0, 3)) if num_decodes else int(rng.integers(1, 3))
        new = list(rng.integers(2, 2049, num_prefills)) + [1] * num_decodes
        ctx = list(rng.integers(0, 4097, num_prefills)) + list(rng.integers(0, 8193, num_decodes))
        shapes.append(BatchShape.of(new, ctx, rng.random(len(new)) < 0.8))
    return shapes


def test_nnls_matches_least_squares_when_unconstrained_and_clips_negative_coefficients():
    a = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    assert np.allclose(nnls(a, np.array([1.0, 2.0, 3.0])), [1.0, 2.0])
    # unconstrained optimum (2, -2) would be negative in x1: NNLS pins x1 at 0 and refits x0 to 1
    assert np.allclose(nnls(a, np.array([2.0, -2.0, 0.0])), [1.0, 0.0])


def test_fit_recovers_known_coefficients_within_one_percent():
    rng = np.random.default_rng(7)
    shapes = _random_shapes(rng, 400)
    truth = ParametricCostModel(TRUE, TRUE_KNEE)
    times = np.array([truth.step_time_s(s) for s in shapes]) * (1 + 1e-4 * rng.standard_normal(len(shapes)))
    fit = fit_parametric(StepTimings(Source("synthetic", {}), shapes, times), holdout_every=5)
    for term, value in TRUE.items():
        assert fit.model.coefficients[term] == pytest.approx(value, rel=0.01), term
    assert fit.model.knee_tokens == pytest.approx(TRUE_KNEE, rel=0.01)
    assert fit.holdout_errors["all"]["mape_pct"] < 0.1


def test_time_loss_prices_each_shape_at_its_mean_and_the_relative_loss_near_its_median():
    """Right-skewed noise (lognormal, sigma 0.3: mean 4.6% above the median): a sum of steps needs
    the mean, which least squares in seconds gives; the MAPE-optimal fit sits near the median."""
    rng = np.random.default_rng(11)
    shapes = _random_shapes(rng, 2000)
    truth = ParametricCostModel(TRUE, TRUE_KNEE)
    times = np.array([truth.step_time_s(s) for s in shapes]) * rng.lognormal(0.0, 0.3, len(shapes))
    timings = StepTimings(Source("synthetic", {}), shapes, times)
    by_time = fit_parametric(timings, holdout_every=5, loss="time").holdout_errors["all"]["total_error_pct"]
    relative = fit_parametric(timings, holdout_every=5).holdout_errors["all"]["total_error_pct"]
    assert abs(by_time) < 1.5 and relative < -3.0


def test_unknown_loss_is_one_line_naming_the_choices():
    with pytest.raises(ValueError, match="loss: 'mean' is not one of relative, time"):
        fit_parametric(StepTimings(Source("synthetic", {}), [BatchShape.of([1], [1])], np.ones(1)), loss="mean")


def _h200(model: str, mode: str):
    path = REFERENCE / "h200" / "steps.csv"
    if not path.is_file():
        pytest.skip(f"{path} absent: the H200 reference timings are not on this machine")
    return read_step_timings(path, model, mode, hardware="h200")


@pytest.mark.parametrize("model", ["llama-3.1-8b", "qwen3-8b"])
def test_h200_cuda_graph_held_out_mape_is_within_5_percent_per_family(model):
    outcome = run_fit(FitRequest(REFERENCE / "h200" / "steps.csv", model=model, mode="cuda_graph", hardware="h200")) \
        if (REFERENCE / "h200" / "steps.csv").is_file() else _h200(model, "cuda_graph")
    print(outcome.report)  # includes the roofline's error on the same shapes, not hidden
    errors = outcome.data["holdout"]["errors"]
    assert set(errors) == {"prefill", "decode", "mixed", "all"}
    for family in ("prefill", "decode", "mixed"):
        assert errors[family]["mape_pct"] <= 5.0, family
    roofline = outcome.data["roofline_errors"]
    assert roofline["all"]["n"] == 71  # the roofline is checked on every shape and reported


def test_h200_llama_2_7b_has_decode_only_cuda_graph_and_all_families_eager():
    graph = fit_parametric(_h200("llama-2-7b", "cuda_graph"))
    eager = fit_parametric(_h200("llama-2-7b", "eager"))
    print(format_errors("llama-2-7b cuda_graph held out", graph.holdout_errors))
    print(format_errors("llama-2-7b eager held out", eager.holdout_errors))
    assert set(graph.holdout_errors) == {"decode", "all"}
    assert graph.holdout_errors["decode"]["mape_pct"] <= 5.0
    assert set(eager.holdout_errors) == {"prefill", "decode", "mixed", "all"}


def _best_possible_mape(timings: StepTimings, mask: np.ndarray) -> float:
    """The lowest per-step MAPE ANY step-cost model can reach on the masked steps.

    A model sees only the BatchShape, so steps with the same shape get the same prediction; the
    prediction minimising mean |p / t - 1| over a group is the median of its times weighted by
    1 / t. Fitted on the very steps it is scored on, this is a lower bound, not an estimate.
    """
    groups: dict = {}
    for i in np.nonzero(mask)[0]:
        s = timings.shapes[i]
        groups.setdefault((tuple(s.new_tokens), tuple(s.context_tokens)), []).append(timings.time_s[i])
    errors = []
    for times in groups.values():
        t = np.sort(times)
        cumulative = np.cumsum(1 / t)
        best = t[np.searchsorted(cumulative, cumulative[-1] / 2)]
        errors += list(np.abs(best / t - 1))
    return float(np.mean(errors) * 100)


def _group_mape(timings: StepTimings, predicted: np.ndarray, mask: np.ndarray) -> float:
    """MAPE of the predicted group medians against the measured ones, weighted by group size."""
    groups: dict = {}
    for i in np.nonzero(mask)[0]:
        s = timings.shapes[i]
        groups.setdefault((s.num_prefill_tokens // 64, s.num_decode_seqs), []).append((timings.time_s[i], predicted[i]))
    errs = [(abs(np.median([p for _, p in v]) / np.median([t for t, _ in v]) - 1), len(v)) for v in groups.values()]
    return float(np.average([e for e, _ in errs], weights=[n for _, n in errs]) * 100)


def _cpu_log(name: str) -> StepTimings:
    path = REFERENCE / "vllm-cpu" / name
    if not path.is_file():
        pytest.skip(f"{path} absent: the vLLM-CPU reference log is not on this machine")
    return read_vllm_log(path)


# Held-out per-step MAPE of the parametric fit (every 5th step held out), and the bound below it.
CPU_LOG_BOUNDS = {"run2_closed_loop_iterations.csv": 12.5, "run2_poisson_iterations.csv": 11.0}


@pytest.mark.parametrize("name", sorted(CPU_LOG_BOUNDS))
def test_vllm_cpu_log_predicts_held_out_steps_as_well_as_the_log_allows(name):
    """The issue asks for <= 10% per step; on the closed-loop log no step-cost model gets there.

    The CPU was shared while vLLM ran: one decode of one sequence took 16 to 52 ms (median 29 ms)
    with the same batch shape, drifting over minutes (lag-1 autocorrelation 0.75), and such steps
    are 60% of the closed-loop log. Giving every distinct batch shape its MAPE-optimal time,
    chosen on the held-out steps themselves, still leaves 12.2% there: the floor, printed. (On the
    Poisson log the same bound is 9.9%, but loose: many of its shapes occur once, and a shape seen
    once gets its own time.) Decode contexts rebuilt from request ages instead of the KV usage
    change nothing (the fit puts no weight on decode context over these 256-384 token contexts).
    Measured: 12.3% and 10.6% (14.1% and 10.8% before the sqrt(sequences) term), within a point
    of the floor, and within 10% on shape-group medians, where the noise averages out.
    """
    timings = _cpu_log(name)
    fit = fit_parametric(timings, holdout_every=5)
    floor = _best_possible_mape(timings, fit.held_out)
    grouped = _group_mape(timings, fit.predicted_s, fit.held_out)
    per_step = fit.holdout_errors["all"]["mape_pct"]
    print(f"{name}: held-out per-step MAPE {per_step:.2f}% (best possible {floor:.2f}%), "
          f"group-median MAPE {grouped:.1f}%")
    assert floor <= per_step <= min(floor + 1.0, CPU_LOG_BOUNDS[name])
    assert grouped <= 10.0


OUR_QUIET_LOG = Path(__file__).resolve().parent / "data" / "vllm-cpu" / "run4_closed_loop_iterations.csv"


def test_vllm_cpu_log_from_a_quiet_machine_predicts_held_out_steps_within_10_percent():
    """The issue's bound, on our own vLLM-CPU run (tests/data/vllm-cpu/README.md) taken while
    nothing else ran on the machine: every 5th step held out, MAPE per step <= 10% (9.9%
    measured). The same noise-floor check as above keeps the figure honest."""
    timings = read_vllm_log(OUR_QUIET_LOG)
    fit = fit_parametric(timings, holdout_every=5)
    per_step = fit.holdout_errors["all"]["mape_pct"]
    floor = _best_possible_mape(timings, fit.held_out)
    print(f"{OUR_QUIET_LOG.name}: held-out per-step MAPE {per_step:.2f}% (best possible {floor:.2f}%)")
    assert per_step <= 10.0
    for family in ("prefill", "decode", "mixed"):
        assert fit.holdout_errors[family]["mape_pct"] <= 10.0, family


def test_vllm_cpu_fit_on_closed_loop_predicts_the_poisson_log():
    """Another run's log (other arrivals, other load on the shared CPU): 11.7% per step against a
    10.2% floor (11.4% before the sqrt(sequences) term, which fits the closed loop's own steps)."""
    closed, poisson = _cpu_log("run2_closed_loop_iterations.csv"), _cpu_log("run2_poisson_iterations.csv")
    model = fit_parametric(closed, holdout_every=0).model
    predicted = np.array([model.step_time_s(s) for s in poisson.shapes])
    every = np.ones(len(predicted), bool)
    per_step = float(np.mean(np.abs(predicted / poisson.time_s - 1)) * 100)
    grouped, floor = _group_mape(poisson, predicted, every), _best_possible_mape(poisson, every)
    print(f"closed loop -> poisson: per-step MAPE {per_step:.2f}% (best possible {floor:.2f}%), "
          f"group-median {grouped:.1f}%")
    assert per_step <= 12.5
    assert grouped <= 10.0


@pytest.mark.parametrize("content, problem", [
    ("model,kind,chunk,prefill_ctx,n_decode,decode_ctx,tokens,mode,rep\nm,decode,0,0,1,8,1,eager,0\n",
     "missing column time_ms"),
    ("model,kind,chunk,prefill_ctx,n_decode,decode_ctx,tokens,mode,rep,time_ms\nm,decode,0,0,1,8,1,eager,0,-1\n",
     "column time_ms: '-1' is not a positive finite number"),
    ("model,kind,chunk,prefill_ctx,n_decode,decode_ctx,tokens,mode,rep,time_ms\nm,decode,0,0,1,8,1,eager,0,nan\n",
     "column time_ms: 'nan' is not a positive finite number"),
    ("model,kind,chunk,prefill_ctx,n_decode,decode_ctx,tokens,mode,rep,time_ms\nm,decode,0,0,1,8,1,eager,0,1.5\n",
     "only 1 distinct batch shapes to fit on; a fit needs at least 20"),
    ("model,kind,chunk,n_decode,decode_ctx,tokens,mode,time_ms\nm,decode,0,1,8,1,eager,1\n",
     "missing column(s) prefill_ctx"),
])
def test_bad_timings_file_gets_one_line_error_naming_file_and_problem(tmp_path, content, problem):
    path = tmp_path / "timings.csv"
    path.write_text(content)
    with pytest.raises(ValueError) as info:
        run_fit(FitRequest(path))
    message = str(info.value)
    assert "\n" not in message and str(path) in message and problem in message
