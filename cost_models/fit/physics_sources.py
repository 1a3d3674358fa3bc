"""Timings sources -> PhysicsSamples: whole-step timings, and whole-step sums of kernel profiles.

- our harness's ``timings.csv`` and the H200 ``steps.csv``: whole steps, every term measured, with
  the device's measured ceilings where a ``device.csv`` lies beside them (importers/device_ceilings.py);
- an LLMServingSim profile folder: per TP degree, the kernel sum of each attention grid point's step,
  num_layers x (dense ops(tokens) + the measured attention + an MoE model's MoE block from moe.csv,
  read at the step's expected distinct experts, cost_models/moe.py) + whole-model ops + lm_head and sampler
  (an MoE model's degree without moe.csv is left out: its sums would not be whole steps), and the
  lm_head and sampler of per_sequence.csv as rows of their own.
  Kernel sums hold no CPU time, so the per-step overhead and the host's launches are not measured;
- a Vidur ``mlp.csv``: per TP degree, num_layers x the non-attention operators of a step of that many
  tokens; attention, the lm_head and the per-step overhead are not in it;
- Vidur's legacy ``attention.csv`` (one attention shape at one TP degree): num_layers x one layer's
  attention kernel of Llama-2-70B, the model Vidur reads it as, as two parts of their own (decodes,
  prefills), fitted on the attention terms alone;
- a vLLM iteration log with its requests' lengths: each step's shape replayed
  (importers/vllm_schedule.py), the terms one model's log can tell apart (LOG_TERMS).
Terms a source does not measure are left out of its rows (``measured``); the all-reduces of a
profile are not summed in (the physics model prices communication apart, cost_models/interconnect.py).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from cost_models.batch_shape import BatchShape
from cost_models.fit.physics_fit import PhysicsSamples
from cost_models.fit.table_fit import fit_tables
from cost_models.hardware import load_hardware
from cost_models.importers import (read_llmservingsim, read_step_timings, read_vidur, read_vidur_attention,
                                   read_vllm_log)
from cost_models.importers.device_ceilings import read_device_ceilings
from cost_models.importers.forms import number, read_csv_columns
from cost_models.model_spec import load_model
from cost_models.launches import HARNESS_QUERY_TILE, VLLM_LAUNCHES, VLLM_QUERY_TILE
from cost_models.physics import TERMS

KERNEL_SUM_TERMS = ("gemm", "activation_traffic", "prefill_attention", "decode_kv_read", "prefill_kv_read",
                    "layer_launch", "layer_seq", "lm_head", "logits", "mixed_decode_attention",
                    "mixed_decode_waves", "mixed_decode_rereads", "moe_experts")
SEQUENCE_TERMS = ("lm_head", "logits")
# Vidur's dense operators are timed against tokens alone: no cost per sequence (layer_seq).
DENSE_TERMS = ("gemm", "activation_traffic", "layer_launch")
ATTENTION_TERMS = ("prefill_attention", "decode_kv_read", "prefill_kv_read", "layer_launch", "layer_seq")
# The kernels Vidur times of a layer: its nine mlp.csv operators (importers/vidur.py LAYER_OPS, seven
# besides the two norms) and one attention kernel; the whole layer, 10, is vLLM's count.
VIDUR_DENSE_LAUNCHES, VIDUR_ATTENTION_LAUNCHES = (7, 1, 0), (1, 0, 0)
# The model whose layer the legacy attention.csv times: Vidur reads it as Llama-2-70B's (its README).
VIDUR_ATTENTION_MODEL = "llama-2-70b"
# The terms a vLLM log of one model can tell apart: for one model the others are constants per step
# or multiples of these (launches, the lm_head's weight read, activations above the GEMM knee).
LOG_TERMS = ("step_overhead", "gemm", "prefill_attention", "decode_kv_read", "prefill_kv_read", "layer_seq")


# The harness attends each group of a step (the chunk, the decodes) with its own SDPA call.
HARNESS_TERMS = tuple(t for t in TERMS if t not in ("mixed_decode_attention", "mixed_decode_waves",
                                                    "mixed_decode_rereads"))


def from_step_timings(path: Path, model: str, mode: str, hardware: str) -> PhysicsSamples:
    timings = read_step_timings(path, model, mode, hardware)
    return PhysicsSamples(load_model(model), load_hardware(hardware), 1, timings.shapes, timings.time_s,
                          f"{timings.source.description} ({', '.join(timings.source.files)})",
                          measured=HARNESS_TERMS, attention_query_tile=HARNESS_QUERY_TILE,
                          ceilings=read_device_ceilings(path))


def from_llmservingsim(profile_dir: Path) -> list[PhysicsSamples]:
    out = []
    for tables in read_llmservingsim(profile_dir):
        spec, hardware = load_model(tables.model), load_hardware(tables.hardware)
        if spec.is_moe and tables.moe is None:
            continue   # no moe.csv (Qwen3-30B-A3B's tp 2): its steps' sums would miss the MoE blocks
        routing = (spec.num_experts, spec.num_experts_per_tok) if spec.is_moe else None
        fit = fit_tables(tables, holdout_every=0, routing=routing)
        chunk, cached, n_decode, context, attention_s = tables.attention
        shapes, times = [], []
        for c, k, n, d, a in zip(chunk.astype(int), cached.astype(int), n_decode.astype(int),
                                 context.astype(int), attention_s):
            if c == 0 and n == 0:
                continue
            shape = BatchShape.of(([c] if c else []) + [1] * n, ([k] if c else []) + [d] * n)
            tokens, sampled = shape.num_tokens, shape.num_sampled
            whole = fit.whole_model(tokens) if fit.whole_model is not None else 0.0
            shapes.append(shape)
            moe = fit.moe.time_s(tokens) if fit.moe is not None else 0.0
            times.append(spec.num_layers * (fit.layer(tokens) + a + moe) + whole + fit.sequence(sampled))
        out.append(PhysicsSamples(spec, hardware, tables.tensor_parallel_size, shapes, np.array(times),
                                  f"kernel sums of {profile_dir}, tp {tables.tensor_parallel_size}",
                                  measured=KERNEL_SUM_TERMS, launches=VLLM_LAUNCHES,
                                  attention_query_tile=VLLM_QUERY_TILE,
                                  decode_skew=_decode_skew(tables)))
        out.append(_per_sequence_part(out[-1], tables.sequence_ops))
    return out


def _decode_skew(tables) -> float | None:
    """The profile's measured alpha for unequal decode contexts at this TP degree (None: no sweep)."""
    alpha = (tables.notes.get("decode_skew") or {}).get("alpha_by_tp", {}).get(str(tables.tensor_parallel_size))
    return None if alpha is None else float(alpha)


