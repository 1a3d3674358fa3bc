"""KV capacity from GPU memory (scheduler-semantics.md rule 2.6, trap 10)."""
import math

import pytest

from cost_models.hardware import GiB, load_hardware
from cost_models.memory import (NCCL_BYTES_PER_RANK, NON_TORCH_BYTES, SAMPLER_BYTES_PER_LOGIT,
                                activation_peak_bytes, non_torch_bytes, num_gpu_blocks,
                                weights_bytes_per_rank)
from cost_models.model_spec import PRESETS, load_model

MiB = 2**20
LLAMA2_7B = load_model("llama-2-7b")
A100_80GB = load_hardware("a100-80gb")


def test_documented_constants():
    assert (NON_TORCH_BYTES, NCCL_BYTES_PER_RANK, SAMPLER_BYTES_PER_LOGIT) == (256 * MiB, 512 * MiB, 40)
    assert non_torch_bytes(1) == 256 * MiB and non_torch_bytes(4) == 768 * MiB


def test_llama2_7b_on_a100_80gb_block_count_by_hand():
    # Rule 2.6.6: N = floor((util x M - W - A - other) / (block_size x 2 L H_kv d b)).
    # Llama-2-7B: 32 layers, hidden 4096, 32 heads of 128 (all KV), FFN 11008, vocab 32000, bf16.
    requested = math.ceil(80 * GiB * 0.9)
    weights = 6_738_415_616 * 2                       # 32 x 202,383,360 + 2 x 32000 x 4096 + 4096 params
    tokens, seqs = 4096, 256                          # V0 default budget max(max_model_len, 2048), 256 seqs
    layer_peak = 2 * tokens * 4096 * 2 + tokens * 3 * 11008 * 2        # 337,641,472
    sampler_peak = tokens * 4096 * 2 + min(seqs, tokens) * 32000 * 40  # 361,234,432
    activations = max(layer_peak, sampler_peak)
    block_bytes = 16 * 2 * 32 * 32 * 128 * 2          # 8 MiB per 16-token block
    expected = (requested - weights - activations - 256 * MiB) // block_bytes
    assert expected == 7534
    assert num_gpu_blocks(LLAMA2_7B, A100_80GB, 1, 0.9, 16, tokens, seqs) == expected


def test_70b_on_one_80gb_gpu_raises_one_line():
    with pytest.raises(ValueError) as exc:
        num_gpu_blocks(load_model("llama-2-70b"), load_hardware("h100"), 1, 0.9, 16, 8192, 256)
    assert str(exc.value) == ("model: llama-2-70b needs 128.5 GiB of weights per GPU at "
                              "tensor_parallel_size=1 but h100-sxm x 0.90 gives 72.0 GiB")


def test_tp2_halves_kv_heads_so_blocks_per_rank_more_than_double():
    tokens, seqs = 4096, 256
    requested = math.ceil(80 * GiB * 0.9)
    blocks = {}
    for tp in (1, 2):
        kv_block_bytes = 16 * 2 * 32 * (32 // tp) * 128 * 2
        free = (requested - weights_bytes_per_rank(LLAMA2_7B, tp)
                - activation_peak_bytes(LLAMA2_7B, tokens, seqs, tp) - non_torch_bytes(tp))
        blocks[tp] = num_gpu_blocks(LLAMA2_7B, A100_80GB, tp, 0.9, 16, tokens, seqs)
        assert blocks[tp] == free // kv_block_bytes
    # Half the KV bytes per token doubles the blocks; the halved weights free even more.
    assert blocks[2] > 2 * blocks[1]


def test_weights_per_rank_at_tp1_are_the_whole_model():
    for model in PRESETS.values():
        assert weights_bytes_per_rank(model, 1) == model.weight_bytes, model.name


def test_weights_per_rank_shard_everything_but_norms():
    model = load_model("llama-3.1-8b")
    norms = (2 * 32 + 1) * 4096 * 2
    assert weights_bytes_per_rank(model, 2) == (model.weight_bytes - norms) // 2 + norms


def test_kv_heads_fewer_than_ranks_are_replicated():
    # llama-3.1-70b has 8 KV heads: at TP 16 each rank still holds one KV head of K and V.
    model = load_model("llama-3.1-70b")
    h, q, hd, layers = 8192, 8192, 128, 80
    per_layer = h * (2 * q // 16 + 2 * 1 * hd) + 3 * h * 28672 // 16 + 2 * h
    expected = (layers * per_layer + 2 * 128256 * h // 16 + h) * 2
    assert weights_bytes_per_rank(model, 16) == expected


def test_activation_peak_matches_vllm_profile_log_for_llama3_8b():
    # vllm-project/vllm PR #10511 logged "PyTorch activation peak memory 1.26GiB" for
    # Meta-Llama-3-8B (Llama-3.1-8B's shapes) at 8192 tokens / 256 seqs, at TP 1 and at TP 2.
    model = load_model("llama-3.1-8b")
    for tp in (1, 2):
        assert activation_peak_bytes(model, 8192, 256, tp) / GiB == pytest.approx(1.26, rel=0.03)


def test_larger_token_budget_means_fewer_blocks():
    # Trap 10: the activation peak grows with max_num_batched_tokens.
    counts = [num_gpu_blocks(LLAMA2_7B, A100_80GB, 1, 0.9, 16, t, 256) for t in (2048, 8192, 32768)]
    assert counts[0] >= counts[1] > counts[2]


def test_utilization_is_a_fraction_of_total_memory():
    # Rule 2.6.1: moving util by 0.1 moves the budget by 0.1 x total memory, nothing else.
    low, high = (num_gpu_blocks(LLAMA2_7B, A100_80GB, 1, u, 16, 4096, 256) for u in (0.5, 0.6))
    assert high - low == pytest.approx(0.1 * 80 * GiB / (8 * MiB), abs=1)


def test_no_block_fits_raises_naming_utilization():
    with pytest.raises(ValueError, match=r"^engine.gpu_memory_utilization: 0.16 of a100-80gb leaves"):
        num_gpu_blocks(LLAMA2_7B, A100_80GB, 1, 0.16, 16, 4096, 256)


@pytest.mark.parametrize("args, field", [
    ((1, 1.5, 16, 4096, 256), "engine.gpu_memory_utilization"),
    ((1, 0.9, 0, 4096, 256), "engine.block_size"),
    ((1, 0.9, 16, 0, 256), "engine.max_num_batched_tokens"),
    ((3, 0.9, 16, 4096, 256), "engine.tensor_parallel_size"),
    ((0, 0.9, 16, 4096, 256), "engine.tensor_parallel_size"),
])
def test_bad_engine_values_name_the_field(args, field):
    with pytest.raises(ValueError, match=field):
        num_gpu_blocks(LLAMA2_7B, A100_80GB, *args)
