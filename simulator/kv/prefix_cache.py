"""vLLM V1 automatic prefix caching over the paged KV cache (semantics §2.1, §2.2, §2.4).

Blocks have identities here: a free queue in LRU order (allocation pops the head; a request frees
its blocks tail first, full blocks to the queue's tail and blocks without a hash to its head, so
they are reused first and cached blocks evicted last), a reference count per block and the hash
of every full block. A full block's hash chains its parent's hash with its tokens, so a hit means
the whole prefix up to that block is identical. Every copy of a hash is kept (vLLM does not
deduplicate), and a lookup takes the first. Generated tokens are hashed too, from deterministic
answer ids (simulator/kv/block_hashes.py). A request without prompt token ids is unlike any
other: its full blocks get keys of its own, so only it (after a preemption) can hit them.

Until some block is about to carry a hash or such a key, every block is like every other: which
one a request takes evicts nothing and decides nothing later. So the cache starts by counting
blocks as the plain KVCache does (and how many of each request's blocks are full), and gives
blocks identities only when the first request with prompt token ids is allocated or the first
request with full blocks is preempted: any assignment is then as good as the one the LRU queue
would have made (tests/test_prefix_cache.py runs scenarios both ways). Synthetic prompts without
token ids never pay for identities.
"""
from __future__ import annotations

from collections import OrderedDict

from simulator.core import rules
from simulator.core.request import Request, RequestStatus
from simulator.kv.block_hashes import BlockHashes
from simulator.kv.block_pool import KVCache


