"""The calibration loop: build the decoder, time every shape of the grid, write the results.

Imports only torch, numpy and the stdlib besides ``cost_models.model_spec``: the GPU machine that
runs it has neither simpy, pydantic nor pandas.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch

from calibration.attention import plan_groups
from calibration.ceilings import measure_ceilings, write_ceilings
from calibration.decoder import Decoder, RankShapes, StepInputs, shard
from calibration.grid import StepShape, named_grid
from calibration.kv_cache import KvPool, KvPoolPlan, plan_pool
from calibration.meta import base_meta
from calibration.options import CalibrationOptions
from calibration.output import META_FILE, TimingsWriter, write_json_atomic
from calibration.timer import time_cuda_graph, time_eager
from cost_models.model_spec import load_model

__all__ = ["CalibrationOptions", "run_calibration"]

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
CPU_KV_BUDGET_BYTES = 1 << 30
# Device memory kept free for activations, sampling buffers and one CUDA graph's private pool.
MIN_CUDA_RESERVE_BYTES = 12 << 30


def run_calibration(options: CalibrationOptions) -> Path:
    """Measures the device's ceilings (device.csv), times every shape of the grid and writes
    timings.csv and meta.json into ``out_dir``."""
    started = time.monotonic()
    out_dir = Path(options.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    device = _device(options.device)
    spec = load_model(options.model)
    rank = shard(spec, options.tp)
    grid = options.grid or named_grid("quick" if options.quick else "full")
    dtype = TORCH_DTYPES[options.resolved_dtype]
    with torch.inference_mode():
        ceilings = write_ceilings(out_dir, measure_ceilings(device, dtype, options.resolved_dtype,
                                                            options.warmup, options.repeats))
        decoder = Decoder(rank, dtype, device, max(s.max_position for s in grid), options.seed,
                          norm=options.norm)
        plan = _plan_kv(options, rank, grid, dtype, device)
        pool = KvPool(plan, rank.num_kv_heads, rank.head_dim, dtype, device)
        meta = base_meta(options, spec, rank, device, grid, plan)
        meta["ceilings_file"] = ceilings.name
        if rank.num_experts and options.cuda_graph != "off":
            meta["cuda_graph_note"] = "MoE routing reads expert counts on the host: eager only"
        write_json_atomic(out_dir / META_FILE, meta)
        _run_grid(options, decoder, pool, grid, meta, started, out_dir)
    return out_dir


def _run_grid(options, decoder, pool, grid, meta, started, out_dir) -> None:
    writer = TimingsWriter(out_dir)
    rng = np.random.default_rng(options.seed)
    meta.update(shapes_timed=0, shapes_skipped=[], budget_exhausted=False, graph_errors=[],
                shape_errors=[])
    try:
        for index, shape in enumerate(grid):
            if _budget_spent(options, started):
                meta["budget_exhausted"] = True
                meta["shapes_skipped"] = [s.label for s in grid[index:]]
                break
            try:
                rows = _time_shape(options, decoder, pool, shape, rng, meta)
            except torch.OutOfMemoryError as exc:  # one shape too big must not end the capture
                meta["shape_errors"].append(f"{shape.label}: out of memory: {exc}"[:500])
                if decoder.device.type == "cuda":
                    torch.cuda.empty_cache()
                continue
            writer.append(rows)
            meta["shapes_timed"] += 1
            _log(f"[{index + 1}/{len(grid)}] {shape.label} {_medians(rows)} "
                 f"(at {time.monotonic() - started:.1f} s)")
        writer.finish()
    finally:
        writer.close()
        meta["completed"] = meta["shapes_timed"] == len(grid)
        meta["elapsed_s"] = round(time.monotonic() - started, 2)
        meta["num_rows"] = writer.num_rows
        write_json_atomic(out_dir / META_FILE, meta)


def _time_shape(options, decoder: Decoder, pool: KvPool, shape: StepShape,
                rng: np.random.Generator, meta: dict) -> list[dict]:
    inputs = step_inputs(shape, decoder, pool, rng)
    device = decoder.device

    def step():
        return decoder.forward(inputs)

    eager = time_eager(step, device, options.warmup, options.repeats)
    rows = _rows(meta["model"], shape, "eager", eager)
    if _use_graph(options, shape, decoder, meta):
        try:
            graph = time_cuda_graph(step, options.warmup, options.repeats)
            rows += _rows(meta["model"], shape, "cuda_graph", graph)
        except RuntimeError as exc:  # keep the eager data; no more graphs after a failed capture
            meta["graph_errors"].append(f"{shape.label}: {type(exc).__name__}: {exc}"[:500])
            _log(f"CUDA graph failed for {shape.label}: {exc}")
    return rows


def step_inputs(shape: StepShape, decoder: Decoder, pool: KvPool,
                rng: np.random.Generator) -> StepInputs:
    """Static buffers for one shape: token ids, RoPE positions, the rows that sample, KV views."""
    positions, sample_index, row = [], [], 0
    for g in shape.groups:
        seq_positions = np.arange(g.context_tokens, g.context_tokens + g.new_tokens)
        positions.append(np.tile(seq_positions, g.num_seqs))
        # Each sequence samples at its last new token (every decode; the chunk's last token).
        sample_index.append(row + g.new_tokens * np.arange(1, g.num_seqs + 1) - 1)
        row += g.num_seqs * g.new_tokens
    ids = rng.integers(0, decoder.shapes.vocab_size, size=shape.tokens)
    device = decoder.device
    return StepInputs(
        input_ids=torch.as_tensor(ids, dtype=torch.int64, device=device),
        positions=torch.as_tensor(np.concatenate(positions), dtype=torch.int64, device=device),
        sample_index=torch.as_tensor(np.concatenate(sample_index), dtype=torch.int64,
                                     device=device),
        plans=plan_groups(shape.groups, device),
        layer_caches=pool.layer_caches(shape))


def _rows(model: str, shape: StepShape, mode: str, times_ms: list[float]) -> list[dict]:
    base = {"model": model, **shape.columns(), "mode": mode}
    return [{**base, "rep": rep, "time_ms": round(ms, 4)} for rep, ms in enumerate(times_ms)]


def _medians(rows: list[dict]) -> str:
    modes = dict.fromkeys(r["mode"] for r in rows)
    return " ".join(f"{m} {np.median([r['time_ms'] for r in rows if r['mode'] == m]):.3f} ms"
                    for m in modes)


def _use_graph(options: CalibrationOptions, shape: StepShape, decoder: Decoder,
               meta: dict) -> bool:
    wanted = options.cuda_graph == "all" or (options.cuda_graph == "decode"
                                             and shape.kind == "decode")
    return (wanted and decoder.device.type == "cuda" and not decoder.shapes.num_experts
            and not meta["graph_errors"])


def _plan_kv(options: CalibrationOptions, rank: RankShapes, grid: tuple[StepShape, ...],
             dtype: torch.dtype, device: torch.device) -> KvPoolPlan:
    bytes_per_slot = 2 * rank.kv_size * torch.finfo(dtype).bits // 8
    budget = options.kv_budget_bytes
    if budget is None and device.type == "cuda":
        free_bytes, _ = torch.cuda.mem_get_info(device)
        budget = free_bytes - max(MIN_CUDA_RESERVE_BYTES, 4 * _activation_bytes(rank, grid, dtype))
    elif budget is None:
        budget = CPU_KV_BUDGET_BYTES
    return plan_pool(grid, rank.num_layers, bytes_per_slot, max(budget, 0))


def _activation_bytes(rank: RankShapes, grid: tuple[StepShape, ...], dtype: torch.dtype) -> int:
    """Rough peak of one step's live activations: the largest step's widest tensors + logits."""
    tokens = max(s.tokens for s in grid)
    sampled = max(s.num_sampled for s in grid)
    ffn = max(rank.intermediate_size, rank.moe_intermediate_size * max(1, rank.num_experts_per_tok))
    width = 3 * ffn + rank.q_size + 2 * rank.kv_size + 4 * rank.hidden_size
    return tokens * width * torch.finfo(dtype).bits // 8 + 3 * sampled * rank.vocab_size * 4


def _budget_spent(options: CalibrationOptions, started: float) -> bool:
    return (options.time_budget_s is not None
            and time.monotonic() - started >= options.time_budget_s)


def _device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device: 'cuda' is not available here (torch sees no GPU); use 'cpu'")
    return torch.device(name)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
