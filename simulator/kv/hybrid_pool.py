"""A hybrid model's block pool: attention blocks and state blocks from one pool (vLLM V1).

vLLM's HybridKVCacheCoordinator gives a request blocks from one BlockPool in every KV cache
group: ceil(tokens / block_size) in each attention group and, in each state (Mamba, linear
attention) group, one block that holds the request's fixed state whatever its length
(docs/hybrid-state-semantics.md, rules H3-H5). So ``blocks_for`` is the rule every admission
gate, allocation, preemption and the decode cohort already count by; a request holds its state
slot exactly while it holds blocks, and gives it back with them (``free``: finish or preemption).
"""
from __future__ import annotations

from simulator.core.request import Request
from simulator.kv.block_pool import KVCache


class HybridKVCache(KVCache):
    def __init__(self, num_gpu_blocks: int, block_size: int, *, num_attention_groups: int = 1,
                 num_state_groups: int = 1, reserve_null_block: bool = True):
        super().__init__(num_gpu_blocks, block_size, reserve_null_block=reserve_null_block)
        if num_attention_groups < 1 or num_state_groups < 1:
            raise ValueError(f"model: a hybrid pool needs attention and state groups, not "
                             f"{num_attention_groups} and {num_state_groups}")
        self.num_attention_groups = num_attention_groups
        self.num_state_groups = num_state_groups
        self.blocks_per_token_block = num_attention_groups   # one per attention group

    @classmethod
    def of_layout(cls, num_gpu_blocks: int, block_size: int, layout) -> "HybridKVCache":
        """The pool of a cost_models.hybrid_layout.HybridLayout (its groups; rule H3)."""
        return cls(num_gpu_blocks, block_size, num_attention_groups=layout.num_attention_groups,
                   num_state_groups=layout.num_state_groups)

    @property
    def state_blocks_per_request(self) -> int:
        """Blocks a running request's state takes: one in each state group (rule H4)."""
        return self.num_state_groups

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks for ``num_tokens`` of KV: every attention group's, plus the state's (rule H5)."""
        if num_tokens <= 0:
            return 0
        return self.num_attention_groups * -(-num_tokens // self.block_size) + self.num_state_groups

    def tokens_in(self, num_blocks: int) -> int:
        """The most tokens one request can hold in ``num_blocks`` blocks, its state's taken out."""
        return max(0, num_blocks - self.num_state_groups) // self.num_attention_groups * self.block_size

    def token_slots_of(self, request: Request) -> int:
        """Token slots the request's attention blocks hold (its state blocks hold none)."""
        held = self._num_blocks.get(request, 0)
        if not held:
            return 0
        return (held - self.num_state_groups) // self.num_attention_groups * self.block_size

    @property
    def num_state_slots_used(self) -> int:
        """Requests holding a state: those holding blocks (rule H4)."""
        return len(self._num_blocks)

    @property
    def num_state_slots(self) -> int:
        """The most requests whose states the pool could hold, with no attention blocks at all."""
        return self.num_total_blocks // self.num_state_groups

    def check_invariants(self) -> None:
        super().check_invariants()
        for request, held in self._num_blocks.items():
            assert held >= self.num_state_groups + self.num_attention_groups, (request, held)
            assert (held - self.num_state_groups) % self.num_attention_groups == 0, (request, held)
