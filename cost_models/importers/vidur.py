"""Vidur's per-operator profiles: ``compute/<gpu>/<org>/<model>/mlp.csv`` and ``network/<node>/all_reduce.csv``.

mlp.csv holds every non-attention operator of ONE layer against ``num_tokens``, per tensor-parallel
degree, in milliseconds (Vidur reads the ``.median`` columns, so do we). Vidur's per-model attention
files are absent from the reference copy, so attention comes from the roofline model. Vidur profiles
no lm_head or sampler; the roofline fills those in as well. See ../shared/reference/vidur-profiles/README.md.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from cost_models.importers.forms import OperatorTables, Source, number, read_csv_columns, sha256_of

# Vidur's iteration time sums these per layer (its README, "How Vidur uses these tables").
LAYER_OPS = ("input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
             "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")
MODEL_OPS = ("emb",)
# Vidur's model folders -> servesim presets with the same shapes (Llama-3-8B has Llama-3.1-8B's shapes).
MODEL_NAMES = {"Llama-2-7b-hf": "llama-2-7b", "Llama-2-70b-hf": "llama-2-70b", "Meta-Llama-3-8B": "llama-3.1-8b",
               "Meta-Llama-3-70B": "llama-3.1-70b"}
HARDWARE_NAMES = {"a100": "a100-80gb", "h100": "h100-sxm", "a40": "a40"}


def read_vidur(mlp_csv: Path, all_reduce_csv: Path | None = None) -> list[OperatorTables]:
    """One OperatorTables per tensor-parallel degree in mlp.csv, with all-reduce times where given."""
    mlp_csv = Path(mlp_csv)
    rows = read_csv_columns(mlp_csv, ("num_tokens", "num_tensor_parallel_workers",
                                      *(f"time_stats.{op}.median" for op in ("attn_pre_proj", "mlp_up_proj"))))
    by_tp: dict[int, list[tuple[int, dict]]] = defaultdict(list)
    for i, row in enumerate(rows):
        by_tp[int(number(mlp_csv, i, "num_tensor_parallel_workers", row["num_tensor_parallel_workers"]))].append((i, row))
    model_dir = mlp_csv.parent.name
    model = MODEL_NAMES.get(model_dir, model_dir.lower())
    hardware = HARDWARE_NAMES.get(mlp_csv.parents[2].name, mlp_csv.parents[2].name)
    reduce_rows = read_csv_columns(all_reduce_csv, ("num_workers", "size", "time_stats.all_reduce.median")) \
        if all_reduce_csv else []
    tables = []
    for tp, tp_rows in sorted(by_tp.items()):
        files = {str(mlp_csv): sha256_of(mlp_csv)}
        allreduce = None
        if tp > 1 and all_reduce_csv:
            allreduce = _allreduce(Path(all_reduce_csv), reduce_rows, tp)
            files[str(all_reduce_csv)] = sha256_of(all_reduce_csv)
        source = Source(f"Vidur mlp.csv {model_dir} on {mlp_csv.parents[2].name}, tp {tp} (per-op medians)", files)
        tables.append(OperatorTables(
            source, model, hardware, tp, _ops(mlp_csv, tp_rows, LAYER_OPS), _ops(mlp_csv, tp_rows, MODEL_OPS), {},
            attention=None, allreduce=allreduce, notes={"attention": "roofline", "lm_head_and_sampler": "roofline"}))
    return tables


def _ops(path: Path, rows: list[tuple[int, dict]], ops: tuple[str, ...]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    out = {}
    for op in ops:
        column = f"time_stats.{op}.median"
        if column not in rows[0][1]:
            continue  # phi-2 has no post_attention_layernorm
        pts = sorted((number(path, i, "num_tokens", r["num_tokens"], allow_zero=False),
                      number(path, i, column, r[column]) / 1e3) for i, r in rows)
        out[op] = (np.array([p[0] for p in pts]), np.array([p[1] for p in pts]))
    return out


def _allreduce(path: Path, rows: list[dict], tp: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Median over ranks of the per-size median time, for num_workers == tp (one node)."""
    by_size: dict[float, list[float]] = defaultdict(list)
    for i, row in enumerate(rows):
        if int(float(row["num_workers"])) == tp:
            by_size[number(path, i, "size", row["size"])].append(
                number(path, i, "time_stats.all_reduce.median", row["time_stats.all_reduce.median"]) / 1e3)
    if not by_size:
        return None
    sizes = np.array(sorted(by_size))
    return sizes, np.array([float(np.median(by_size[s])) for s in sizes])
