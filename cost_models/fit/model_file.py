"""Cost model files: what a fit writes (coefficients or compact tables, provenance, held-out error).

Tables are rounded to four significant digits (0.05%, far below the profiles' own noise), which
keeps a shipped file small; a file is derived data, never a copy of the source rows.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from cost_models.batch_shape import BatchShape
from cost_models.fit.parametric_fit import ParametricFit
from cost_models.fit.table_fit import TableFit
from cost_models.importers.forms import OperatorTables, StepTimings
from cost_models.parametric import TERMS, FittedRange
from cost_models.profiles import FORMAT

DEFAULT_KERNEL_STEP_OVERHEAD_S = 2e-3
_NUMBER_LIST = re.compile(r"\[([-0-9.eE+,\s]+)\]")  # one line per list of numbers, not per number
KERNEL_OVERHEAD_SOURCE = (
    "not in kernel profiles (they time GPU kernels only): an assumed 2 ms per step for vLLM's "
    "scheduler, input preparation and sampled-token sync, the figure the roofline model uses; "
    "override with cost_model.step_overhead_s")
TERM_DOCS = {
    "step_overhead_s": "fixed per-step time beyond the knee floor (engine CPU work, launches)",
    "linear_s_per_token": "x max(knee_tokens, tokens): weight streaming below the knee, GEMMs above",
    "token_s": "x tokens: per-token work (norms, activations, RoPE, embedding)",
    "decode_ctx_s_per_token": "x sum of decode contexts: KV cache reads",
    "decode_s_per_seq": "x decodes", "prefill_pair_s": "x causal attention pairs of the prefills",
    "prefill_ctx_s_per_token": "x cached context of the prefills", "prefill_s_per_seq": "x prefill chunks",
    "sample_s_per_seq": "x sampled rows: lm_head, logits, sampler",
    "seq_sqrt_s": "x sqrt(sequences): per-sequence work whose cost per sequence falls as the batch grows"}


def sig4(values):
    return [sig4(v) for v in values] if isinstance(values, (list, tuple)) else float(f"{float(values):.4g}")


def parametric_json(fit: ParametricFit, timings: StepTimings, name: str, holdout_every: int,
                    roofline_errors: dict | None, loss: str = "relative") -> dict:
    model = fit.model
    c = model.coefficients
    return {
        "format": FORMAT, "form": "parametric", "name": name, "model": timings.model,
        "hardware": timings.hardware, "mode": timings.mode, "tensor_parallel_size": 1,
        "source": timings.source.to_json(), "importer_notes": timings.notes,
        "coefficients": {t: c[t] for t in TERMS}, "knee_tokens": model.knee_tokens,
        "terms": TERM_DOCS,
        "step_overhead": {
            "fixed_step_s": c["step_overhead_s"] + model.weight_read_s,
            "source": "fitted from whole-step times: step_overhead_s is the intercept (CPU and launch "
                      "work no kernel does), linear_s_per_token x knee_tokens the weight-read floor"},
        "fitted_range": model.fitted_range.to_json(),
        "fit_loss": loss, "holdout": {"every": holdout_every, "errors": fit.holdout_errors},
        "train_errors": fit.train_errors, "roofline_errors": roofline_errors}


def tables_json(fits: list[tuple[OperatorTables, TableFit, dict | None]], name: str, num_layers: int,
                holdout_every: int, step_overhead_s: float, overhead_source: str, hidden_size: int,
                dtype_bytes: int) -> dict:
    first = fits[0][0]
    sections = {str(t.tensor_parallel_size): _section(t, f, hidden_size * dtype_bytes, roof)
                for t, f, roof in fits}
    return {
        "format": FORMAT, "form": "tables", "name": name, "model": first.model, "hardware": first.hardware,
        "mode": "kernels", "num_layers": num_layers,
        "source": {"description": first.source.description.rsplit(", tp", 1)[0],
                   "files": {k: v for t, _, _ in fits for k, v in t.source.files.items()}},
        "importer_notes": first.notes,
        "step_overhead": {"seconds": step_overhead_s, "source": overhead_source},
        "holdout": {"every": holdout_every}, "tensor_parallel": sections}


def _section(tables: OperatorTables, fit: TableFit, bytes_per_token: int, roofline_errors) -> dict:
    def table(t, x_name):
        return {x_name: sig4(t.x), "seconds": sig4(t.y)} if t is not None else None
    attention = {"kind": "roofline"}
    if fit.attention is not None:
        attention = fit.attention.to_json()
        for key in ("prefill", "decode", "mixed"):
            attention[key]["seconds"] = sig4(attention[key]["seconds"])
        attention["exponent"]["p"] = sig4(attention["exponent"]["p"])
    return {"layer": table(fit.layer, "tokens"), "whole_model": table(fit.whole_model, "tokens"),
            "sequence": table(fit.sequence, "sequences"), "attention": attention,
            "allreduce": table(fit.allreduce, "bytes"),
            "allreduce_bytes_per_token": bytes_per_token if fit.allreduce is not None else 0,
            "moe": _moe_json(fit.moe),
            "fitted_range": _tables_range(tables).to_json(),
            "holdout_errors": fit.holdout_errors, "roofline_vs_profile": roofline_errors}


def _moe_json(moe) -> dict | None:
    if moe is None:
        return None
    entry = moe.to_json()
    entry["seconds"] = sig4(entry["seconds"])
    return entry


def _tables_range(tables: OperatorTables) -> FittedRange:
    max_tokens = int(max(x[-1] for x, _ in tables.layer_ops.values()))
    if tables.attention is None:  # the roofline attention has no profiled limit
        return FittedRange(max_tokens, max_tokens, 2**31 - 1)
    chunk, cached, n_decode, context, _ = tables.attention
    return FittedRange(max_tokens, int(n_decode.max()) + 1, int(max((cached + chunk).max(), context.max() + 1)))


def comparison_shapes() -> list[BatchShape]:
    """A fixed spread of steps on which the roofline is compared with a kernel profile."""
    shapes = [BatchShape.of([1] * n, [ctx] * n) for n in (1, 4, 16, 64, 256) for ctx in (128, 1024, 4096)]
    shapes += [BatchShape.of([c], [k]) for c in (16, 128, 512, 2048) for k in (0, 1024, 4096)]
    shapes += [BatchShape.of([c] + [1] * n, [0] + [1024] * n) for c in (256, 1024) for n in (8, 32)]
    return shapes


def write_json(path: Path, data: dict) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=1, default=_plain)
    path.write_text(_NUMBER_LIST.sub(lambda m: "[" + ", ".join(v.strip() for v in m.group(1).split(",")) + "]", text) + "\n")
    return path


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
