"""Fit the physics step-cost model (cost_models/physics.py) across models, and measure it leave-one-model-out.

Every model measured on one GPU and mode contributes its steps; each step's features come from its
own model's config, so the coefficients (efficiencies and overheads) are shared by all of them. The
fit is non-negative least squares on relative error (each inverse efficiency held at 1 or more, or
at 1 / the fraction of peak the device was measured to reach: no kernel beats its device's ceiling),
refined towards the least absolute relative error; each model's families (prefill, decode, mixed)
weigh alike, however many rows each has (a profile's grid holds ~110 mixed steps for each decode:
unweighted, the decodes barely count).
``gemm_balance`` is scanned on a log grid, then refined by golden section. Leave-one-model-out
fits on all models but one and predicts that one from its config alone: the error a model never
measured would see. A source that
times some operators apart (a kernel profile's lm_head and sampler) adds them as rows of their own
(``part``), fitted on their terms alone; errors are reported on whole steps only.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from cost_models.batch_shape import work_counts_at_tile
from cost_models.fit.nnls import nnls
from cost_models.fit.report import family_errors
from cost_models.hardware import HardwareSpec
from cost_models.launches import HARNESS_LAUNCHES
from cost_models.measured_ceilings import MeasuredCeilings, PeakFractions, peak_fractions
from cost_models.model_spec import ModelSpec
from cost_models.physics import (EFFICIENCY_TERMS, FITTED_TERMS, GEMM_TILE_CHOICES, PEAK_OF, TERMS, TIED_TERMS,
                                  TRAFFIC, WALKS, coefficient_vector, device_time_of, step_time_of, tied_coefficient)
from cost_models.physics_work import physics_work

_BALANCE_MAX, _BALANCE_POINTS = 8.0, 25
_GOLDEN_STEPS = 20
_IRLS_STEPS = 10
_IRLS_FLOOR = 1e-3
_BRANCH_STEPS = 20
OVERHEAD_PRIOR = 0.03
STEP = "step"
_TIED = [(TERMS.index(t), TERMS.index(source)) for t, source in TIED_TERMS.items()]


@dataclass(frozen=True)
class PhysicsSamples:
    """One model's measured steps on one GPU, mode and TP degree, with the shapes' work counts."""
    spec: ModelSpec
    hardware: HardwareSpec
    tensor_parallel_size: int
    shapes: list
    time_s: np.ndarray
    source: str          # where the times came from, for the model file
    comm_s: np.ndarray | None = None   # communication inside time_s (priced apart, not fitted)
    measured: tuple[str, ...] = TERMS   # the terms the source's times contain
    launches: tuple[int, int, int] = HARNESS_LAUNCHES   # the measured engine's kernels per layer
    attention_query_tile: int = 1   # the measured engine's prefill attention tile (1: causal pairs)
    part: str = STEP   # STEP: whole steps; else the operators a source timed apart (fitted, not reported)
    decode_skew: float | None = None   # the source's measured alpha of unequal decode contexts (None: unmeasured)
    # Where a source times some of a layer's kernels (launches), the whole layer's, which the file
    # prices by (None: launches); and whether a part's shapes count in the file's fitted_range.
    layer_launches: tuple[int, int, int] | None = None
    in_fitted_range: bool = False
    ceilings: MeasuredCeilings | None = None   # what the device was measured to reach (None: unmeasured)

    @property
    def families(self) -> list[str]:
        return [s.kind for s in self.shapes]

    @property
    def is_step(self) -> bool:
        return self.part == STEP

    def features(self, balance: float, gemm_tile_tokens: int = 1) -> np.ndarray:
        for term, field_name, value in (("mixed_decode_waves", "sm_count", self.hardware.sm_count),
                                        ("mixed_decode_rereads", "l2_mib", self.hardware.l2_bytes)):
            if term in self.measured and value is None:
                raise ValueError(f"hardware.{field_name}: unknown for {self.hardware.name!r}; {self.source} "
                                 f"measures {term}, which needs it")
        work = physics_work(self.spec, self.hardware, self.tensor_parallel_size, self.launches, gemm_tile_tokens)
        mask = np.array([t in self.measured for t in TERMS], float)
        return work.feature_columns(self.counts, balance) * mask

    @cached_property
    def counts(self) -> np.ndarray:
        return np.array([work_counts_at_tile(s, self.attention_query_tile) for s in self.shapes], float)

    def fitted_time_s(self) -> np.ndarray:
        """The part of time_s the fitted terms explain (communication taken off)."""
        return self.time_s if self.comm_s is None else self.time_s - self.comm_s


@dataclass(frozen=True)
class PhysicsFit:
    coefficients: dict[str, float]
    gemm_balance: float
    train_errors: dict
    gemm_tile_tokens: int = 1
    loss: float = 0.0   # the training MAPE (fraction) the tile choice is made on


def fit_physics(samples: list[PhysicsSamples], host_bound: bool = False,
                peak_bound: bool = True, tiles: tuple[int, ...] = GEMM_TILE_CHOICES) -> PhysicsFit:
    """The best fit_at_tile of the GEMM tile sizes ``tiles`` (the least training loss)."""
    fits = [fit_at_tile(samples, tile, host_bound, peak_bound) for tile in tiles]
    return min(fits, key=lambda fit: fit.loss)


def fit_at_tile(samples: list[PhysicsSamples], tile: int, host_bound: bool = False,
                peak_bound: bool = True) -> PhysicsFit:
    """Coefficients and gemm_balance shared by every model in ``samples``; ``host_bound`` (eager)
    fits the host's launch time too, each step taking the longer of host and device. ``peak_bound``
    holds every inverse efficiency at 1 or more (no kernel beats its datasheet peak), so a term the
    fitted shapes barely exercise (the KV reads of a log of short contexts) cannot fall to 0; where
    the sources measured the device's ceilings, at 1 / the fraction of peak it reached."""
    if not samples:
        raise ValueError("physics fit: no timings to fit on")
    fractions = samples_peak_fractions(samples) if peak_bound else PeakFractions()
    floor = np.array([1 / fractions.of(PEAK_OF[t]) if peak_bound and t in EFFICIENCY_TERMS else 0.0 for t in TERMS])
    balance_grid = _balance_grid(fractions)
    y = np.concatenate([s.fitted_time_s() for s in samples])
    base = row_weights(samples)

    def loss(balance: float) -> tuple[float, np.ndarray]:
        features = _design(samples, balance, tile)
        coef = _fit_branches(features / y[:, None], host_bound, floor, base)
        residual = (_predict(features, coef) / y - 1) * base
        return float(residual @ residual), coef
    losses = [loss(b)[0] for b in balance_grid]
    best = int(np.argmin(losses))
    lo = np.log(balance_grid[max(best - 1, 0)])
    hi = np.log(balance_grid[min(best + 1, len(balance_grid) - 1)])
    golden = (np.sqrt(5) - 1) / 2
    for _ in range(_GOLDEN_STEPS):
        a, b = hi - golden * (hi - lo), lo + golden * (hi - lo)
        if loss(np.exp(a))[0] <= loss(np.exp(b))[0]:
            hi = b
        else:
            lo = a
    balance = float(np.exp((lo + hi) / 2))
    if losses[best] < loss(balance)[0]:
        balance = float(balance_grid[best])
    features = _design(samples, balance, tile)
    coef = _refine_l1(features / y[:, None], loss(balance)[1], host_bound, floor, base)
    predicted = _predict(features, coef)
    families = [f for s in samples for f in s.families]
    steps = np.concatenate([np.full(len(s.shapes), s.is_step) for s in samples])
    train = family_errors(predicted, y, families, steps)
    loss_value = float(np.sum(np.abs(predicted / y - 1) * base ** 2 * steps) / np.sum(base ** 2 * steps))
    coefficients = {t: float(c) for t, c in zip(TERMS, coef) if t in FITTED_TERMS}
    return PhysicsFit(coefficients, balance, train, tile, loss_value)


