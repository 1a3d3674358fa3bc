"""Fit the roofline's efficiencies and overheads (cost_models/roofline.py) to one GPU's measured steps.

The roofline's form is kept: each operator group takes the longer of its FLOPs at
compute_efficiency x peak and its bytes at bandwidth_efficiency x bandwidth, a step adds each
layer's kernel floors (launch_s per kernel) and a per-step overhead. The two efficiencies are
searched on a grid (0.05 apart, then 0.01 apart within 0.10 of the best), each at most the fraction
of peak the device was measured to reach (cost_models/measured_ceilings.py; 1.0 unmeasured); for
each pair, launch_s and step_overhead_s are the non-negative least squares on relative error, each
model's families weighing alike (physics_fit.row_weights). A source's kernels are counted as its
engine launches them (PhysicsSamples.launches: 38 a layer for the plain-PyTorch harness, 10 for
vLLM's fused kernels), so launch_s is a GPU's time per kernel; the step overhead is fitted only
where the source measures it (kernel sums hold no CPU time: 0). The alpha of unequal decode
contexts (cost_models/decode_skew.py) is not fitted: it is what the sources measured (a kernel
profile's skew sweep), and a GPU whose source has none takes the median of those that did. The
search reads at most ROWS_PER_GROUP evenly spaced rows of each model's family (a kernel profile's
grid holds tens of thousands); errors are reported on every row. TP 1 only: a kernel profile's sums
hold no all-reduce, which the roofline adds.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from cost_models.fit.nnls import nnls
from cost_models.fit.physics_fit import PhysicsSamples, measured_decode_skew, row_weights, samples_peak_fractions
from cost_models.fit.report import family_errors
from cost_models.launches import launches_per_layer
from cost_models.roofline import RooflineCostModel

COARSE_COMPUTE = np.round(np.arange(0.30, 1.0001, 0.05), 2)
COARSE_BANDWIDTH = np.round(np.arange(0.50, 1.0001, 0.05), 2)
FINE_STEP = 0.01
FINE_WIDTH = 0.10   # two coarse steps each side: the loss is not smooth enough for one
ROWS_PER_GROUP = 400


@dataclass(frozen=True)
class RooflineFit:
    compute_efficiency: float
    bandwidth_efficiency: float
    launch_s: float
    step_overhead_s: float
    train_errors: dict

    def values(self) -> dict[str, float]:
        return {"compute_efficiency": self.compute_efficiency, "bandwidth_efficiency": self.bandwidth_efficiency,
                "step_overhead_s": self.step_overhead_s, "launch_s": self.launch_s}


class _Rows:
    """The steps of ``samples`` (whole steps, TP 1) with what the search needs of each."""

    def __init__(self, samples: list[PhysicsSamples], every_row: bool = False):
        self.samples = [s for s in samples if s.is_step and s.tensor_parallel_size == 1]
        if not self.samples:
            raise ValueError("roofline fit: no whole steps at tensor_parallel_size 1 to fit on")
        picked = [np.arange(len(s.shapes)) if every_row else _spread(s.families) for s in self.samples]
        self.rows = [(s, [s.shapes[i] for i in index]) for s, index in zip(self.samples, picked)]
        self.time_s = np.concatenate([s.time_s[index] for s, index in zip(self.samples, picked)])
        self.families = [family for s, index in zip(self.samples, picked) for family in np.asarray(s.families)[index]]
        self.weight = row_weights([_subset(s, index) for s, index in zip(self.samples, picked)])
        kernels = np.concatenate([_kernels(s, shapes) for s, shapes in self.rows])
        overhead = np.concatenate([np.full(len(shapes), "step_overhead" in s.measured) for s, shapes in self.rows])
        # the columns launch_s and step_overhead_s multiply: kernels, and 1 where the overhead is measured
        self.design = np.column_stack([kernels, overhead.astype(float)])

    def device_s(self, compute: float, bandwidth: float) -> np.ndarray:
        """Each row's roofline time without kernel floors or overhead."""
        out = []
        for s, shapes in self.rows:
            model = RooflineCostModel(s.spec, s.hardware, 1, compute, bandwidth, step_overhead_s=0.0, launch_s=0.0,
                                      decode_skew=0.0)
            out += [model.step_time_s(shape) for shape in shapes]
        return np.array(out)

    def fit_at(self, compute: float, bandwidth: float) -> tuple[float, np.ndarray]:
        """(weighted MAPE, [launch_s, step_overhead_s]) at these efficiencies."""
        device = self.device_s(compute, bandwidth)
        scale = self.weight / self.time_s
        x = nnls(self.design * scale[:, None], (self.time_s - device) * scale)
        error = np.abs((device + self.design @ x) / self.time_s - 1)
        return float(np.sum(error * self.weight ** 2) / np.sum(self.weight ** 2)), x

    def errors(self, fit: "RooflineFit") -> dict:
        """family_errors of ``fit`` on these rows."""
        predicted = (self.device_s(fit.compute_efficiency, fit.bandwidth_efficiency)
                     + self.design @ np.array([fit.launch_s, fit.step_overhead_s]))
        return family_errors(predicted, self.time_s, self.families, np.ones(len(predicted), bool))


