"""How vLLM V1 lays out the KV cache of a hybrid model (docs/hybrid-state-semantics.md, H2-H4).

Every layer's cache is paged in one block pool with one page size: vLLM raises the attention
block size until an attention page holds at least one layer's state, and pads the state page up
to the attention page (``Platform._align_hybrid_block_size``). Layers are split into KV cache
groups of ``group_size`` layers of one kind; ``group_size`` tensors, each shared by one layer of
every group, hold ``num_blocks`` pages each, so a block costs page x group_size bytes
(``get_kv_cache_config_from_groups``). A request takes, from the one pool, ceil(tokens /
block_size) blocks in each attention group and one block in each state group (``MambaManager``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from cost_models.model_spec import ModelSpec

# FlashAttention's kernel block sizes are MultipleOf(16): the block size a state page rounds to.
KERNEL_BLOCK_ALIGNMENT = 16
# Types of more layers than this many times the fewest share the larger count as group size
# (vLLM's heuristic in _get_kv_cache_groups_uniform_page_size).
GROUP_SIZE_RATIO = 1.5


@dataclass(frozen=True)
class HybridLayout:
    block_size: int            # attention tokens per block, raised so one page holds a state
    page_bytes: int            # one layer's page (the attention page; the state page is padded)
    state_bytes: int           # one layer's state before padding
    group_size: int            # layers per KV cache group: tensors sharing the pool
    num_attention_groups: int  # each takes ceil(tokens / block_size) blocks of a request
    num_state_groups: int      # each takes one block of a running request

    @property
    def block_bytes(self) -> int:
        """Memory of one block id: a page in each of the group_size tensors."""
        return self.page_bytes * self.group_size

    @property
    def state_padding(self) -> float:
        """The fraction vLLM pads the state page by ("Padding mamba page size by ...%")."""
        return self.page_bytes / self.state_bytes - 1


def attention_page_bytes_per_token(model: ModelSpec, tensor_parallel_size: int) -> int:
    """K and V of one token in one attention layer on one rank."""
    kv_heads_per_rank = max(1, model.num_kv_heads // tensor_parallel_size)
    return 2 * kv_heads_per_rank * model.head_dim_ * model.dtype_bytes


def hybrid_layout(model: ModelSpec, tensor_parallel_size: int, block_size: int) -> HybridLayout | None:
    """The layout of a hybrid model's cache (None for a model without state layers)."""
    state = model.state_layers
    if state is None:
        return None
    tp = tensor_parallel_size
    state.check_tensor_parallel_size(tp, model.name)
    if model.num_attention_layers < 1:
        raise ValueError(f"model: {model.name} has no attention layer; attention-free models are "
                         f"not modelled (allowed: state_layers.num_layers < num_layers)")
    per_token = attention_page_bytes_per_token(model, tp)
    state_bytes = state.state_bytes(tp)
    alignment = max(KERNEL_BLOCK_ALIGNMENT, block_size)
    attn_block_size = alignment * -(-state_bytes // (alignment * per_token))
    block_size = max(block_size, attn_block_size)
    counts = (model.num_attention_layers, state.num_layers)
    group_size = min(counts)
    if max(counts) < group_size * GROUP_SIZE_RATIO:
        group_size = max(counts)
    return HybridLayout(block_size=block_size, page_bytes=block_size * per_token,
                        state_bytes=state_bytes, group_size=group_size,
                        num_attention_groups=math.ceil(counts[0] / group_size),
                        num_state_groups=math.ceil(counts[1] / group_size))


def kv_block_bytes(model: ModelSpec, tensor_parallel_size: int, block_size: int) -> int:
    """Memory of one KV block id on one rank: block_size tokens of every layer, or a hybrid
    model's page in each of its group_size tensors."""
    layout = hybrid_layout(model, tensor_parallel_size, block_size)
    if layout is None:
        return block_size * model.kv_bytes_per_token(tensor_parallel_size)
    return layout.block_bytes
