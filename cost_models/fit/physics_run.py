"""``fit --kind physics``: any mix of sources -> one GPU and mode's physics file, with its
leave-one-model-out error per family (cost_models/physics_file.py describes the file)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from cost_models.fit.model_file import sig4
from cost_models.fit.physics_fit import (PhysicsSamples, fit_physics, leave_one_model_out, measured_decode_skew,
                                         predict, samples_peak_fractions)
from cost_models.fit.physics_sources import is_vllm_log, read_physics_sources
from cost_models.fit.report import family_errors, format_errors
from cost_models.importers.device_ceilings import device_file
from cost_models.importers.forms import sha256_of
from cost_models.fit.run import FitOutcome
from cost_models.fitted_range import FittedRange
from cost_models.roofline_defaults import roofline_defaults
from cost_models.physics import TERM_UNITS, TERMS
from cost_models.physics_file import model_ranges
from cost_models.profiles import FORMAT


def run_physics_fit(sources: list[Path], mode: str | None = None, hardware: str = "",
                    name: str | None = None, model: str | None = None,
                    request_lengths: Path | None = None) -> FitOutcome:
    samples = read_physics_sources(sources, mode, hardware, model, request_lengths)
    gpus = sorted({s.hardware.name for s in samples})
    mode = mode or ("vllm" if request_lengths is not None else "kernels")
    host_bound = mode == "eager"
    name = name or f"physics-{'-'.join(gpus)}-{mode}"
    fit = fit_physics(samples, host_bound)
    lomo = leave_one_model_out(samples, host_bound)
    data = physics_json(samples, fit, lomo, name, mode)
    if not lomo:
        data["leave_one_model_out_note"] = ("one model measured: nothing to hold out, so the training error is "
                                            "the only figure; a model never measured is priced from terms "
                                            "that one model's shapes could not all tell apart")
    data["source"] = {"description": "; ".join(sorted({s.source for s in samples})),
                      "files": {str(p): sha256_of(p) for p in source_files(sources, request_lengths)}}
    parts = sorted({s.part for s in samples if not s.is_step})
    lines = [f"{name}: physics fit of {sum(len(s.shapes) for s in samples if s.is_step)} steps of "
             f"{', '.join(data['fitted_on']['models'])} on {', '.join(gpus)} ({mode})"
             + (f", and their {', '.join(parts)} timed apart" if parts else "")]
    lines += [f"  {t:<24} {sig4(v):<12} {TERM_UNITS[t]}" for t, v in fit.coefficients.items()]
    lines.append(f"  {'gemm_balance':<24} {sig4(fit.gemm_balance)}")
    lines.append(f"  {'gemm_tile_tokens':<24} {fit.gemm_tile_tokens}")
    fractions = data["peak_fractions"]
    lines.append(f"  {'peak_fractions':<24} bandwidth {fractions['bandwidth']}, flops {fractions['flops']} "
                 f"({'measured: ' + ', '.join(data['measured_ceilings']) if data['measured_ceilings'] else 'datasheet'})")
    lines.append(format_errors("fitted on all models (training error)", fit.train_errors))
    for part in parts:
        lines.append(format_errors(f"{part}, timed apart (training error)", part_errors(fit, samples, part)))
    for model, errs in lomo.items():
        lines.append(format_errors(f"leave-one-model-out: {model} predicted from the others", errs))
    return FitOutcome(data, "\n".join(lines))


def part_errors(fit, samples: list[PhysicsSamples], part: str) -> dict:
    """The fit's error per family on the rows of one part a source timed apart (not whole steps)."""
    rows = [s for s in samples if s.part == part]
    predicted, measured = (np.concatenate([predict(fit, s) for s in rows]), np.concatenate([s.time_s for s in rows]))
    return family_errors(predicted, measured, [f for s in rows for f in s.families], np.ones(len(measured), bool))


def source_files(sources: list[Path], request_lengths: Path | None = None) -> list[Path]:
    """The files read from each source (a profile folder's CSVs; a timings file, and the device.csv
    of measured ceilings it was read with)."""
    files = []
    for path in map(Path, sources):
        if (path / "meta.yaml").is_file():
            files += [path / "meta.yaml", *sorted(path.glob("tp*/*.csv"))]
        elif is_vllm_log(path):
            files.append(path)
        else:
            device = device_file(path)
            files += [path / "timings.csv" if path.is_dir() else path] + ([device] if device else [])
    return files + ([Path(request_lengths)] if request_lengths is not None else [])


