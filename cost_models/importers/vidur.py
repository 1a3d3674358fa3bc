"""Vidur's per-operator profiles: ``compute/<gpu>/<org>/<model>/mlp.csv``, ``network/<node>/all_reduce.csv``
and the legacy ``<gpu>/attention.csv``.

mlp.csv holds every non-attention operator of ONE layer against ``num_tokens``, per tensor-parallel
degree, in milliseconds (Vidur reads the ``.median`` columns, so do we). Vidur's per-model attention
files are absent from the reference copy, so the table profiles take attention from the roofline
model; the one legacy attention.csv (one attention shape, one TP degree) is read by
read_vidur_attention. Vidur profiles no lm_head or sampler; the roofline fills those in as well.
See ../shared/reference/vidur-profiles/README.md.
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
               "Meta-Llama-3-70B": "llama-3.1-70b", "CodeLlama-34b-Instruct-hf": "codellama-34b"}
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


# Vidur's attention operators; attn_input_reshape and attn_output_reshape are profiled too, but Vidur's
# iteration time leaves them out (its README, "How Vidur uses these tables"), and so do we.
ATTENTION_SHAPE = ("n_embd", "n_q_head", "n_kv_head", "num_tensor_parallel_workers")


def read_vidur_attention(attention_csv: Path) -> OperatorTables:
    """The legacy ``<gpu>/attention.csv``: ONE layer's attention kernel (attn_prefill or attn_decode,
    medians) per row as OperatorTables.attention, (prefill_chunk, kv_prefill, n_decode, kv_decode,
    time_s); a decode row is batch_size decodes of kv_cache_size context each, a prefill row one
    chunk of prefill_chunk_size tokens after kv_cache_size cached ones. The file's one attention
    shape and TP degree go in ``notes["shape"]``; ``model`` is left empty (a shape, not a model)."""
    path = Path(attention_csv)
    columns = (*ATTENTION_SHAPE, "batch_size", "prefill_chunk_size", "kv_cache_size", "is_prefill",
               "time_stats.attn_prefill.median", "time_stats.attn_decode.median")
    rows = read_csv_columns(path, columns)
    shapes = {tuple(int(number(path, i, c, r[c])) for c in ATTENTION_SHAPE) for i, r in enumerate(rows)}
    if len(shapes) != 1:
        raise ValueError(f"{path}: {len(shapes)} attention shapes {sorted(shapes)} (allowed: one per file)")
    (n_embd, q_heads, kv_heads, tp), = shapes
    out = []
    for i, r in enumerate(rows):
        if r["is_prefill"] not in ("True", "False"):
            raise ValueError(f"{path}: row {i + 2}, column is_prefill: {r['is_prefill']!r} is not True or False")
        prefill = r["is_prefill"] == "True"
        op = "time_stats.attn_prefill.median" if prefill else "time_stats.attn_decode.median"
        batch, kv = number(path, i, "batch_size", r["batch_size"]), number(path, i, "kv_cache_size", r["kv_cache_size"])
        chunk = number(path, i, "prefill_chunk_size", r["prefill_chunk_size"], allow_zero=not prefill)
        out.append((chunk if prefill else 0, kv if prefill else 0, 0 if prefill else batch, 0 if prefill else kv,
                    number(path, i, op, r[op], allow_zero=False) / 1e3))
    attention = tuple(np.array(column) for column in zip(*out))
    gpu = path.parent.name
    source = Source(f"Vidur attention.csv on {gpu}, tp {tp} (attention kernel medians)", {str(path): sha256_of(path)})
    return OperatorTables(source, "", HARDWARE_NAMES.get(gpu, gpu), tp, {}, {}, {}, attention=attention,
                          notes={"shape": {"hidden_size": n_embd, "num_attention_heads": q_heads,
                                           "num_kv_heads": kv_heads}})


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
