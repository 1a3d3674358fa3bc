"""What meta.json says about the machine, the software and the method of a calibration run."""
from __future__ import annotations

import platform
import subprocess
from dataclasses import asdict
from datetime import datetime, timezone

import torch

from calibration.decoder import RankShapes
from calibration.kv_cache import KvPoolPlan
from calibration.options import CalibrationOptions
from calibration.grid import StepShape
from cost_models.model_spec import ModelSpec

METHOD = {
    "step": "embedding, every layer (RMSNorm, fused QKV projection, QK-norm if the model has it, "
            "RoPE, attention, O projection, RMSNorm, SwiGLU MLP or router + top-k experts), final "
            "norm and lm_head on the sampled rows only, softmax and multinomial sampling",
    "attention": "torch SDPA per group of sequences sharing (new tokens, context); GQA through "
                 "enable_gqa; a prefill chunk causally over its cached context plus itself "
                 "(lower-right causal), each decode over its context plus one; new K/V written "
                 "into a preallocated cache",
    "weights": "random (normal, std 1/sqrt(fan_in)); nothing downloaded",
    "timer_cuda": "CUDA events around each repetition, synchronised between repetitions",
    "timer_cpu": "time.perf_counter around each repetition",
    "cuda_graph": "captured once per shape after the eager timing, replayed for warm-up and "
                  "repetitions, released before the next shape",
}


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def environment(device: torch.device) -> dict:
    env = {"device": device.type, "device_name": platform.processor() or platform.machine(),
           "driver": None, "cuda": torch.version.cuda, "torch": torch.__version__,
           "python": platform.python_version(), "host": platform.node(),
           "cpu_threads": torch.get_num_threads()}
    if device.type == "cuda":
        env["device_name"] = torch.cuda.get_device_name(device)
        env["device_memory_bytes"] = torch.cuda.get_device_properties(device).total_memory
        env["driver"] = _nvidia_driver()
    return env


def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True)
        return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def tp_note(tp: int) -> str | None:
    if tp == 1:
        return None
    return (f"one tensor-parallel rank of tp={tp} on one device: heads, FFN and vocabulary divided "
            f"by {tp}; the all-reduces after attention and MLP (and the logits gather) are NOT "
            f"included in the timings")


def kv_cache_meta(plan: KvPoolPlan, grid: tuple[StepShape, ...]) -> dict:
    return {
        "layout": plan.layout(grid),
        "rule": "layer i uses cache slice i % num_slices; num_slices = min(num_layers, "
                "pool_tokens // shape kv tokens): one cache per layer when it fits the budget, "
                "else layers share (values never matter with random weights)",
        "pool_tokens": plan.pool_tokens, "pool_bytes": plan.pool_bytes,
        "bytes_per_token_per_layer": plan.bytes_per_slot, "budget_bytes": plan.budget_bytes,
        "num_slices_by_shape": {s.label: plan.num_slices(s) for s in grid},
    }


def base_meta(options: CalibrationOptions, spec: ModelSpec, rank: RankShapes,
              device: torch.device, grid: tuple[StepShape, ...], plan: KvPoolPlan) -> dict:
    return {
        "model": spec.name, "model_config": asdict(spec), "rank_shapes": asdict(rank),
        **environment(device),
        "dtype": options.resolved_dtype, "tp": options.tp,
        "all_reduce_included": False, "tp_note": tp_note(options.tp),
        "repeats": options.repeats, "warmup": options.warmup, "cuda_graph": options.cuda_graph, "norm": options.norm,
        "quick": options.quick, "seed": options.seed, "time_budget_s": options.time_budget_s,
        "grid": [s.columns() for s in grid], "date": utc_now_iso(),
        "kv_cache": kv_cache_meta(plan, grid), "method": METHOD,
        "completed": False,
    }
