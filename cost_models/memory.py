"""KV-cache capacity derived from GPU memory the way vLLM sizes it (scheduler-semantics.md 2.6, trap 10).

vLLM (``gpu_worker.determine_available_memory``) loads the weights, runs one dummy forward pass of
``max_num_batched_tokens`` tokens over ``min(max_num_seqs, max_num_batched_tokens)`` requests plus a
sampler pass (the profile run), and gives the KV cache what is left of
``gpu_memory_utilization x total memory`` after the weights, the torch activation peak of that run
and the non-torch memory (CUDA context, NCCL, cuBLAS workspaces). We cannot run the profile, so the
activation peak and the non-torch part are documented estimates.
"""
from __future__ import annotations

import math

from cost_models.hardware import GiB, HardwareSpec
from cost_models.hybrid_layout import kv_block_bytes
from cost_models.model_spec import ModelSpec
from cost_models.pipeline import stage_models

MiB = 2**20
# Non-torch memory at TP 1: vLLM's memory profiling logged "non_torch_memory takes 0.16GiB" for a
# single H100 (vllm-project/vllm PR #12126); rounded up to cover the cuBLAS workspace and allocator
# slack that vary by version.
NON_TORCH_BYTES = 256 * MiB
# Extra non-torch memory per rank at TP > 1: NCCL communicator buffers and vLLM's custom all-reduce
# IPC buffers. PR #10511's log for Llama-3-8B grew from 1.79 GiB (TP 1) to 3.58 GiB (TP 2) under the
# accounting of that time; half a GiB is the order seen after the accounting was fixed.
NCCL_BYTES_PER_RANK = 512 * MiB
# Peak bytes per logit of the sampler pass: bf16 logits, their fp32 copy, softmax probabilities and
# a top-k/top-p sort (fp32 values + int64 indices) live together. 40 bytes reproduces, within 2%,
# the 1.26 GiB activation peak vLLM PR #10511 logged for Llama-3-8B (8192 tokens, 256 sequences),
# which was the same at TP 1 and TP 2: the sampler, not a decoder layer, set that peak.
SAMPLER_BYTES_PER_LOGIT = 40


def check_tensor_parallel_size(model: ModelSpec, tensor_parallel_size: int) -> None:
    """vLLM shards attention heads evenly over ranks; anything else fails at startup."""
    tp = tensor_parallel_size
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ValueError(f"engine.tensor_parallel_size: {tp!r} is not a positive integer")
    if model.num_attention_heads % tp:
        raise ValueError(f"engine.tensor_parallel_size: {tp} does not divide the "
                         f"{model.num_attention_heads} attention heads of {model.name}")


