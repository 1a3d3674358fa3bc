"""Paged KV cache: block accounting per semantics §2 (vLLM V1 block pool).

Blocks are counted, not materialised: a request holds ``ceil(tokens / block_size)`` blocks and the
pool tracks how many are free. Prefix caching needs block identities and hashes; it plugs in by
overriding ``lookup_prefix`` (admission-time hits), ``allocate`` and ``free``
(simulator/kv/prefix_cache.py).
"""
from __future__ import annotations

from simulator.core import rules
from simulator.core.request import Request


class KVCache:
    TABLE_BYTES_PER_BLOCK = 0   # counted blocks: no table per block (see PrefixCachingKVCache)
    # Blocks a request takes per block_size more tokens (a hybrid pool: one per attention group).
    blocks_per_token_block = 1

    def __init__(self, num_gpu_blocks: int, block_size: int, *, reserve_null_block: bool = True):
        if block_size <= 0:
            raise ValueError(f"engine.block_size: {block_size} must be a positive integer")
        # vLLM V1 keeps block 0 as a null block (rule 2.1): the pool is num_gpu_blocks - 1.
        self.num_gpu_blocks = num_gpu_blocks
        self.num_total_blocks = num_gpu_blocks - 1 if reserve_null_block else num_gpu_blocks
        if self.num_total_blocks <= 0:
            raise ValueError(f"engine.num_gpu_blocks: {num_gpu_blocks} leaves no usable KV block")
        self.block_size = block_size
        self.num_free_blocks = self.num_total_blocks
        self._num_blocks: dict[Request, int] = {}
        self.num_queries_tokens = 0   # vllm:prefix_cache_queries (tokens)
        self.num_hit_tokens = 0       # vllm:prefix_cache_hits (tokens)
        # Who took blocks as counts not yet credited to their requests (take_counted): a decode
        # cohort. It is asked to credit them (credit_counted_blocks) before blocks get identities.
        self.counted_holder = None

    @property
    def counts_only(self) -> bool:
        """True while blocks are interchangeable: only how many each request holds matters."""
        return True

    # -- queries -------------------------------------------------------------------------------
    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def tokens_in(self, num_blocks: int) -> int:
        """The most tokens one request can hold in ``num_blocks`` blocks (blocks_for's inverse)."""
        return num_blocks * self.block_size

    def num_blocks_of(self, request: Request) -> int:
        return self._num_blocks.get(request, 0)

    def token_slots_of(self, request: Request) -> int:
        """Token slots the request's blocks hold."""
        return self._num_blocks.get(request, 0) * self.block_size

    def blocks_needed(self, request: Request, total_tokens: int) -> int:
        """Extra blocks the request needs to hold ``total_tokens`` tokens of KV."""
        return max(0, self.blocks_for(total_tokens) - self._num_blocks.get(request, 0))

    def blocks_for_step(self, request: Request, num_new_tokens: int,
                        max_model_len: int | None = None) -> int:
        """Extra blocks the request needs to compute ``num_new_tokens`` more (rule 2.2)."""
        return self.blocks_needed(request, rules.kv_tokens_needed(
            request.num_computed_tokens, num_new_tokens, 0, max_model_len))

    def can_fit(self, request: Request, total_tokens: int, headroom_blocks: int = 0) -> bool:
        return self.blocks_needed(request, total_tokens) + headroom_blocks <= self.num_free_blocks

    @property
    def num_state_slots_used(self) -> int:
        """Requests holding a fixed state (a hybrid model's pool: simulator/kv/hybrid_pool.py)."""
        return 0

    @property
    def num_used_blocks(self) -> int:
        return self.num_total_blocks - self.num_free_blocks

    @property
    def usage(self) -> float:
        """Like ``vllm:kv_cache_usage_perc``: a 0..1 fraction of the usable pool (rule 2.1, trap 8)."""
        return 1.0 - self.num_free_blocks / self.num_total_blocks

    # -- changes -------------------------------------------------------------------------------
    def allocate_up_to(self, request: Request, total_tokens: int, headroom_blocks: int = 0) -> bool:
        """All-or-nothing: make the request hold enough blocks for ``total_tokens`` tokens."""
        need = self.blocks_needed(request, total_tokens)
        if need == 0:
            return True
        if need + headroom_blocks > self.num_free_blocks:
            return False
        self.num_free_blocks -= need
        self._num_blocks[request] = self._num_blocks.get(request, 0) + need
        return True

    def allocate(self, request: Request, num_new_tokens: int, max_model_len: int | None = None,
                 headroom_blocks: int = 0, num_hit_tokens: int = 0) -> bool:
        """allocate_slots: blocks for the tokens rules.kv_tokens_needed names (rule 2.2)."""
        return self.allocate_up_to(request, rules.kv_tokens_needed(
            request.num_computed_tokens, num_new_tokens, num_hit_tokens, max_model_len),
            headroom_blocks)

    def take_counted(self, num_blocks: int) -> None:
        """Blocks taken for requests whose held counts are credited later (credit_counted)."""
        self.num_free_blocks -= num_blocks

    def credit_counted(self, request: Request, num_blocks: int) -> None:
        """A request's share of blocks taken earlier by take_counted."""
        self._num_blocks[request] = self._num_blocks.get(request, 0) + num_blocks

    def free(self, request: Request) -> None:
        self.num_free_blocks += self._num_blocks.pop(request, 0)

    def cache_unfinished(self, request: Request) -> None:
        """A running request's computed pages offered to the prefix cache now (SGLang's
        cache_unfinished_req): a pool without a radix tree keeps nothing."""

    def lookup_prefix(self, request: Request) -> int:
        """Tokens of the request's prompt already cached (0: see PrefixCachingKVCache)."""
        return 0

    def cached_prefix_tokens(self, request: Request, hashes=None) -> int:
        """What lookup_prefix would answer, changing nothing (0: see PrefixCachingKVCache)."""
        return 0

    def blocks_to_admit(self, request: Request, total_tokens: int, num_hit_tokens: int) -> int:
        """Free blocks that admitting the request with ``total_tokens`` would use."""
        return self.blocks_needed(request, total_tokens)

    def record_admission(self, request: Request, num_hit_tokens: int) -> None:
        """Prefix-cache metrics (queries = num_tokens, hits) as vLLM counts them at admission:
        not at all without prefix caching (PrefixCachingKVCache counts)."""

    def check_invariants(self) -> None:
        held = sum(self._num_blocks.values())
        assert 0 <= self.num_free_blocks <= self.num_total_blocks, self.num_free_blocks
        assert held + self.num_free_blocks == self.num_total_blocks, (held, self.num_free_blocks)
