"""A preallocated KV pool, sized to the grid's largest shape and a memory budget.

Values never matter for timing with random weights, only where the bytes are: a shape whose caches
fit gives every layer its own slice of the pool (as a real engine does), else layers share slices
round-robin (``layer % num_slices``), down to one cache shared by all layers. meta.json records the
layout of every shape.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from calibration.grid import StepShape


@dataclass(frozen=True)
class KvPoolPlan:
    pool_tokens: int              # KV slots in the pool (each slot: K and V of one token, one layer)
    bytes_per_slot: int
    budget_bytes: int
    num_layers: int

    @property
    def pool_bytes(self) -> int:
        return self.pool_tokens * self.bytes_per_slot

    def num_slices(self, shape: StepShape) -> int:
        """How many distinct per-layer caches this shape gets (num_layers = one per layer)."""
        return max(1, min(self.num_layers, self.pool_tokens // shape.kv_tokens))

    def layout(self, shapes: tuple[StepShape, ...]) -> str:
        slices = {self.num_slices(s) for s in shapes}
        if slices == {self.num_layers}:
            return "per_layer"
        if slices == {1}:
            return "shared"
        return "per_layer_when_fits"


def plan_pool(shapes: tuple[StepShape, ...], num_layers: int, bytes_per_slot: int,
              budget_bytes: int) -> KvPoolPlan:
    need = max(s.kv_tokens for s in shapes)
    pool_tokens = min(num_layers * need, budget_bytes // bytes_per_slot)
    if pool_tokens < need:
        raise ValueError(f"kv_budget_bytes: {budget_bytes} holds {pool_tokens} KV slots but the "
                         f"largest shape needs {need} ({need * bytes_per_slot} bytes)")
    return KvPoolPlan(pool_tokens, bytes_per_slot, budget_bytes, num_layers)


class KvPool:
    """K and V slots for every layer: ``[2, pool_tokens, kv_heads, head_dim]``."""

    def __init__(self, plan: KvPoolPlan, kv_heads: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device):
        self.plan = plan
        # Zeros, not empty: stale memory may hold NaN/inf, which would reach softmax and make the
        # multinomial sampler raise a device-side assert.
        self.kv = torch.zeros(2, plan.pool_tokens, kv_heads, head_dim, dtype=dtype, device=device)

    def layer_caches(self, shape: StepShape) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(k_cache, v_cache) per layer, each ``[shape.kv_tokens, kv_heads, head_dim]``."""
        size, n = shape.kv_tokens, self.plan.num_slices(shape)
        slices = [(self.kv[0, i * size:(i + 1) * size], self.kv[1, i * size:(i + 1) * size])
                  for i in range(n)]
        return [slices[layer % n] for layer in range(self.plan.num_layers)]