def samples_peak_fractions(samples: list[PhysicsSamples]) -> PeakFractions:
    """The fractions of peak the samples' measured ceilings allow (measured_ceilings.peak_fractions)."""
    return peak_fractions([(s.hardware, s.ceilings) for s in samples])


def _balance_grid(fractions: PeakFractions) -> np.ndarray:
    """gemm_balance's search grid, from where gemm x balance reaches the bandwidth floor while gemm
    sits at the FLOP/s floor: no weight read beats the measured (or datasheet) bandwidth."""
    return np.geomspace(fractions.flops / fractions.bandwidth, _BALANCE_MAX, _BALANCE_POINTS)


def measured_decode_skew(samples: list[PhysicsSamples]) -> dict[int, float]:
    """TP degree -> the mean alpha of unequal decode contexts the whole-step sources measured there."""
    by_tp: dict[int, list[float]] = {}
    for s in samples:
        if s.is_step and s.decode_skew is not None:
            by_tp.setdefault(s.tensor_parallel_size, []).append(s.decode_skew)
    return {tp: float(np.mean(v)) for tp, v in sorted(by_tp.items())}


def row_weights(samples: list[PhysicsSamples]) -> np.ndarray:
    """Each row's weight (its squared error's is the square): every group of rows, a model's family
    of whole steps or a part it timed apart, weighs alike in sum, however many rows it has."""
    groups = np.array([f"{s.spec.name}/{family if s.is_step else s.part}" for s in samples for family in s.families])
    _, inverse, counts = np.unique(groups, return_inverse=True, return_counts=True)
    share = len(groups) / len(counts) / counts[inverse]
    return np.sqrt(share)


def _tie(features: np.ndarray) -> np.ndarray:
    """The design with each tied term's column added to its source's (TIED_TERMS): one coefficient."""
    out = features.copy()
    for term, source in _TIED:
        out[:, source] += out[:, term]
        out[:, term] = 0.0
    return out