def fit_roofline(samples: list[PhysicsSamples]) -> RooflineFit:
    """The least-error efficiencies and overheads over ``samples``; errors on every row."""
    rows = _Rows(samples)
    cap = samples_peak_fractions(rows.samples)
    coarse_c = COARSE_COMPUTE[COARSE_COMPUTE <= cap.flops]
    coarse_b = COARSE_BANDWIDTH[COARSE_BANDWIDTH <= cap.bandwidth]
    best = min(((rows.fit_at(c, b)[0], c, b) for c in coarse_c for b in coarse_b))
    _, c0, b0 = best
    fine_c, fine_b = _around(c0, FINE_WIDTH, cap.flops), _around(b0, FINE_WIDTH, cap.bandwidth)
    _, compute, bandwidth = min(((rows.fit_at(c, b)[0], c, b) for c in fine_c for b in fine_b))
    _, (launch_s, overhead_s) = rows.fit_at(compute, bandwidth)
    fit = RooflineFit(float(compute), float(bandwidth), float(launch_s), float(overhead_s), {})
    return replace(fit, train_errors=_Rows(samples, every_row=True).errors(fit))


def roofline_leave_one_model_out(samples: list[PhysicsSamples]) -> dict[str, dict]:
    """model name -> errors per family of its steps, the roofline fitted on the other models."""
    names = sorted({s.spec.name for s in samples if s.is_step and s.tensor_parallel_size == 1})
    out = {}
    for name in names:
        rest = [s for s in samples if s.spec.name != name]
        held = _Rows([s for s in samples if s.spec.name == name], every_row=True)
        if not [s for s in rest if s.is_step and s.tensor_parallel_size == 1]:
            continue
        out[name] = held.errors(fit_roofline(rest))
    return out


def _spread(families: list[str]) -> np.ndarray:
    """At most ROWS_PER_GROUP evenly spaced rows of each family, in order."""
    families = np.asarray(families)
    keep = []
    for family in sorted(set(families)):
        index = np.flatnonzero(families == family)
        keep.append(index[np.linspace(0, len(index) - 1, min(len(index), ROWS_PER_GROUP)).astype(int)])
    return np.sort(np.concatenate(keep))


def _subset(samples: PhysicsSamples, index: np.ndarray) -> PhysicsSamples:
    return replace(samples, shapes=[samples.shapes[i] for i in index], time_s=samples.time_s[index])


def _kernels(samples: PhysicsSamples, shapes: list) -> np.ndarray:
    """Kernels each step launches as the source's engine counts them: per layer, plus a mixed
    step's extra attention group."""
    per_layer = launches_per_layer(samples.spec, samples.launches)
    mixed = samples.launches[2]
    return np.array([samples.spec.num_layers * (per_layer + mixed * (s.kind == "mixed")) for s in shapes], float)


def _around(center: float, width: float, cap: float) -> np.ndarray:
    """Values FINE_STEP apart within ``width`` of ``center``, inside (0, cap]."""
    values = np.round(np.arange(center - width, center + width + 1e-9, FINE_STEP), 2)
    return values[(values > 0) & (values <= cap)]


def defaults_json(fits: dict[str, tuple[list[PhysicsSamples], str]]) -> dict:
    """The roofline_defaults.json of ``fits`` (GPU name -> its samples and a phrase naming their
    source): each GPU's fit, with its errors, and the median over them for a GPU nobody measured
    (the step overhead over the GPUs whose source measured it, 0 where none did)."""
    gpus = {}
    for gpu, (samples, source) in sorted(fits.items()):
        fit = fit_roofline(samples)
        gpus[gpu] = {**{k: _sig(v) for k, v in fit.values().items()}, "source": source,
                     "models": sorted({s.spec.name for s in samples if s.is_step}),
                     "step_overhead_measured": any("step_overhead" in s.measured for s in samples),
                     "train_errors": fit.train_errors,
                     "leave_one_model_out": roofline_leave_one_model_out(samples)}
    measured = [g["step_overhead_s"] for g in gpus.values() if g["step_overhead_measured"]]
    other = {name: _sig(float(np.median([g[name] for g in gpus.values()])))
             for name in ("compute_efficiency", "bandwidth_efficiency", "launch_s")}
    other["step_overhead_s"] = _sig(float(np.median(measured))) if measured else 0.0
    skews = {gpu: _measured_skew(samples) for gpu, (samples, _) in fits.items()}
    measured_skew = [v for v in skews.values() if v is not None]
    other["decode_skew"] = _sig(float(np.median(measured_skew))) if measured_skew else 0.0
    for gpu, skew in skews.items():   # the vLLM kernel's own tail: a source without a skew sweep takes theirs
        gpus[gpu]["decode_skew"] = _sig(skew) if skew is not None else other["decode_skew"]
        gpus[gpu]["decode_skew_measured"] = skew is not None
    other["source"] = (f"the median over the fitted GPUs ({', '.join(gpus)}); the step overhead and the decode "
                       f"skew over those whose source measured them "
                       f"({', '.join(g for g, v in gpus.items() if v['step_overhead_measured']) or 'none'}; "
                       f"{', '.join(g for g, v in gpus.items() if v['decode_skew_measured']) or 'none'})")
    return {"format": 1, "fitted_by": "cost_models/fit/roofline_fit.py (python -m cost_models.build_profiles --roofline)",
            "gpus": gpus, "other_gpus": other}


def _measured_skew(samples: list[PhysicsSamples]) -> float | None:
    """The alpha of unequal decode contexts the TP 1 sources measured (None: none did)."""
    return measured_decode_skew(samples).get(1)


def _sig(value: float) -> float:
    return float(f"{value:.4g}")
