"""Fit the parametric step-cost form to whole-step timings, and measure it on held-out shapes.

Two losses, for two uses of a fit:
- ``relative`` (default): least squares on relative error (every row divided by its measured time),
  refined towards the least absolute relative error, so a 5 ms decode and a 250 ms prefill weigh the
  same, as they do in a MAPE. Right for a profiling grid, whose shapes are chosen, not a workload's.
- ``time``: least squares in seconds, which predicts each shape's mean time. Right for a serving
  run's own step log when the model is to reproduce that run's latencies: a latency is a sum of step
  times, so the error that matters is the error of the sum. The MAPE-optimal model sits near each
  shape's median, below the mean of right-skewed step times (our vLLM-CPU logs: held-out total time
  -2.3% relative against -0.4% in seconds), and weighs a rare 800 ms prefill like a 35 ms decode.
The coefficients are non-negative (NNLS). The knee of ``max(knee_tokens, tokens)`` is the one
non-linear parameter: a log-spaced scan, then a golden-section refinement around the best candidate.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cost_models.fit.nnls import nnls
from cost_models.fit.report import family_errors, holdout_mask
from cost_models.importers.forms import StepTimings
from cost_models.parametric import TERMS, FittedRange, ParametricCostModel, design_matrix, step_counts

MIN_SHAPES_PER_TERM = 2  # at least this many distinct training shapes per coefficient
_KNEE_SCAN = 64
_GOLDEN_STEPS = 30
_IRLS_STEPS = 10
_IRLS_FLOOR = 1e-3  # relative error below which a row stops gaining weight
LOSSES = ("relative", "time")


@dataclass(frozen=True)
class ParametricFit:
    model: ParametricCostModel
    predicted_s: np.ndarray   # for every row of the timings, training and held out
    held_out: np.ndarray      # bool per row
    train_errors: dict
    holdout_errors: dict


def fit_parametric(timings: StepTimings, holdout_every: int = 5, name: str = "parametric",
                   loss: str = "relative") -> ParametricFit:
    if loss not in LOSSES:
        raise ValueError(f"loss: {loss!r} is not one of {', '.join(LOSSES)}")
    counts = np.array([step_counts(s) for s in timings.shapes], float)
    y = np.asarray(timings.time_s, float)
    held_out = holdout_mask(len(y), holdout_every)
    train = ~held_out
    _check_enough(timings, counts[train])
    scale = y[train] if loss == "relative" else np.ones(int(train.sum()))
    knee, coef = _fit_knee(counts[train], y[train], scale)
    if loss == "relative":
        coef = _refine_l1(counts[train], y[train], knee, coef)
    model = ParametricCostModel(dict(zip(TERMS, map(float, coef))), knee,
                                FittedRange.of_shapes([s for s, t in zip(timings.shapes, train) if t]), name)
    predicted = design_matrix(counts, knee) @ coef
    families = timings.families
    return ParametricFit(model, predicted, held_out, family_errors(predicted, y, families, train),
                         family_errors(predicted, y, families, held_out))


def _check_enough(timings: StepTimings, train_counts: np.ndarray) -> None:
    distinct = len({tuple(row) for row in train_counts})
    needed = MIN_SHAPES_PER_TERM * len(TERMS)
    if distinct < needed:
        where = ", ".join(timings.source.files) or timings.source.description
        raise ValueError(f"{where}: only {distinct} distinct batch shapes to fit on; "
                         f"a fit needs at least {needed}")


def _solve(counts: np.ndarray, y: np.ndarray, knee: float, scale: np.ndarray) -> tuple[np.ndarray, float]:
    """NNLS of (prediction - y) / scale: scale y for relative error, 1 for error in seconds."""
    a = design_matrix(counts, knee) / scale[:, None]
    coef = nnls(a, y / scale)
    residual = a @ coef - y / scale
    return coef, float(residual @ residual)


def _fit_knee(counts: np.ndarray, y: np.ndarray, scale: np.ndarray) -> tuple[float, np.ndarray]:
    max_tokens = max(2.0, float(counts[:, 0].max()))
    grid = np.geomspace(1.0, max_tokens, _KNEE_SCAN)
    losses = [_solve(counts, y, k, scale)[1] for k in grid]
    best = int(np.argmin(losses))
    lo, hi = np.log(grid[max(best - 1, 0)]), np.log(grid[min(best + 1, len(grid) - 1)])
    golden = (np.sqrt(5) - 1) / 2
    a, b = hi - golden * (hi - lo), lo + golden * (hi - lo)
    fa, fb = _solve(counts, y, np.exp(a), scale)[1], _solve(counts, y, np.exp(b), scale)[1]
    for _ in range(_GOLDEN_STEPS):
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = hi - golden * (hi - lo)
            fa = _solve(counts, y, np.exp(a), scale)[1]
        else:
            lo, a, fa = a, b, fb
            b = lo + golden * (hi - lo)
            fb = _solve(counts, y, np.exp(b), scale)[1]
    candidates = [(losses[best], grid[best]), (fa, np.exp(a)), (fb, np.exp(b))]
    knee = float(min(candidates)[1])
    return knee, _solve(counts, y, knee, scale)[0]


def _refine_l1(counts: np.ndarray, y: np.ndarray, knee: float, coef: np.ndarray) -> np.ndarray:
    """Iteratively reweighted least squares towards the least absolute relative error (the MAPE).

    Timings from a shared machine have heavy tails (a descheduled step takes twice as long); the
    squared loss chases them, the absolute loss does not.
    """
    a = design_matrix(counts, knee) / y[:, None]
    for _ in range(_IRLS_STEPS):
        weight = 1 / np.sqrt(np.maximum(np.abs(a @ coef - 1), _IRLS_FLOOR))
        coef = nnls(a * weight[:, None], weight)
    return coef
