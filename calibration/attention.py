"""Attention per request over its own context, the way a serving engine batches it.

Sequences of one step that share (new tokens, context) form a group and get one
``scaled_dot_product_attention`` call. Each group owns a contiguous run of KV slots: sequence ``i``
of the group holds ``context + new`` slots, the context first, then the keys/values written by this
step. The prefill chunk attends causally over its cached context plus itself (lower-right causal
mask); each decode attends over its context plus its own new token.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from calibration.grid import SeqGroup


@dataclass(frozen=True)
class GroupPlan:
    """Where one group's tokens sit in the step and its KV slots sit in a layer's cache."""
    group: SeqGroup
    token_start: int
    kv_start: int
    # Only one of these is set for a chunk: ``is_causal`` when it has no cached context (upper-left
    # and lower-right coincide), ``mask`` (a lower-right causal mask) when it does. Decodes need none.
    is_causal: bool = False
    mask: torch.Tensor | None = None

    @property
    def num_tokens(self) -> int:
        return self.group.num_seqs * self.group.new_tokens


def lower_right_mask(new_tokens: int, kv_tokens: int, device: torch.device) -> torch.Tensor:
    """Query row r sees key j when j <= (kv_tokens - new_tokens) + r."""
    if device.type == "cuda":
        # torch dispatches this bias to the flash/efficient kernels' bottom-right causal mode
        # without building a (new x kv) matrix.
        from torch.nn.attention.bias import causal_lower_right
        return causal_lower_right(new_tokens, kv_tokens)
    ones = torch.ones(new_tokens, kv_tokens, dtype=torch.bool, device=device)
    return torch.tril(ones, diagonal=kv_tokens - new_tokens)


def plan_groups(groups: tuple[SeqGroup, ...], device: torch.device) -> tuple[GroupPlan, ...]:
    plans, token_start, kv_start = [], 0, 0
    for g in groups:
        kv_len = g.context_tokens + g.new_tokens
        is_causal = g.new_tokens > 1 and g.context_tokens == 0
        mask = None
        if g.new_tokens > 1 and g.context_tokens > 0:
            mask = lower_right_mask(g.new_tokens, kv_len, device)
        plans.append(GroupPlan(g, token_start, kv_start, is_causal, mask))
        token_start += g.num_seqs * g.new_tokens
        kv_start += g.kv_tokens
    return tuple(plans)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plans: tuple[GroupPlan, ...],
           k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
    """q: [T, H, D]; k, v: [T, Hkv, D] (this step's tokens); caches: [slots, Hkv, D].

    Writes the new keys/values into the cache, then attends group by group. Returns [T, H * D].
    """
    num_heads, head_dim = q.shape[1], q.shape[2]
    gqa = num_heads != k.shape[1]
    outs = [_attend_group(q, k, v, p, k_cache, v_cache, gqa) for p in plans]
    out = outs[0] if len(outs) == 1 else torch.cat(outs)
    return out.reshape(q.shape[0], num_heads * head_dim)


def _attend_group(q, k, v, p: GroupPlan, k_cache, v_cache, gqa: bool) -> torch.Tensor:
    n, new, ctx = p.group.num_seqs, p.group.new_tokens, p.group.context_tokens
    tokens = slice(p.token_start, p.token_start + p.num_tokens)
    slots = slice(p.kv_start, p.kv_start + p.group.kv_tokens)
    kv_heads, head_dim = k.shape[1], k.shape[2]
    kc = k_cache[slots].view(n, ctx + new, kv_heads, head_dim)
    vc = v_cache[slots].view(n, ctx + new, kv_heads, head_dim)
    kc[:, ctx:] = k[tokens].view(n, new, kv_heads, head_dim)
    vc[:, ctx:] = v[tokens].view(n, new, kv_heads, head_dim)
    qg = q[tokens].view(n, new, q.shape[1], head_dim).transpose(1, 2)
    extra = {"enable_gqa": True} if gqa else {}
    out = F.scaled_dot_product_attention(qg, kc.transpose(1, 2), vc.transpose(1, 2),
                                         attn_mask=p.mask, is_causal=p.is_causal, **extra)
    return out.transpose(1, 2).reshape(p.num_tokens, q.shape[1], head_dim)
