"""Kernel launches per decoder layer of an engine: what a step's fixed cost per layer counts
(the physics model's ``layer_launch``, the roofline's ``launch_s``); and the query tile of its
prefill attention kernel (the physics model's ``prefill_attention``)."""
from __future__ import annotations

from cost_models.model_spec import ModelSpec

# Kernel launches of the plain-PyTorch harness (calibration/decoder.py, unfused norm, as the H200
# reference): besides the norms, QKV 1, RoPE 5 on q and 5 on k, attention 4 (two KV-cache writes,
# SDPA, the output copy), O 1, two residual adds, gate_up 1, SiLU 1, mul 1, down 1 = 22; one unfused
# RMSNorm 8 (upcast, pow, mean, add, rsqrt, mul, downcast, weight mul); a step that both prefills
# and decodes attends in two groups: 4 more, and 1 to concatenate their outputs.
HARNESS_LAUNCHES = (22, 8, 5)
# vLLM's fused kernels: besides the norms, QKV 1, RoPE 1, KV-cache write 1, attention 1, O 1,
# gate_up 1, SiLU-and-mul 1, down 1 = 8; one (fused add +) RMSNorm 1; a mixed batch is one
# variable-length attention call.
VLLM_LAUNCHES = (8, 1, 0)
# Query rows of one tile of the engine's prefill attention kernel: each tile attends over the keys
# up to its last row, padding included, so a short chunk at a long context costs a whole tile a
# query head. The harness's torch SDPA runs FlashAttention 2's forward kernel (head dim 128 on
# sm80 / sm90: kBlockM 128, flash_fwd_launch_template.h); vLLM's paged KV cache sends prefills to
# FlashAttention 2's split-KV kernel (kBlockM 64). Vidur's profiles are priced as vLLM's.
HARNESS_QUERY_TILE = 128
VLLM_QUERY_TILE = 64


def launches_per_layer(spec: ModelSpec, launches: tuple[int, int, int]) -> int:
    """Kernel launches of one layer: ``launches`` = (launches besides the RMSNorms, launches of one
    RMSNorm, more in a mixed step); a layer runs two RMSNorms, four with QK-norm (on the queries and
    on the keys)."""
    other, per_norm, _ = launches
    return other + per_norm * (4 if spec.qk_norm else 2)