def _per_sequence_part(steps: PhysicsSamples, sequence_ops: dict) -> PhysicsSamples:
    """The profile's lm_head and sampler against the sequences sampled, as rows of their own.

    In whole-step sums the lm_head's weight read is a constant per step, like each layer's kernel
    floors, and the fit cannot tell them apart (cost_models/profiles/README.md, "Physics files");
    its own timings settle it.
    """
    sequences = np.unique(np.concatenate([x for x, _ in sequence_ops.values()]))
    time_s = sum(np.interp(sequences, x, y) for x, y in sequence_ops.values())
    shapes = [BatchShape.of([1] * int(n), [0] * int(n)) for n in sequences]
    return replace(steps, shapes=shapes, time_s=time_s, measured=SEQUENCE_TERMS, part="lm_head and sampler")


def from_vidur(mlp_csv: Path) -> list[PhysicsSamples]:
    out = []
    for tables in read_vidur(mlp_csv):
        spec, hw = load_model(tables.model), load_hardware(tables.hardware)
        tokens = np.unique(np.concatenate([x for x, _ in tables.layer_ops.values()]))
        layer_s = sum(_mean_by_x(x, y, tokens) for x, y in tables.layer_ops.values())
        shapes = [BatchShape.of([int(t)], [0], [False]) for t in tokens]
        times = spec.num_layers * layer_s
        out.append(PhysicsSamples(spec, hw, tables.tensor_parallel_size, shapes, times,
                                  f"Vidur operator sums of {mlp_csv}, tp {tables.tensor_parallel_size}",
                                  measured=DENSE_TERMS, launches=VIDUR_DENSE_LAUNCHES,
                                  layer_launches=VLLM_LAUNCHES, attention_query_tile=VLLM_QUERY_TILE))
    return out