def weights_bytes_per_rank(model: ModelSpec, tensor_parallel_size: int) -> int:
    """Weights one rank holds: layers, embedding and lm_head split over ranks; norms replicated.

    Where there are fewer KV heads than ranks, vLLM replicates them: each rank keeps one KV head,
    so the K/V projections do not shrink past that point. The linear weights take the
    quantization's bytes (cost_models/precision.py); embeddings, norms and routers the dtype's.
    An MoE router is replicated on every rank (vLLM builds it as a ReplicatedLinear).
    """
    tp = tensor_parallel_size
    check_tensor_parallel_size(model, tp)
    kv_heads_per_rank = max(1, model.num_kv_heads // tp)
    attn = model.hidden_size * (2 * model.q_size // tp + 2 * kv_heads_per_rank * model.head_dim_)
    router = model.router_params_per_layer
    linear = model.num_layers * (attn + (model.mlp_params_per_layer - router) // tp)
    state = model.state_layers
    if state is not None:   # its layers' projections in place of attention's, split over ranks
        linear += state.num_layers * (state.params_per_layer(model.hidden_size) // tp - attn)
    other = model.num_layers * (router + 2 * model.hidden_size) \
        + model.embedding_params // tp + model.hidden_size
    return math.ceil(linear * model.weight_dtype_bytes + other * model.dtype_bytes)


def activation_peak_bytes(model: ModelSpec, max_num_batched_tokens: int, max_num_seqs: int,
                          tensor_parallel_size: int, samples: bool = True) -> int:
    """Estimated torch activation peak of vLLM's profile run on one rank.

    The larger of two moments: inside a decoder layer (residual and normed hidden states plus the
    wider of the attention projections and the MLP intermediates, all for every token), and the
    sampler pass (final hidden states plus full-vocabulary logits of one row per request, gathered
    over ranks, at SAMPLER_BYTES_PER_LOGIT each). Flash attention keeps no score matrix.
    ``samples``: False for a pipeline stage before the last, which runs no sampler.
    """
    tokens, tp = max_num_batched_tokens, tensor_parallel_size
    hidden_bytes = tokens * model.hidden_size * model.dtype_bytes
    layer = 2 * hidden_bytes + tokens * _widest_layer_intermediate(model, tp) * model.dtype_bytes
    if not samples:
        return layer
    rows = min(max_num_seqs, tokens)
    sampler = hidden_bytes + rows * model.vocab_size * SAMPLER_BYTES_PER_LOGIT
    return max(layer, sampler)


def _widest_layer_intermediate(model: ModelSpec, tp: int) -> int:
    """Elements per token of the largest intermediates alive at once inside one layer, per rank."""
    attention = (2 * model.q_size + 2 * model.kv_size) // tp       # QKV output + attention output
    mats = 3 if model.mlp_kind == "swiglu" else 2                  # gate_up (2I) + activation (I)
    if model.is_moe:
        mlp = model.num_experts_per_tok * mats * model.moe_intermediate_size // tp + model.num_experts
    else:
        mlp = mats * model.intermediate_size // tp
    return max(attention, mlp)


def non_torch_bytes(num_gpus: int) -> int:
    """CUDA context and workspaces, and NCCL's buffers where the engine spans more than one GPU."""
    return NON_TORCH_BYTES + (NCCL_BYTES_PER_RANK if num_gpus > 1 else 0)


def num_gpu_blocks(model: ModelSpec, hardware: HardwareSpec, tensor_parallel_size: int,
                   gpu_memory_utilization: float, block_size: int, max_num_batched_tokens: int,
                   max_num_seqs: int, pipeline_parallel_size: int = 1) -> int:
    """KV blocks per rank: floor((ceil(util x M) - W - A - other) / (block_size x kv_bytes_per_token)),
    or, for a hybrid model, over its block's bytes (cost_models/hybrid_layout.py). Under pipeline
    parallelism each stage sizes its own cache over its own layers and the engine takes the least
    (rule P2: vLLM's scheduler sees one pool, the fewest blocks of any worker).

    This is the pool size vLLM reports as num_gpu_blocks; block 0 is its null block, so the usable
    count is one less (rule 2.6.6), which the KV cache, not this function, accounts for.
    """
    _check_engine(gpu_memory_utilization, block_size, max_num_batched_tokens, max_num_seqs)
    stages = stage_models(model, pipeline_parallel_size)
    return min(_stage_blocks(stage, hardware, tensor_parallel_size, gpu_memory_utilization, block_size,
                             max_num_batched_tokens, max_num_seqs, stage is stages[-1],
                             tensor_parallel_size * pipeline_parallel_size) for stage in stages)


def _stage_blocks(model: ModelSpec, hardware: HardwareSpec, tp: int, gpu_memory_utilization: float,
                  block_size: int, max_num_batched_tokens: int, max_num_seqs: int, samples: bool,
                  num_gpus: int) -> int:
    """One rank's KV blocks (num_gpu_blocks) of the model or of one pipeline stage."""
    requested = math.ceil(hardware.memory_bytes * gpu_memory_utilization)
    weights = weights_bytes_per_rank(model, tp)
    if weights >= requested:
        raise ValueError(
            f"model: {model.name} needs {weights / GiB:.1f} GiB of weights per GPU at "
            f"tensor_parallel_size={tp} but {hardware.name} x {gpu_memory_utilization:.2f} gives "
            f"{requested / GiB:.1f} GiB")
    activations = activation_peak_bytes(model, max_num_batched_tokens, max_num_seqs, tp, samples)
    other = non_torch_bytes(num_gpus)
    available = requested - weights - activations - other
    block_bytes = kv_block_bytes(model, tp, block_size)
    blocks = available // block_bytes
    if blocks < 2:  # block 0 is the null block (rule 2.1): one block leaves none usable
        raise ValueError(
            f"engine.gpu_memory_utilization: {gpu_memory_utilization:.2f} of {hardware.name} leaves "
            f"{available / GiB:.2f} GiB for the KV cache after {weights / GiB:.1f} GiB of weights, "
            f"{activations / GiB:.2f} GiB of activations and {other / GiB:.2f} GiB "
            f"of other memory, less than one block of {block_size} tokens "
            f"({block_bytes / MiB:.1f} MiB); raise gpu_memory_utilization or "
            f"tensor_parallel_size, or lower max_num_batched_tokens")
    return int(blocks)


def _check_engine(util: float, block_size: int, max_num_batched_tokens: int,
                  max_num_seqs: int) -> None:
    if isinstance(util, bool) or not isinstance(util, (int, float)) or not 0 < util <= 1:
        raise ValueError(f"engine.gpu_memory_utilization: {util!r} must be a number in (0, 1]")
    for field, value in (("block_size", block_size), ("max_num_batched_tokens", max_num_batched_tokens),
                         ("max_num_seqs", max_num_seqs)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"engine.{field}: {value!r} is not a positive integer")
