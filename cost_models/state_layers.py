"""Layers that keep a fixed-size state per sequence instead of KV (docs/hybrid-state-semantics.md).

A hybrid model (Qwen3-Next's gated DeltaNet, Mamba2 in Nemotron-H or Jamba) replaces the attention
of some layers with a recurrent mixer: a causal convolution over the last ``conv_kernel`` inputs
and a recurrent state of ``num_heads`` matrices of head_k_dim x head_v_dim, both the same size
however long the sequence. The shapes are vLLM's (``MambaStateShapeCalculator``): the conv state
is (conv_dim / tp) x (conv_kernel - 1) and the recurrent state (num_heads / tp) x head_k_dim x
head_v_dim on each rank (rule H1).
"""
from __future__ import annotations

from dataclasses import dataclass

# FLOPs per token, head and state element of the recurrent update: reading the state against the
# key, writing the rank-one update, and reading it against the query (three k x v products of two
# FLOPs each); the gates' elementwise work is left out (docs/hybrid-state-semantics.md, cost).
SCAN_FLOPS_PER_STATE_ELEMENT = 6


@dataclass(frozen=True)
class StateLayers:
    """The recurrent layers of a hybrid model: how many, their state shapes and projections."""

    kind: str                 # "gated_deltanet" (Qwen3-Next) | "mamba2"
    num_layers: int
    conv_dim: int             # channels of the causal conv (its state keeps conv_kernel - 1 each)
    conv_kernel: int
    num_heads: int            # recurrent state heads
    head_k_dim: int           # each head's state is head_k_dim x head_v_dim
    head_v_dim: int
    in_proj_size: int         # output width of the input projection(s) from hidden_size
    out_proj_size: int        # input width of the output projection to hidden_size
    dtype_bytes: int = 2      # vLLM's mamba_ssm_cache_dtype "auto": the model's dtype

    def check_tensor_parallel_size(self, tp: int, model_name: str) -> None:
        """vLLM divides the conv channels and state heads evenly over ranks (its ``divide``)."""
        for field, value in (("conv channels", self.conv_dim), ("state heads", self.num_heads)):
            if value % tp:
                raise ValueError(f"engine.tensor_parallel_size: {tp} does not divide the {value} "
                                 f"{field} of {model_name}'s {self.kind} layers")

    def state_elements(self, tp: int) -> int:
        """Conv and recurrent state elements of one sequence in one layer on one rank."""
        conv = self.conv_dim // tp * (self.conv_kernel - 1)
        return conv + self.num_heads // tp * self.head_k_dim * self.head_v_dim

    def state_bytes(self, tp: int) -> int:
        """One sequence's state in one layer on one rank: vLLM's MambaSpec page, unpadded."""
        return self.state_elements(tp) * self.dtype_bytes

    def params_per_layer(self, hidden_size: int) -> int:
        """Input and output projections and the conv weights of one layer."""
        return (hidden_size * self.in_proj_size + self.conv_dim * self.conv_kernel
                + self.out_proj_size * hidden_size)

    def scan_flops_per_token(self, tp: int) -> int:
        """FLOPs of the recurrent update for one token in one layer on one rank."""
        return SCAN_FLOPS_PER_STATE_ELEMENT * self.num_heads // tp * self.head_k_dim * self.head_v_dim


def gated_deltanet_from_hf(cfg: dict) -> StateLayers:
    """Qwen3-Next's linear-attention layers from its config.json: every layer but each
    ``full_attention_interval``-th is a gated DeltaNet (its ``layer_types`` where given)."""
    layers = cfg["num_hidden_layers"]
    types = cfg.get("layer_types")
    if types:
        num_linear = sum(1 for t in types if t == "linear_attention")
    else:
        num_linear = layers - layers // cfg.get("full_attention_interval", 4)
    k_heads, v_heads = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    key_dim = k_heads * cfg["linear_key_head_dim"]
    value_dim = v_heads * cfg["linear_value_head_dim"]
    return StateLayers(
        kind="gated_deltanet", num_layers=num_linear, conv_dim=2 * key_dim + value_dim,
        conv_kernel=cfg.get("linear_conv_kernel_dim", 4), num_heads=v_heads,
        head_k_dim=cfg["linear_key_head_dim"], head_v_dim=cfg["linear_value_head_dim"],
        # in_proj_qkvz (q, k, v and the output gate z) and in_proj_ba (a beta and an alpha per head)
        in_proj_size=2 * key_dim + 2 * value_dim + 2 * v_heads, out_proj_size=value_dim,
        dtype_bytes=4 if cfg.get("torch_dtype") == "float32" else 2)
