"""A Llama-style decoder with random weights, built from a ModelSpec, that runs one serving step.

One step = embedding, every layer (RMSNorm, fused QKV projection, optional QK-norm, RoPE, attention
per request, O projection, RMSNorm, SwiGLU MLP or router + top-k experts), final norm and lm_head on
the rows that sample only, softmax and multinomial sampling. Plain PyTorch operators, like the H200
reference in ``../shared/reference/h200``; an engine's fused kernels are faster per step.

With ``tp > 1`` the decoder is one tensor-parallel rank's shard (heads, FFN and vocabulary divided by
``tp``); the all-reduces between ranks are not run.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from calibration.attention import GroupPlan, attend
from cost_models.model_spec import ModelSpec

RMS_EPS = 1e-6
ROPE_THETA = 10_000.0   # any base times the same; values never matter with random weights


@dataclass(frozen=True)
class RankShapes:
    """The sizes one tensor-parallel rank holds."""
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    mlp_kind: str
    num_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int
    qk_norm: bool
    tie_word_embeddings: bool

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim


def shard(spec: ModelSpec, tp: int) -> RankShapes:
    """vLLM's split: heads and FFN columns by tp, KV heads by tp but replicated when tp > KV heads."""
    if tp < 1 or spec.num_attention_heads % tp:
        raise ValueError(f"tp: {tp} must be >= 1 and divide num_attention_heads "
                         f"({spec.num_attention_heads})")
    ffn = spec.moe_intermediate_size if spec.is_moe else spec.intermediate_size
    if ffn % tp:
        raise ValueError(f"tp: {tp} must divide the FFN size ({ffn})")
    return RankShapes(
        num_layers=spec.num_layers, hidden_size=spec.hidden_size,
        num_heads=spec.num_attention_heads // tp, num_kv_heads=max(1, spec.num_kv_heads // tp),
        head_dim=spec.head_dim_, intermediate_size=spec.intermediate_size // tp,
        vocab_size=math.ceil(spec.vocab_size / tp), mlp_kind=spec.mlp_kind,
        num_experts=spec.num_experts, num_experts_per_tok=spec.num_experts_per_tok,
        moe_intermediate_size=spec.moe_intermediate_size // tp, qk_norm=spec.qk_norm,
        tie_word_embeddings=spec.tie_word_embeddings)


@dataclass(frozen=True)
class StepInputs:
    """Everything one step reads, allocated once per shape (static buffers for CUDA graphs)."""
    input_ids: torch.Tensor        # [T] int64
    positions: torch.Tensor        # [T] int64
    sample_index: torch.Tensor     # [S] int64, rows whose next token is sampled
    plans: tuple[GroupPlan, ...]
    layer_caches: list[tuple[torch.Tensor, torch.Tensor]]


