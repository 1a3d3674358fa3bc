"""Tensor-parallel communication per step: the one all-reduce rule the roofline and physics models share.

Two all-reduces per layer (after attention and after the MLP), each a ring all-reduce of the step's
hidden states: 2 (tp - 1) / tp of the bytes cross each GPU's link, plus a fixed latency per call.
"""
from __future__ import annotations

from cost_models.hardware import HardwareSpec
from cost_models.model_spec import ModelSpec

# Fixed cost of one small all-reduce (NCCL or vLLM's custom all-reduce over NVLink), on the order
# of 10 us.
ALLREDUCE_LATENCY_S = 1e-5


def allreduce_terms(spec: ModelSpec, hardware: HardwareSpec, tp: int) -> tuple[int, float]:
    """(all-reduces per step, seconds per token of one all-reduce); (0, 0.0) at tp 1."""
    s_per_token = 2 * (tp - 1) / tp * spec.hidden_size * spec.dtype_bytes / hardware.interconnect_bandwidth_Bps
    return (2 * spec.num_layers if tp > 1 else 0), s_per_token


def allreduce_step_s(terms: tuple[int, float], tokens: int, latency_s: float = ALLREDUCE_LATENCY_S) -> float:
    """The all-reduces of one step of ``tokens`` tokens (0.0 where there are none)."""
    count, s_per_token = terms
    return count * (s_per_token * tokens + latency_s) if count else 0.0