def from_vidur_attention(attention_csv: Path) -> list[PhysicsSamples]:
    """The legacy attention.csv as VIDUR_ATTENTION_MODEL's decodes and prefills, two parts (each
    weighs as a family), num_layers x the kernel's median, repeated grid points averaged."""
    tables = read_vidur_attention(attention_csv)
    spec, hw = load_model(VIDUR_ATTENTION_MODEL), load_hardware(tables.hardware)
    wrong = {k: v for k, v in tables.notes["shape"].items() if getattr(spec, k) != v}
    if wrong:
        raise ValueError(f"{attention_csv}: attention shape {wrong} is not {spec.name}'s, the model it is read as")
    *grid, time_s = tables.attention
    grid = np.column_stack(grid).astype(int)   # chunk, cached, decodes, decode context
    out = []
    for part, rows in (("attention: decodes", grid[:, 2] > 0), ("attention: prefills", grid[:, 0] > 0)):
        keys, inverse = np.unique(grid[rows], axis=0, return_inverse=True)
        inverse = inverse.ravel()
        mean_s = np.bincount(inverse, weights=time_s[rows]) / np.bincount(inverse)
        shapes = [BatchShape.of([c], [k]) if c else BatchShape.of([1] * n, [d] * n) for c, k, n, d in keys]
        out.append(PhysicsSamples(spec, hw, tables.tensor_parallel_size, shapes, spec.num_layers * mean_s,
                                  f"Vidur attention kernels of {attention_csv}, tp {tables.tensor_parallel_size}",
                                  measured=ATTENTION_TERMS, launches=VIDUR_ATTENTION_LAUNCHES, part=part,
                                  layer_launches=VLLM_LAUNCHES, in_fitted_range=True,
                                  attention_query_tile=VLLM_QUERY_TILE))
    return out


def _mean_by_x(x: np.ndarray, y: np.ndarray, at: np.ndarray) -> np.ndarray:
    """y at each of ``at``: the mean of repeated x (Vidur lists some token counts twice), interpolated."""
    xs, inverse = np.unique(x, return_inverse=True)
    return np.interp(at, xs, np.bincount(inverse, weights=y) / np.bincount(inverse))


def from_vllm_log(path: Path, request_lengths: Path, model: str, hardware: str) -> PhysicsSamples:
    """A vLLM iteration log whose steps are replayed from its requests' lengths (a CSV of
    prompt_tokens, output_tokens in arrival order): its measured terms are LOG_TERMS."""
    rows = read_csv_columns(request_lengths, ("prompt_tokens", "output_tokens"))
    lengths = [(int(number(request_lengths, i, "prompt_tokens", r["prompt_tokens"], allow_zero=False)),
                int(number(request_lengths, i, "output_tokens", r["output_tokens"], allow_zero=False)))
               for i, r in enumerate(rows)]
    timings = read_vllm_log(path, hardware=hardware, model=model, request_lengths=lengths)
    return PhysicsSamples(load_model(model), load_hardware(hardware), 1, timings.shapes, timings.time_s,
                          f"vLLM iteration log {path}, replayed from {request_lengths}", measured=LOG_TERMS,
                          launches=VLLM_LAUNCHES, attention_query_tile=VLLM_QUERY_TILE)


def is_vllm_log(path: Path) -> bool:
    """A vLLM iteration log source: ``*.log`` or ``*_iterations.csv``."""
    return path.suffix == ".log" or path.name.endswith("_iterations.csv")


def read_physics_sources(paths: list[Path], mode: str | None, hardware: str, model: str | None = None,
                         request_lengths: Path | None = None) -> list[PhysicsSamples]:
    """Every model's samples in each source, told apart by what the path holds (run.py's rule); a
    vLLM log (``*.log`` or ``*_iterations.csv``) needs ``request_lengths``, ``model`` and ``hardware``."""
    out = []
    for path in map(Path, paths):
        if is_vllm_log(path):
            if request_lengths is None or not model or not hardware:
                raise ValueError(f"{path}: a vLLM iteration log needs --request-lengths, --model and --hardware")
            out.append(from_vllm_log(path, Path(request_lengths), model, hardware))
            continue
        if (path / "meta.yaml").is_file():
            out += from_llmservingsim(path)
        elif path.name == "mlp.csv":
            out += from_vidur(path)
        elif path.name == "attention.csv":
            out += from_vidur_attention(path)
        else:
            csv_path = path / "timings.csv" if path.is_dir() else path
            models = sorted({r["model"] for r in read_csv_columns(csv_path, ("model", "mode"))
                             if mode is None or r["mode"] == mode})
            if not models:
                raise ValueError(f"{csv_path}: no rows with mode {mode!r}")
            out += [from_step_timings(csv_path, m, mode, hardware) for m in models]
    return out