class PrefixCachingKVCache(KVCache):
    start_counting = True   # False: identities from the start (the tests' reference)
    # Per block, at least: three list slots (reference count, hash, owner tag), the block number
    # as an int object (28 bytes) and its free-queue entry (hash, key, value). A CPython lower
    # bound, so a pre-run memory check never refuses a pool that fits.
    TABLE_BYTES_PER_BLOCK = 3 * 8 + 28 + 3 * 8

    def __init__(self, num_gpu_blocks: int, block_size: int, *, reserve_null_block: bool = True):
        super().__init__(num_gpu_blocks, block_size, reserve_null_block=reserve_null_block)
        self._counting = self.start_counting   # no block can carry a hash or a key yet
        n = self.num_total_blocks
        self._ref = [0] * n
        self._block_hash: list[int | None] = [None] * n
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(n))
        self._by_hash: dict[int, dict[int, None]] = {}   # hash -> its blocks, first cached first
        self._blocks: dict[Request, list[int]] = {}
        self._hashes = BlockHashes(block_size)            # chain hashes of full blocks, lazily
        self._registered: dict[Request, int] = {}        # how many of its blocks are hashed
        self._hits: dict[Request, list[int]] = {}        # blocks found by the last lookup
        # Blocks only their own (preempted) request can hit: request -> {block index: block}.
        self._own: dict[Request, dict[int, int]] = {}
        self._own_tag: list[tuple | None] = [None] * n    # block -> (request, index) while cached

    @property
    def counts_only(self) -> bool:
        return self._counting

    # -- hashing ------------------------------------------------------------------------------
    def _num_shareable(self, request: Request) -> int:
        """Leading full blocks of known token ids: other requests can hit these."""
        return self._hashes.num_hashable(request)

    def _cached_block(self, block_hash: int) -> int | None:
        """The first cached copy of a hash (get_cached_block), or None."""
        copies = self._by_hash.get(block_hash)
        return next(iter(copies)) if copies else None

    # -- lookup at admission (rule 2.4) ---------------------------------------------------------
    def lookup_prefix(self, request: Request) -> int:
        """Tokens of the longest cached prefix; at least the last token is always recomputed."""
        if self._counting:
            if not self._num_shareable(request):
                return 0   # nothing is cached under a hash or a key yet
            self._assign_ids()
        hits = self._cached_prefix_blocks(request, self._hashes)
        self._hits[request] = hits
        return len(hits) * self.block_size

    def cached_prefix_tokens(self, request: Request, hashes: BlockHashes | None = None) -> int:
        """What lookup_prefix would answer now, changing nothing (a router asks every replica):
        ``hashes`` is a scratch BlockHashes of this block size, shared across the replicas asked
        so a request's chain is hashed once; by default a fresh one."""
        if self._counting:
            return 0   # no block carries a hash or a key yet: nothing can hit
        if hashes is None or hashes.block_size != self.block_size:
            hashes = BlockHashes(self.block_size)
        return len(self._cached_prefix_blocks(request, hashes)) * self.block_size

    def _cached_prefix_blocks(self, request: Request, hashes: BlockHashes) -> list[int]:
        """The cached blocks of the request's longest cached prefix (rule 2.4), short of its last
        token: shared blocks by chain hash, then its own keyed blocks (after a preemption)."""
        hits = []
        shareable, own = self._num_shareable(request), self._own.get(request, {})
        for index in range((request.num_tokens - 1) // self.block_size):
            if index < shareable:
                block = self._cached_block(hashes.hash_of(request, index))
            else:
                block = own.get(index)
            if block is None:
                break
            hits.append(block)
        return hits

    def blocks_to_admit(self, request: Request, total_tokens: int, num_hit_tokens: int) -> int:
        """Free blocks an admission uses: new blocks plus cached hits that sit in the free queue.
        A request that already holds blocks (P/D: its pulled prompt, rule D2) needs only more."""
        if not num_hit_tokens:
            return self.blocks_needed(request, total_tokens)
        hits = self._hits.get(request, [])
        idle_hits = sum(1 for b in hits if self._ref[b] == 0)
        return max(0, self.blocks_for(total_tokens) - len(hits)) + idle_hits

    # -- allocation ----------------------------------------------------------------------------
    def allocate(self, request: Request, num_new_tokens: int, max_model_len: int | None = None,
                 headroom_blocks: int = 0, num_hit_tokens: int = 0) -> bool:
        total = rules.kv_tokens_needed(request.num_computed_tokens, num_new_tokens, num_hit_tokens,
                                       max_model_len)
        if self._counting and request.prompt_token_ids is None:
            return self._grow_counted(request, total, headroom_blocks)   # _grow's synthetic case
        return self._grow(request, total, headroom_blocks, num_hit_tokens)

    def allocate_up_to(self, request: Request, total_tokens: int, headroom_blocks: int = 0) -> bool:
        return self._grow(request, total_tokens, headroom_blocks, 0)

    def _grow(self, request: Request, total: int, headroom: int, num_hit_tokens: int) -> bool:
        if self._counting:
            if not self._hashes.knows_tokens(request):
                return self._grow_counted(request, total, headroom)
            self._assign_ids()   # its full blocks get hashes: identities matter from now
        held = self._blocks.get(request)
        if held and not num_hit_tokens:
            return self._grow_held(request, held, total, headroom)
        hits = self._hits.pop(request, []) if num_hit_tokens and not held else []
        num_have = (len(held) if held else 0) + len(hits)
        num_new = self.blocks_for(total) - num_have
        idle_hits = [b for b in hits if self._ref[b] == 0]
        if max(num_new, 0) + len(idle_hits) + headroom > self.num_free_blocks:
            if hits:
                self._hits[request] = hits   # still valid for a retry in this step
            return False
        blocks = self._blocks.setdefault(request, [])
        self._own.pop(request, None)   # resumed: its own cached blocks are hits or lost
        for b in hits:                       # touch: a free cached block leaves the free queue
            if self._ref[b] == 0:
                del self._free[b]
            self._ref[b] += 1
            self._own_tag[b] = None
            blocks.append(b)
        self._take_free(blocks, max(num_new, 0))
        if hits:
            self._registered[request] = len(hits)
        self._register_full_blocks(request, min(total, request.num_tokens))
        self.num_free_blocks = len(self._free)
        self._num_blocks[request] = len(blocks)
        return True

    def _grow_held(self, request: Request, blocks: list[int], total: int, headroom: int) -> bool:
        """The common case (a running request's next chunk or decode): new blocks only."""
        num_new = -(-total // self.block_size) - len(blocks)
        if num_new > 0:
            if num_new + headroom > self.num_free_blocks:
                return False
            self._take_free(blocks, num_new)
            self.num_free_blocks = len(self._free)
            self._num_blocks[request] = len(blocks)
        self._register_full_blocks(request, min(total, request.num_tokens))
        return True

    def _take_free(self, blocks: list[int], num_new: int) -> None:
        """Append ``num_new`` blocks from the free queue's head (LRU): evicting what they cached."""
        free, block_hash, by_hash, own_tag, ref = (
            self._free, self._block_hash, self._by_hash, self._own_tag, self._ref)
        for _ in range(num_new):
            block, _ = free.popitem(last=False)
            old = block_hash[block]
            if old is not None:                  # eviction: this copy's content is overwritten
                copies = by_hash[old]
                del copies[block]
                if not copies:
                    del by_hash[old]
                block_hash[block] = None
            tag = own_tag[block]
            if tag is not None:
                self._own.get(tag[0], {}).pop(tag[1], None)
                own_tag[block] = None
            ref[block] = 1
            blocks.append(block)

    def _register_full_blocks(self, request: Request, num_tokens: int) -> None:
        """Hash blocks that are full once this step's tokens are computed (rule 2.2 step 5): at
        schedule time, so a later request in the same step can hit them."""
        blocks = self._blocks[request]
        done = self._registered.get(request, 0)
        full = min(num_tokens // self.block_size, len(blocks))
        for index in range(done, min(full, self._num_shareable(request))):
            h = self._hashes.hash_of(request, index)
            self._by_hash.setdefault(h, {})[blocks[index]] = None   # duplicates kept, in order
            self._block_hash[blocks[index]] = h
        self._registered[request] = max(done, full)

    def free(self, request: Request) -> None:
        """Blocks are freed tail first: full ones to the free queue's tail (the prefix is evicted
        last), keeping their hashes so a quick resume or a sibling request can still hit them;
        those without a hash to its head, reused first (free_blocks)."""
        if self._counting:
            keeps_keys = (request.status is not RequestStatus.FINISHED
                          and self._registered.get(request, 0) > self._num_shareable(request))
            if not keeps_keys:
                KVCache.free(self, request)
                self._registered.pop(request, None)
                return
            self._assign_ids()   # a preempted request keeps keyed blocks it may hit on resume
        blocks = self._blocks.pop(request, [])
        if request.status is not RequestStatus.FINISHED:   # preempted: it may come back
            own = self._own.setdefault(request, {})
            for index in range(self._num_shareable(request), self._registered.get(request, 0)):
                own[index] = blocks[index]
                self._own_tag[blocks[index]] = (request, index)
        else:
            self._own.pop(request, None)
        self._release(blocks, self._registered.get(request, 0))
        self._num_blocks.pop(request, None)
        self._registered.pop(request, None)
        self._hits.pop(request, None)
        if request.status is RequestStatus.FINISHED:
            self._hashes.forget(request)
        self.num_free_blocks = len(self._free)

    def _release(self, blocks: list[int], num_full: int) -> None:
        """Its first ``num_full`` blocks were full (vLLM hashed them); the rest had no hash."""
        free, ref, unhashed = self._free, self._ref, []
        for index in range(len(blocks) - 1, -1, -1):
            b = blocks[index]
            ref[b] -= 1
            if ref[b] == 0:
                if index < num_full:
                    free[b] = None
                else:
                    unhashed.append(b)
        for b in reversed(unhashed):   # prepend_n: the first freed ends at the head
            free[b] = None
            free.move_to_end(b, last=False)

    def record_admission(self, request: Request, num_hit_tokens: int) -> None:
        """vLLM counts a lookup once, at first admission: a resumed request's lookup goes to its
        preempted-request statistics, not to prefix_cache_queries/hits."""
        if request.num_preemptions == 0:
            self.num_queries_tokens += request.num_tokens
            self.num_hit_tokens += num_hit_tokens

    # -- counting until identities matter ---------------------------------------------------------
    def _grow_counted(self, request: Request, total: int, headroom: int) -> bool:
        """_grow while blocks are counted: KVCache's allocation, and the count of full blocks
        _register_full_blocks would keep (no hashes: the request has no shareable block)."""
        if not KVCache.allocate_up_to(self, request, total, headroom):
            return False
        full = min(min(total, request.num_tokens) // self.block_size, self._num_blocks.get(request, 0))
        if full > self._registered.get(request, 0):
            self._registered[request] = full
        return True

    def _assign_ids(self) -> None:
        """Give counted blocks identities: each request's held blocks, then the free queue."""
        if self.counted_holder is not None:
            self.counted_holder.credit_counted_blocks()   # every holder's count, before ids are handed out
        n, next_id = self.num_total_blocks, 0
        self._blocks = {}
        for request, count in self._num_blocks.items():
            self._blocks[request] = list(range(next_id, next_id + count))
            next_id += count
        self._ref = [1] * next_id + [0] * (n - next_id)
        self._free = OrderedDict.fromkeys(range(next_id, n))
        assert len(self._free) == self.num_free_blocks, "counted blocks do not add up"
        self._counting = False

    def check_invariants(self) -> None:
        if self._counting:
            return KVCache.check_invariants(self)
        held = {b for blocks in self._blocks.values() for b in blocks}
        assert len(self._free) == self.num_free_blocks
        assert held.isdisjoint(self._free), "a held block is in the free queue"
        assert len(held) + len(self._free) == self.num_total_blocks
        for b in range(self.num_total_blocks):
            refs = sum(blocks.count(b) for blocks in self._blocks.values())
            assert refs == self._ref[b], (b, refs, self._ref[b])