class Decoder:
    def __init__(self, shapes: RankShapes, dtype: torch.dtype, device: torch.device,
                 max_positions: int, seed: int = 0, norm: str = "fused"):
        self.shapes, self.dtype, self.device = shapes, dtype, device
        self._norm = _rms_norm if norm == "fused" else _rms_norm_unfused
        self._gen = torch.Generator(device=device).manual_seed(seed)
        s = shapes
        self.embed = self._param(s.vocab_size, s.hidden_size, std=1.0)
        self.layers = [self._layer_weights() for _ in range(s.num_layers)]
        self.final_norm = self._ones(s.hidden_size)
        self.lm_head = self.embed if s.tie_word_embeddings else self._param(s.vocab_size,
                                                                            s.hidden_size)
        self.cos, self.sin = self._rope_tables(max_positions)

    # -- weights -------------------------------------------------------------------------------
    def _param(self, *size: int, std: float | None = None) -> torch.Tensor:
        # 1/sqrt(fan_in) keeps activations O(1) through every layer, so no inf/NaN reaches sampling.
        std = std if std is not None else 1.0 / math.sqrt(size[-1])
        t = torch.empty(*size, dtype=self.dtype, device=self.device)
        return t.normal_(0.0, std, generator=self._gen)

    def _ones(self, *size: int) -> torch.Tensor:
        return torch.ones(*size, dtype=self.dtype, device=self.device)

    def _layer_weights(self) -> dict[str, torch.Tensor]:
        s = self.shapes
        w = {"input_norm": self._ones(s.hidden_size), "post_norm": self._ones(s.hidden_size),
             "qkv": self._param(s.q_size + 2 * s.kv_size, s.hidden_size),
             "o": self._param(s.hidden_size, s.q_size)}
        if s.qk_norm:
            w["q_norm"], w["k_norm"] = self._ones(s.head_dim), self._ones(s.head_dim)
        if s.num_experts:
            w["router"] = self._param(s.num_experts, s.hidden_size)
            w["w13"] = self._param(s.num_experts, 2 * s.moe_intermediate_size, s.hidden_size)
            w["w2"] = self._param(s.num_experts, s.hidden_size, s.moe_intermediate_size)
        elif s.mlp_kind == "swiglu":
            w["w13"] = self._param(2 * s.intermediate_size, s.hidden_size)
            w["w2"] = self._param(s.hidden_size, s.intermediate_size)
        else:
            w["w1"] = self._param(s.intermediate_size, s.hidden_size)
            w["w2"] = self._param(s.hidden_size, s.intermediate_size)
        return w

    def _rope_tables(self, max_positions: int) -> tuple[torch.Tensor, torch.Tensor]:
        d = self.shapes.head_dim
        inv_freq = 1.0 / ROPE_THETA ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
        angles = torch.outer(torch.arange(max_positions, dtype=torch.float32), inv_freq)
        angles = torch.cat((angles, angles), dim=-1).to(self.device)
        return angles.cos().to(self.dtype), angles.sin().to(self.dtype)

    # -- one step ------------------------------------------------------------------------------
    def forward(self, step: StepInputs) -> torch.Tensor:
        """Runs the step and returns the sampled token ids, [S, 1]."""
        x = F.embedding(step.input_ids, self.embed)
        cos = self.cos[step.positions].unsqueeze(1)
        sin = self.sin[step.positions].unsqueeze(1)
        for w, (k_cache, v_cache) in zip(self.layers, step.layer_caches):
            x = self._layer(x, w, cos, sin, step.plans, k_cache, v_cache)
        h = self._norm(x[step.sample_index], self.final_norm)
        probs = torch.softmax(F.linear(h, self.lm_head).float(), dim=-1)
        return torch.multinomial(probs, 1)

    def _layer(self, x, w, cos, sin, plans, k_cache, v_cache) -> torch.Tensor:
        s, num_tokens = self.shapes, x.shape[0]
        qkv = F.linear(self._norm(x, w["input_norm"]), w["qkv"])
        q, k, v = qkv.split([s.q_size, s.kv_size, s.kv_size], dim=-1)
        q = q.view(num_tokens, s.num_heads, s.head_dim)
        k = k.view(num_tokens, s.num_kv_heads, s.head_dim)
        if s.qk_norm:
            q, k = self._norm(q, w["q_norm"]), self._norm(k, w["k_norm"])
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        v = v.view(num_tokens, s.num_kv_heads, s.head_dim)
        x = x + F.linear(attend(q, k, v, plans, k_cache, v_cache), w["o"])
        h = self._norm(x, w["post_norm"])
        return x + self._mlp(h, w)

    def _mlp(self, h: torch.Tensor, w: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.shapes.num_experts:
            return _moe(h, w, self.shapes.num_experts_per_tok)
        if "w13" in w:
            return _swiglu(h, w["w13"], w["w2"])
        act = F.relu if self.shapes.mlp_kind == "relu" else F.gelu
        return F.linear(act(F.linear(h, w["w1"])), w["w2"])


def _rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), weight, RMS_EPS)


def _rms_norm_unfused(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + RMS_EPS)
    return weight * xf.to(x.dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Neox-style rotary embedding (Llama/Qwen): rotate the two halves of each head."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def _swiglu(h: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    gate, up = F.linear(h, w13).chunk(2, dim=-1)
    return F.linear(F.silu(gate) * up, w2)


def _moe(h: torch.Tensor, w: dict[str, torch.Tensor], top_k: int) -> torch.Tensor:
    """Router + top-k experts, tokens grouped per expert. Reads the per-expert counts on the host,
    so MoE steps run eager only (no CUDA graph)."""
    probs = torch.softmax(F.linear(h, w["router"]).float(), dim=-1)
    weights, experts = torch.topk(probs, top_k, dim=-1)
    weights = (weights / weights.sum(dim=-1, keepdim=True)).to(h.dtype).flatten()
    order = torch.argsort(experts.flatten())
    counts = torch.bincount(experts.flatten(), minlength=w["router"].shape[0]).tolist()
    out, start = torch.zeros_like(h), 0
    for expert, count in enumerate(counts):
        if count:
            picks = order[start:start + count]
            rows = picks // top_k
            y = _swiglu(h[rows], w["w13"][expert], w["w2"][expert]) * weights[picks].unsqueeze(-1)
            out.index_add_(0, rows, y)
            start += count
    return out
