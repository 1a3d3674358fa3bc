"""Model architectures: built-in presets and HuggingFace ``config.json`` files.

Only the shapes matter to servesim (weights are never loaded): the cost models count FLOPs and
bytes from them, the KV cache sizes its blocks from them, and the calibration harness builds a
random-weight decoder of the same shape.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

from cost_models import precision, user_paths
from cost_models.state_layers import StateLayers, gated_deltanet_from_hf


@dataclass(frozen=True)
class ModelSpec:
    """The shapes of a decoder-only transformer (dense or MoE), as its config.json gives them."""

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    intermediate_size: int
    vocab_size: int
    max_model_len: int
    head_dim: int | None = None          # None: hidden_size // num_attention_heads
    mlp_kind: str = "swiglu"             # swiglu (gate+up+down) | gelu/relu (fc1+fc2, OPT)
    num_experts: int = 0                 # MoE: routed experts per layer (0 = dense)
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    qk_norm: bool = False
    tie_word_embeddings: bool = False
    dtype_bytes: int = 2                 # bf16/fp16 activations, unquantized weights, "auto" KV
    quantization: str = "none"           # the linear weights' format (cost_models/precision.py)
    kv_cache_dtype: str = "auto"         # vLLM's --kv-cache-dtype
    expert_parallel: bool = False        # vLLM's --enable-expert-parallel: experts whole on the TP ranks
    # Hybrid models: the layers (of num_layers) whose mixer keeps a fixed state instead of KV.
    state_layers: StateLayers | None = None

    @property
    def head_dim_(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim_

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim_

    @property
    def num_attention_layers(self) -> int:
        """Layers with attention and KV; the rest keep a fixed state (state_layers)."""
        return self.num_layers - (self.state_layers.num_layers if self.state_layers else 0)

    @property
    def mixer_params(self) -> int:
        """Attention and state-layer projections over every layer."""
        state = self.state_layers
        attention = self.num_attention_layers * self.attn_params_per_layer
        return attention + (state.num_layers * state.params_per_layer(self.hidden_size) if state else 0)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def attn_params_per_layer(self) -> int:
        return self.hidden_size * (self.q_size + 2 * self.kv_size) + self.q_size * self.hidden_size

    @property
    def mlp_params_per_layer(self) -> int:
        """Parameters of one layer's FFN (all experts for MoE, plus the router)."""
        mats = 3 if self.mlp_kind == "swiglu" else 2
        if self.is_moe:
            return self.num_experts * mats * self.hidden_size * self.moe_intermediate_size \
                + self.hidden_size * self.num_experts
        return mats * self.hidden_size * self.intermediate_size

    @property
    def active_mlp_params_per_layer(self) -> int:
        """FFN parameters one token touches (top-k experts for MoE)."""
        mats = 3 if self.mlp_kind == "swiglu" else 2
        if self.is_moe:
            return self.num_experts_per_tok * mats * self.hidden_size * self.moe_intermediate_size
        return self.mlp_params_per_layer

    @property
    def router_params_per_layer(self) -> int:
        """The MoE gate (hidden x experts), kept in the activation dtype by every quantization."""
        return self.hidden_size * self.num_experts

    @property
    def linear_params_per_layer(self) -> int:
        """One layer's quantizable weights: attention projections and FFN (every expert), no router."""
        return self.attn_params_per_layer + self.mlp_params_per_layer - self.router_params_per_layer

    @property
    def weight_dtype_bytes(self) -> float:
        """Bytes of one linear weight: the quantization's width, else dtype_bytes."""
        return precision.weight_bytes_per_param(self.quantization, self.dtype_bytes)

    @property
    def kv_dtype_bytes(self) -> int:
        return precision.kv_bytes_per_element(self.kv_cache_dtype, self.dtype_bytes)

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    @property
    def num_params(self) -> int:
        per_layer = self.mlp_params_per_layer + 2 * self.hidden_size
        return self.mixer_params + self.num_layers * per_layer + self.embedding_params + self.hidden_size

    @property
    def weight_bytes(self) -> int:
        linear = self.num_layers * self.linear_params_per_layer
        return math.ceil(linear * self.weight_dtype_bytes + (self.num_params - linear) * self.dtype_bytes)

    def kv_bytes_per_token(self, tensor_parallel_size: int = 1) -> int:
        """K and V of every layer for one token on one TP rank (KV heads are split across ranks)."""
        kv_heads_per_rank = max(1, self.num_kv_heads // tensor_parallel_size)
        return 2 * self.num_attention_layers * kv_heads_per_rank * self.head_dim_ * self.kv_dtype_bytes

    def query_heads_per_kv_head(self, tensor_parallel_size: int = 1) -> float:
        """Query heads that share one KV head on a rank (KV heads split as kv_bytes_per_token has it)."""
        return self.num_attention_heads / tensor_parallel_size / max(1, self.num_kv_heads // tensor_parallel_size)

    def with_expert_parallel(self, enabled: bool) -> "ModelSpec":
        """vLLM's ``--enable-expert-parallel``: an MoE model's experts placed whole on the tensor-parallel
        ranks (cost_models/moe.py expert_load); refused for a dense model, which has none."""
        if enabled and not self.is_moe:
            raise ValueError(f"engine.enable_expert_parallel: true, but {self.name} has no experts "
                             f"(a dense model; expert parallelism needs an MoE model)")
        return replace(self, expert_parallel=bool(enabled))

    def expert_parallel_ranks(self, tensor_parallel_size: int) -> int:
        """Ranks the experts are placed whole on (moe.expert_load): the TP ranks under expert
        parallelism, else 1 (each rank a slice of every expert)."""
        return tensor_parallel_size if self.expert_parallel else 1

    def with_max_model_len(self, max_model_len: int) -> "ModelSpec":
        return replace(self, max_model_len=max_model_len)

    def with_precision(self, dtype: str = "auto", quantization: str | None = None,
                       kv_cache_dtype: str = "auto") -> "ModelSpec":
        """The engine's ``dtype``, ``quantization`` and ``kv_cache_dtype`` applied (vLLM's flags).

        ``quantization`` None keeps the config's; one that differs from the config's is refused,
        as vLLM refuses it.
        """
        width = precision.DTYPE_BYTES[precision.check_choice("engine.dtype", dtype, precision.DTYPES)]
        if quantization is not None:
            precision.check_choice("engine.quantization", quantization, precision.QUANTIZATIONS)
            if self.quantization != "none" and quantization != self.quantization:
                raise ValueError(f"engine.quantization: {quantization!r} differs from the "
                                 f"{self.quantization!r} of {self.name}'s quantization_config")
        precision.check_choice("engine.kv_cache_dtype", kv_cache_dtype, precision.KV_CACHE_DTYPES)
        return replace(self, dtype_bytes=width or self.dtype_bytes,
                       quantization=quantization or self.quantization, kv_cache_dtype=kv_cache_dtype)


# Published architectures (the models' own config.json files on their hubs).
PRESETS: dict[str, ModelSpec] = {m.name: m for m in [
    ModelSpec("llama-2-7b", num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=32,
              intermediate_size=11008, vocab_size=32000, max_model_len=4096),
    ModelSpec("llama-2-13b", num_layers=40, hidden_size=5120, num_attention_heads=40, num_kv_heads=40,
              intermediate_size=13824, vocab_size=32000, max_model_len=4096),
    ModelSpec("llama-2-70b", num_layers=80, hidden_size=8192, num_attention_heads=64, num_kv_heads=8,
              intermediate_size=28672, vocab_size=32000, max_model_len=4096),
    ModelSpec("llama-3.1-8b", num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
              intermediate_size=14336, vocab_size=128256, max_model_len=131072),
    ModelSpec("llama-3.1-70b", num_layers=80, hidden_size=8192, num_attention_heads=64, num_kv_heads=8,
              intermediate_size=28672, vocab_size=128256, max_model_len=131072),
    ModelSpec("qwen3-8b", num_layers=36, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
              head_dim=128, intermediate_size=12288, vocab_size=151936, max_model_len=40960,
              qk_norm=True),
    ModelSpec("qwen3-32b", num_layers=64, hidden_size=5120, num_attention_heads=64, num_kv_heads=8,
              head_dim=128, intermediate_size=25600, vocab_size=151936, max_model_len=40960,
              qk_norm=True),
    ModelSpec("qwen3-30b-a3b", num_layers=48, hidden_size=2048, num_attention_heads=32, num_kv_heads=4,
              head_dim=128, intermediate_size=6144, vocab_size=151936, max_model_len=262144,
              num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768, qk_norm=True),
    ModelSpec("mixtral-8x7b", num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
              intermediate_size=14336, vocab_size=32000, max_model_len=32768,
              num_experts=8, num_experts_per_tok=2, moe_intermediate_size=14336),
    ModelSpec("opt-13b", num_layers=40, hidden_size=5120, num_attention_heads=40, num_kv_heads=40,
              intermediate_size=20480, vocab_size=50272, max_model_len=2048, mlp_kind="relu",
              tie_word_embeddings=True),
    ModelSpec("yi-34b", num_layers=60, hidden_size=7168, num_attention_heads=56, num_kv_heads=8,
              intermediate_size=20480, vocab_size=64000, max_model_len=4096),
    # The three below are the models Vidur profiled (../shared/reference/vidur-profiles), from their
    # hubs' config.json as Vidur's vidur/config/model_config.py (microsoft/vidur 7d47513) copies them.
    # codellama/CodeLlama-34b-Instruct-hf: a Llama-2 layer, GQA, rope_theta 1e6.
    ModelSpec("codellama-34b", num_layers=48, hidden_size=8192, num_attention_heads=64, num_kv_heads=8,
              intermediate_size=22016, vocab_size=32000, max_model_len=16384),
    # internlm/internlm-20b (InternLM v1: a Llama layer with biases on q, k, v, o, which add no GEMM).
    ModelSpec("internlm-20b", num_layers=60, hidden_size=5120, num_attention_heads=40, num_kv_heads=40,
              intermediate_size=13824, vocab_size=103168, max_model_len=4096),
    # Qwen/Qwen-72B (Qwen v1, model_type "qwen"): its config.json intermediate_size 49152 is twice the
    # gated MLP's width (w1, w2 are each intermediate_size / 2 = 24576 wide, Vidur's mlp_hidden_dim).
    ModelSpec("qwen-72b", num_layers=80, hidden_size=8192, num_attention_heads=64, num_kv_heads=64,
              intermediate_size=24576, vocab_size=152064, max_model_len=32768),
    # The tiny Llama that ../shared/tools/vllm-cpu builds (make_tiny_model.py defaults), fp32 there.
    # Qwen/Qwen3-Next-80B-A3B-Instruct's config.json: 36 gated DeltaNet and 12 full-attention
    # layers (full_attention_interval 4). Its shared expert (512 wide) and attention output gate
    # are not in ModelSpec's shapes.
    ModelSpec("qwen3-next-80b-a3b", num_layers=48, hidden_size=2048, num_attention_heads=16,
              num_kv_heads=2, head_dim=256, intermediate_size=5120, vocab_size=151936,
              max_model_len=262144, num_experts=512, num_experts_per_tok=10, moe_intermediate_size=512,
              qk_norm=True, state_layers=StateLayers(
                  kind="gated_deltanet", num_layers=36, conv_dim=8192, conv_kernel=4, num_heads=32,
                  head_k_dim=128, head_v_dim=128, in_proj_size=12352, out_proj_size=4096)),
    ModelSpec("tiny-llama", num_layers=8, hidden_size=512, num_attention_heads=8, num_kv_heads=8,
              intermediate_size=1408, vocab_size=32000, max_model_len=4096, dtype_bytes=4),
]}


# HuggingFace model names (the part after the org, lowercase) of a preset's architecture under
# another name: instruct and dated releases share their base model's config.json shapes.
HF_NAMES = {
    "qwen3-30b-a3b-instruct-2507": "qwen3-30b-a3b", "qwen3-30b-a3b-thinking-2507": "qwen3-30b-a3b",
    "llama-3.1-8b-instruct": "llama-3.1-8b", "meta-llama-3.1-8b": "llama-3.1-8b",
    "meta-llama-3.1-8b-instruct": "llama-3.1-8b", "llama-3.1-70b-instruct": "llama-3.1-70b",
    "meta-llama-3.1-70b-instruct": "llama-3.1-70b", "llama-2-7b-hf": "llama-2-7b",
    "llama-2-7b-chat-hf": "llama-2-7b", "mixtral-8x7b-v0.1": "mixtral-8x7b",
    "mixtral-8x7b-instruct-v0.1": "mixtral-8x7b", "llama-2-13b-hf": "llama-2-13b", "llama-2-70b-hf": "llama-2-70b",
    "qwen3-next-80b-a3b-instruct": "qwen3-next-80b-a3b", "qwen3-next-80b-a3b-thinking": "qwen3-next-80b-a3b",
    "codellama-34b-hf": "codellama-34b", "codellama-34b-instruct-hf": "codellama-34b",
}


# HuggingFace model_type values whose layers ModelSpec describes: a Llama-style decoder (GQA,
# gated MLP, optional MoE and QK norm) or OPT. Others (gemma2's soft-capping and sliding windows,
# Mamba hybrids, ...) would be priced as a Llama without a word.
MODEL_TYPES = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "qwen3_next", "yi", "opt")


def _from_hf_config(cfg: dict, name: str) -> ModelSpec:
    """Map a HuggingFace config.json (Llama, Mistral, Mixtral, Qwen2/3, Qwen3-MoE, OPT, Yi) to a
    ModelSpec."""
    model_type = cfg.get("model_type", "llama")
    if model_type not in MODEL_TYPES:
        raise UnknownModelError(f"model: config.json model_type {model_type!r} is not modelled; "
                                f"allowed: {', '.join(MODEL_TYPES)}")
    if model_type == "opt":
        return ModelSpec(
            name=name, num_layers=cfg["num_hidden_layers"], hidden_size=cfg["hidden_size"],
            num_attention_heads=cfg["num_attention_heads"], num_kv_heads=cfg["num_attention_heads"],
            intermediate_size=cfg["ffn_dim"], vocab_size=cfg["vocab_size"],
            max_model_len=cfg.get("max_position_embeddings", 2048), mlp_kind="relu",
            tie_word_embeddings=cfg.get("tie_word_embeddings", True),
            quantization=precision.quantization_from_hf_config(cfg.get("quantization_config")))
    heads = cfg["num_attention_heads"]
    return ModelSpec(
        name=name, num_layers=cfg["num_hidden_layers"], hidden_size=cfg["hidden_size"],
        num_attention_heads=heads, num_kv_heads=cfg.get("num_key_value_heads") or heads,
        head_dim=cfg.get("head_dim"), intermediate_size=cfg.get("intermediate_size", 0),
        vocab_size=cfg["vocab_size"], max_model_len=cfg.get("max_position_embeddings", 4096),
        num_experts=cfg.get("num_experts") or cfg.get("num_local_experts") or 0,
        num_experts_per_tok=cfg.get("num_experts_per_tok", 0),
        moe_intermediate_size=cfg.get("moe_intermediate_size") or cfg.get("intermediate_size", 0),
        qk_norm=model_type.startswith("qwen3"),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        dtype_bytes=4 if cfg.get("torch_dtype") == "float32" else 2,
        state_layers=gated_deltanet_from_hf(cfg) if model_type == "qwen3_next" else None,
        quantization=precision.quantization_from_hf_config(cfg.get("quantization_config")))


class UnknownModelError(ValueError):
    pass


def load_model(name_or_path: str) -> ModelSpec:
    """A preset name (case-insensitive, HF org prefix ignored, ``HF_NAMES`` mapped) or a path to a
    config.json / model dir."""
    path = Path(name_or_path)
    if user_paths.is_dir(path):   # a local model folder wins over a preset of the same name
        path = path / "config.json"
    key = name_or_path.lower().rsplit("/", 1)[-1]
    key = HF_NAMES.get(key, key)
    if key in PRESETS and not user_paths.is_file(path):
        return PRESETS[key]
    if user_paths.is_file(path):
        try:
            cfg = json.loads(path.read_text())
            return _from_hf_config(cfg, name=path.parent.name or path.stem)
        except (KeyError, json.JSONDecodeError) as exc:
            raise UnknownModelError(f"model: {name_or_path!r} is not a usable HuggingFace config.json "
                                    f"({type(exc).__name__}: {exc})") from None
    raise UnknownModelError(f"model: {name_or_path!r} is neither a preset "
                            f"({', '.join(sorted(PRESETS))}) nor a config.json path")
