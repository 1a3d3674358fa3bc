"""LLMServingSim per-layer kernel profiles (vLLM 0.19 layer hooks, one-layer model, eager).

A profile folder ``profiles/<GPU>/<org>/<model>/<variant>/`` holds ``meta.yaml`` and one ``tpN/``
folder per tensor-parallel degree with ``dense.csv`` (layer,tokens,time_us), ``per_sequence.csv``
(layer,sequences,time_us) and ``attention.csv`` (prefill_chunk,kv_prefill,n_decode,kv_decode,time_us);
an MoE model's folder may add ``moe.csv`` (tokens,activated_experts,time_us: one layer's experts).
See ../shared/reference/llmservingsim/README.md.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import yaml

from cost_models.importers.forms import OperatorTables, Source, number, read_csv_columns, sha256_of

MODEL_OPS = ("embedding", "final_layernorm")  # once per step; every other dense.csv row is per layer
# vLLM's decoder layer runs its RMSNorm twice (input and post-attention); the profile names one
# "layernorm" row, so it counts twice per layer.
LAYER_OP_REPEATS = {"layernorm": 2}
MOE_COLUMNS = ("tokens", "activated_experts", "time_us")
ATTENTION_COLUMNS = ("prefill_chunk", "kv_prefill", "n_decode", "kv_decode", "time_us")
HARDWARE_NAMES = {"RTXPRO6000": "rtx-pro-6000", "RTX4090": "rtx-4090"}


def read_llmservingsim(profile_dir: Path) -> list[OperatorTables]:
    """One OperatorTables per ``tpN/`` folder; ``profile_dir`` is the folder with meta.yaml or a tpN/ in it."""
    profile_dir = Path(profile_dir)
    if profile_dir.name.startswith("tp") and (profile_dir.parent / "meta.yaml").is_file():
        tp_dirs, profile_dir = [profile_dir], profile_dir.parent
    else:
        tp_dirs = sorted(p for p in profile_dir.glob("tp*") if p.is_dir())
    meta_path = profile_dir / "meta.yaml"
    if not meta_path.is_file() or not tp_dirs:
        raise ValueError(f"{profile_dir}: not an LLMServingSim profile folder (needs meta.yaml and tpN/ folders)")
    meta = yaml.safe_load(meta_path.read_text())
    model = str(meta.get("model", profile_dir.parent.name)).rsplit("/", 1)[-1].lower()
    hardware = HARDWARE_NAMES.get(str(meta.get("hardware")), str(meta.get("hardware", "")).lower())
    return [_read_tp(tp_dir, meta_path, meta, model, hardware) for tp_dir in tp_dirs]


def _read_tp(tp_dir: Path, meta_path: Path, meta: dict, model: str, hardware: str) -> OperatorTables:
    tp = int(tp_dir.name[2:])
    dense_path, seq_path, attn_path = tp_dir / "dense.csv", tp_dir / "per_sequence.csv", tp_dir / "attention.csv"
    moe_path = tp_dir / "moe.csv"
    dense = _op_tables(dense_path, "tokens")
    layer_ops = {op: (x, y * LAYER_OP_REPEATS.get(op, 1)) for op, (x, y) in dense.items() if op not in MODEL_OPS}
    model_ops = {op: dense[op] for op in MODEL_OPS if op in dense}
    paths = [meta_path, dense_path, seq_path] + [p for p in (attn_path, moe_path) if p.is_file()]
    source = Source(f"LLMServingSim profile {meta.get('model')} on {meta.get('gpu')}, vLLM "
                    f"{meta.get('vllm_version')}, CUDA {meta.get('cuda_version')}, tp {tp} (kernel times, eager)",
                    {str(p): sha256_of(p) for p in paths})
    return OperatorTables(source, model, hardware, tp, layer_ops, model_ops, _op_tables(seq_path, "sequences"),
                          attention=_attention(attn_path) if attn_path.is_file() else None,
                          moe=_moe(moe_path) if moe_path.is_file() else None,
                          notes={"layer_op_repeats": LAYER_OP_REPEATS, **_decode_skew(meta)})


def _decode_skew(meta: dict) -> dict:
    """The profile's own fit of decodes with unequal contexts, where it ran one (``skew_fit``).

    Its per-bucket table (tpN/skew_fit.csv) is not part of the profile folder we read, so the
    pooled value ``alpha_default`` is taken: attention = t(mean) + alpha (t(max) - t(mean))
    (cost_models/profiled.py). An empty dict where the profile has no skew sweep.
    """
    fit = meta.get("skew_fit") or {}
    entries = {str(tp): e for tp, e in (fit.get("per_tp") or {}).items()
               if isinstance(e, dict) and e.get("alpha_default") is not None}
    if not fit.get("enabled") or not entries:
        return {}
    return {"decode_skew": {
        "alpha_by_tp": {tp: float(e["alpha_default"]) for tp, e in entries.items()},
        "source": "meta.yaml skew_fit.per_tp[tp].alpha_default: the pooled alpha the profiler fitted to its "
                  "heterogeneous-decode sweep, (t_skew - t_mean) / (t_max - t_mean)",
        "method": str(next(iter(entries.values())).get("method", ""))}}


def _op_tables(path: Path, x_column: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rows = read_csv_columns(path, ("layer", x_column, "time_us"))
    points: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for i, row in enumerate(rows):
        points[row["layer"]].append((number(path, i, x_column, row[x_column], allow_zero=False),
                                     number(path, i, "time_us", row["time_us"], allow_zero=False) / 1e6))
    out = {}
    for op, pts in points.items():
        pts.sort()
        out[op] = (np.array([p[0] for p in pts]), np.array([p[1] for p in pts]))
    return out


def _moe(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows = read_csv_columns(path, MOE_COLUMNS)
    values = np.array([[number(path, i, c, row[c], allow_zero=False) for c in MOE_COLUMNS]
                       for i, row in enumerate(rows)])
    return values[:, 0], values[:, 1], values[:, 2] / 1e6


def _attention(path: Path) -> tuple[np.ndarray, ...]:
    rows = read_csv_columns(path, ATTENTION_COLUMNS)
    values = np.array([[number(path, i, c, row[c]) for c in ATTENTION_COLUMNS] for i, row in enumerate(rows)])
    if (values[:, 4] <= 0).any():
        raise ValueError(f"{path}: column time_us: times must be positive")
    return values[:, 0], values[:, 1], values[:, 2], values[:, 3], values[:, 4] / 1e6