def _untie(coef: np.ndarray) -> np.ndarray:
    """Coefficients of the tied design with each tied term as the model prices it (tied_coefficient)."""
    coef = coef.copy()
    for term, _ in _TIED:
        coef[term] = tied_coefficient(TERMS[term], lambda name: coef[TERMS.index(name)])
    return coef


def predict(fit: PhysicsFit, samples: PhysicsSamples) -> np.ndarray:
    """The fitted model's whole-step times for ``samples`` (communication added back)."""
    coef = coefficient_vector(fit.coefficients)
    predicted = _predict(samples.features(fit.gemm_balance, fit.gemm_tile_tokens), coef)
    return predicted if samples.comm_s is None else predicted + samples.comm_s


def leave_one_model_out(samples: list[PhysicsSamples], host_bound: bool = False) -> dict[str, dict]:
    """model name -> errors per family of that model's steps, predicted by a fit on the others."""
    names = sorted({s.spec.name for s in samples})
    out = {}
    for name in names:
        rest = [s for s in samples if s.spec.name != name]
        held = [s for s in samples if s.spec.name == name and s.is_step]
        if not rest or not held:
            continue
        fit = fit_physics(rest, host_bound)
        predicted = np.concatenate([predict(fit, s) for s in held])
        measured = np.concatenate([s.time_s for s in held])
        families = [f for s in held for f in s.families]
        out[name] = family_errors(predicted, measured, families, np.ones(len(measured), bool))
    return out


def _design(samples: list[PhysicsSamples], balance: float, tile: int) -> np.ndarray:
    return np.vstack([s.features(balance, tile) for s in samples])


def _predict(features: np.ndarray, coef: np.ndarray) -> np.ndarray:
    """step_time_of (cost_models/physics.py) of every row."""
    return step_time_of(coef, features.T)


def _branch_design(a: np.ndarray, coef: np.ndarray | None, host_bound: bool) -> np.ndarray:
    """The rows' features with the branch of each max that does not bind zeroed, then tied
    (TIED_TERMS): a step's decodes keep their walks or their KV traffic, the longer (the walks first,
    where a step has any); a step bound by the host keeps the overhead and the host column, one
    bound by the device the rest."""
    out = a.copy()
    out[:, -1] = 0.0
    walks = a[:, WALKS].any(axis=1) if coef is None else a[:, WALKS] @ coef[WALKS] > a[:, TRAFFIC] @ coef[TRAFFIC]
    out[np.ix_(walks, TRAFFIC)] = 0.0
    out[np.ix_(~walks, WALKS)] = 0.0
    if host_bound and coef is not None:
        host = a[:, -1] * coef[-1] > device_time_of(coef, a.T)
        out[host, 1:-1] = 0.0
        out[host, -1] = a[host, -1]
    return _tie(out)


def _nnls_with_prior(design: np.ndarray, weight: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """NNLS of the weighted relative rows plus one row that asks the per-step overhead to be small.

    Where the data cannot tell a per-step cost from a per-layer one (every fitted model has the
    same layer count), the tie goes to the per-layer cost, whose launch count is known; the prior
    weighs an overhead of one median step as OVERHEAD_PRIOR**2 of squared relative error, too little to
    move a fit the data settles.
    """
    prior = np.zeros((1, design.shape[1]))
    overhead = design[:, 0][design[:, 0] > 0]   # 1 / step time on the rows that measure it
    prior[0, 0] = OVERHEAD_PRIOR * float(np.median(overhead)) if len(overhead) else 0.0
    a, b = np.vstack([design * weight[:, None], prior]), np.append(weight, 0.0)
    floor = floor * (np.abs(design).sum(axis=0) > 0)   # coef = floor + x, x >= 0, on measured terms
    return floor + nnls(a, b - a @ floor)


def _fit_branches(a: np.ndarray, host_bound: bool, floor: np.ndarray,
                  weight: np.ndarray | None = None) -> np.ndarray:
    """NNLS of the max forms: fit, see which branch binds each row, refit, until the branches
    settle. ``a``: the rows' features over their times, untied; the coefficients come back untied."""
    weight = np.ones(len(a)) if weight is None else weight
    coef = _untie(_nnls_with_prior(_branch_design(a, None, False), weight, floor))
    if host_bound:
        coef[-1] = float(np.median(1 / a[:, -1]))   # start: every row host-bound at its median rate
    elif not a[:, WALKS].any():
        return coef
    for _ in range(_BRANCH_STEPS):
        new = _untie(_nnls_with_prior(_branch_design(a, coef, host_bound), weight, floor))
        if np.allclose(new, coef, rtol=1e-9, atol=0):
            break
        coef = new
    return coef


def _refine_l1(a: np.ndarray, coef: np.ndarray, host_bound: bool, floor: np.ndarray,
               base: np.ndarray) -> np.ndarray:
    """Iteratively reweighted least squares towards the least weighted absolute relative error."""
    for _ in range(_IRLS_STEPS):
        residual = _predict(a, coef) - 1
        weight = base / np.sqrt(np.maximum(np.abs(residual), _IRLS_FLOOR))
        coef = _fit_branches(a, host_bound, floor, weight)
    return coef