def physics_json(samples: list[PhysicsSamples], fit, lomo: dict, name: str, mode: str) -> dict:
    shapes = [shape for s in samples if s.is_step for shape in s.shapes]
    in_range = [shape for s in samples if s.is_step or s.in_fitted_range for shape in s.shapes]
    specs = list({s.spec.name: s.spec for s in samples}.values())
    measured = sorted({t for s in samples for t in s.measured}, key=TERMS.index)
    launches = samples[0].layer_launches or samples[0].launches
    coefficients, filled = fill_unmeasured(fit.coefficients, measured, samples[0].hardware.name)
    return {
        "format": FORMAT, "form": "physics", "name": name, "model": None,
        "hardware": samples[0].hardware.name, "mode": mode,
        "coefficients": {t: sig4(v) for t, v in coefficients.items()},
        "filled_terms": filled,
        "gemm_balance": sig4(fit.gemm_balance), "terms": TERM_UNITS,
        "gemm_tile_tokens": fit.gemm_tile_tokens,
        "launches": {"other": launches[0], "per_norm": launches[1], "mixed": launches[2],
                     "source": "kernel launches per layer of the measured engine (cost_models/physics.py)"},
        "attention_query_tile": samples[0].attention_query_tile,
        "measured_ceilings": {s.hardware.name: s.ceilings.to_json() for s in samples if s.ceilings},
        "peak_fractions": {**samples_peak_fractions(samples).to_json(),
                           "rule": "the most of each datasheet peak an efficiency may reach: the device's "
                                   "measured ceiling (cost_models/measured_ceilings.py), 1.0 unmeasured"},
        "unmeasured_terms": [t for t in TERMS if t not in measured],
        "fitted_on": {"gpus": sorted({s.hardware.name for s in samples}), "models": [s.name for s in specs],
                      "tensor_parallel_sizes": sorted({s.tensor_parallel_size for s in samples}),
                      "modes": [mode], "sources": sorted({s.source for s in samples}),
                      "model_ranges": model_ranges(specs), "steps": len(shapes),
                      "parts": sorted({s.part for s in samples if not s.is_step})},
        "fitted_range": FittedRange.of_shapes(in_range).to_json(),
        "decode_skew": decode_skew_json(samples),
        "leave_one_model_out": lomo, "train_errors": fit.train_errors,
        "step_time_range_s": [float(np.min([s.time_s.min() for s in samples if s.is_step])),
                              float(np.max([s.time_s.max() for s in samples if s.is_step]))]}


# What prices a term every serving step has work for where no source timed it: the lm_head is a
# GEMM over the vocabulary, the sampler's logits an elementwise pass, and attention is priced as the
# roofline prices it on that GPU (its default efficiencies, as the Vidur table profiles do).
_FILL = {"lm_head": ("gemm", "gemm's coefficient: the lm_head is a GEMM over the vocabulary"),
         "logits": ("activation_traffic", "activation_traffic's coefficient: an elementwise pass"),
         "prefill_attention": ("compute_efficiency", "1 / the roofline's default compute efficiency"),
         "decode_kv_read": ("bandwidth_efficiency", "1 / the roofline's default bandwidth efficiency"),
         "prefill_kv_read": ("bandwidth_efficiency", "1 / the roofline's default bandwidth efficiency")}


def fill_unmeasured(coefficients: dict, measured: list[str], hardware: str) -> tuple[dict, dict]:
    """The fitted coefficients with each _FILL term no source measured set by its rule, and
    {term: how} for the file (physics_file.load_physics says so once)."""
    defaults = roofline_defaults(hardware)
    out, filled = dict(coefficients), {}
    for term, (source, how) in _FILL.items():
        if term in measured:
            continue
        out[term] = coefficients[source] if source in coefficients else 1 / defaults[source]
        filled[term] = how + (f" for {hardware} (cost_models/catalog/roofline_defaults.json)"
                              if source not in coefficients else "")
    return out, filled


def decode_skew_json(samples: list[PhysicsSamples]) -> dict:
    """The sources' measured alpha of unequal decode contexts, averaged per TP degree over the models."""
    return {"alpha_by_tp": {str(tp): sig4(a) for tp, a in measured_decode_skew(samples).items()},
            "source": "the mean over the fitted models of each source's own measure (an LLMServingSim "
                      "profile's meta.yaml skew_fit alpha_default); cost_models/decode_skew.py"}
