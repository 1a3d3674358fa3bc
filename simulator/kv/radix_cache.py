"""SGLang's radix prefix cache at page granularity (docs/sglang-semantics.md, rules R1-R5).

SGLang keys its radix tree by token ids and, with page_size > 1, splits and matches only at page
boundaries, so every tree edge is a whole number of pages. A path of pages from the root is then
named exactly by the chain hash of its last page (simulator/kv/block_hashes.py: hash(parent, the
page's token ids)), and the tree is a dict from chain hash to node: one node per page, a parent
link, a child count, a lock count and a last-access tick. Unlike vLLM's block pool, a prefix is
stored once (a duplicate page is freed at insertion, R3), cached pages live in the tree rather than
in a free queue, and eviction takes unlocked leaves in LRU order (R5), so a prefix is never evicted
before the pages that extend it.

A running request's prompt joins the tree after each of its prefill steps (cache_unfinished, R3),
so a prompt is matched while it still decodes, as in SGLang.

Pages are counted, not numbered: a request holds its locked matched path (tree nodes) plus
``num_blocks_of`` private pages that are not in the tree; the free pool is what neither holds.
"""
from __future__ import annotations

import heapq
import itertools

from simulator.core import rules
from simulator.core.request import Request, RequestStatus
from simulator.kv.block_hashes import BlockHashes
from simulator.kv.block_pool import KVCache


class _Node:
    __slots__ = ("parent", "num_children", "lock_ref", "last_access")

    def __init__(self, parent: int | None, last_access: int):
        self.parent, self.num_children, self.lock_ref, self.last_access = parent, 0, 0, last_access


class RadixKVCache(KVCache):
    """The token pool plus the radix tree; ``page_size`` is the engine's ``block_size``."""

    def __init__(self, num_gpu_blocks: int, block_size: int, *, reserve_null_block: bool = True):
        super().__init__(num_gpu_blocks, block_size, reserve_null_block=reserve_null_block)
        self._nodes: dict[int, _Node] = {}
        self._hashes = BlockHashes(block_size)
        self._paths: dict[Request, list[int]] = {}   # a running request's locked matched pages
        self._hits: dict[Request, list[int]] = {}    # the last lookup's match, until admission
        self._clock = itertools.count(1)             # logical time: LRU ties stay deterministic
        self.num_evictable_blocks = 0                # tree pages with lock_ref 0 (R4)

    @property
    def counts_only(self) -> bool:
        return not self._nodes and not self._paths

    @property
    def num_tree_blocks(self) -> int:
        return len(self._nodes)

    @property
    def num_available_blocks(self) -> int:
        """Free pages plus evictable tree pages: what SGLang's admission and decode checks count
        (available_size() + evictable_size(), R4)."""
        return self.num_free_blocks + self.num_evictable_blocks

    @property
    def usage(self) -> float:
        """SGLang's token usage: pages neither free nor evictable, over the pool."""
        return 1.0 - self.num_available_blocks / self.num_total_blocks

    # -- match (R2) -------------------------------------------------------------------------
    def lookup_prefix(self, request: Request) -> int:
        """match_prefix: the longest cached run of whole pages, at most num_tokens - 1 tokens
        (one token is always computed to get logits); matched nodes are touched (LRU)."""
        if not self._hashes.knows_tokens(request):
            return 0
        hits = self._match(request, self._hashes)
        tick = next(self._clock)
        for h in hits:
            self._nodes[h].last_access = tick
        self._hits[request] = hits
        return len(hits) * self.block_size

    def cached_prefix_tokens(self, request: Request, hashes: BlockHashes | None = None) -> int:
        """What lookup_prefix would answer now, changing nothing (a router asks every replica):
        ``hashes`` is a scratch BlockHashes of this page size."""
        if not BlockHashes.knows_tokens(request):
            return 0
        return len(self._match(request, hashes or BlockHashes(self.block_size))) * self.block_size

    def _match(self, request: Request, hashes: BlockHashes) -> list[int]:
        """The chain hashes of the longest cached run of whole pages, capped (R2)."""
        limit = min(hashes.num_hashable(request), (request.num_tokens - 1) // self.block_size)
        hits = []
        for index in range(limit):
            h = hashes.hash_of(request, index)
            if h not in self._nodes:
                break
            hits.append(h)
        return hits

    def lock(self, request: Request, num_hit_tokens: int) -> None:
        """inc_lock_ref on the matched path: its pages can no longer be evicted (R4)."""
        path = self._hits.pop(request, [])[:num_hit_tokens // self.block_size]
        for h in path:
            self._lock_node(h)
        self._paths[request] = path

    def _lock_node(self, h: int) -> None:
        node = self._nodes[h]
        if node.lock_ref == 0:
            self.num_evictable_blocks -= 1
        node.lock_ref += 1

    def _unlock(self, path: list[int]) -> None:
        for h in path:
            node = self._nodes[h]
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self.num_evictable_blocks += 1

    # -- allocation -------------------------------------------------------------------------
    def blocks_needed(self, request: Request, total_tokens: int) -> int:
        held = len(self._paths.get(request, ())) + self._num_blocks.get(request, 0)
        return max(0, self.blocks_for(total_tokens) - held)

    def allocate(self, request: Request, num_new_tokens: int, max_model_len: int | None = None,
                 headroom_blocks: int = 0, num_hit_tokens: int = 0) -> bool:
        """Pages for the tokens rules.kv_tokens_needed names; the first call of an admission
        locks the matched path (``num_hit_tokens``). Evicts LRU leaves when the free pool is
        short (R5); all-or-nothing, so a refused request locks and takes nothing."""
        locked_now = request not in self._paths
        if locked_now:
            self.lock(request, num_hit_tokens)
        total = rules.kv_tokens_needed(request.num_computed_tokens, num_new_tokens,
                                       num_hit_tokens, max_model_len)
        if self.allocate_up_to(request, total, headroom_blocks):
            return True
        if locked_now:
            self._unlock(self._paths.pop(request))
        return False

    def allocate_up_to(self, request: Request, total_tokens: int, headroom_blocks: int = 0) -> bool:
        need = self.blocks_needed(request, total_tokens)
        if need == 0:
            return True
        if need + headroom_blocks > self.num_available_blocks:
            return False
        self.evict(need + headroom_blocks - self.num_free_blocks)
        self.num_free_blocks -= need
        self._num_blocks[request] = self._num_blocks.get(request, 0) + need
        if request not in self._paths:
            self._paths[request] = []
        return True

    def evict(self, num_blocks: int) -> int:
        """Evict unlocked leaves, least recently used first, until ``num_blocks`` pages are
        freed; a parent left childless joins the candidates (R5). Returns the pages freed."""
        if num_blocks <= 0:
            return 0
        heap = [(n.last_access, h) for h, n in self._nodes.items()
                if n.num_children == 0 and n.lock_ref == 0]
        heapq.heapify(heap)
        freed = 0
        while heap and freed < num_blocks:
            _, h = heapq.heappop(heap)
            node = self._nodes.pop(h)
            self.num_evictable_blocks -= 1
            self.num_free_blocks += 1
            freed += 1
            parent = self._nodes.get(node.parent) if node.parent is not None else None
            if parent is not None:
                parent.num_children -= 1
                if parent.num_children == 0 and parent.lock_ref == 0:
                    heapq.heappush(heap, (parent.last_access, node.parent))
        return freed

    # -- release (R3) -----------------------------------------------------------------------
    def free(self, request: Request) -> None:
        """A finished request's full pages go into the tree (cache_finished_req: duplicates
        freed, new pages kept); a retracted one keeps nothing new. Then its path is unlocked."""
        path = self._paths.pop(request, [])
        self._hits.pop(request, None)
        private = self._num_blocks.pop(request, 0)
        if request.status is RequestStatus.FINISHED and self._hashes.knows_tokens(request):
            private -= self._insert(request, len(path), private)
        self._unlock(path)
        self.num_free_blocks += private
        self._hashes.forget(request)

    def _insert(self, request: Request, start: int, private: int) -> int:
        """Insert pages ``start``.. of the request's computed KV; returns the pages the tree took."""
        full = min(request.num_computed_tokens // self.block_size, start + private)
        tick, taken, parent = next(self._clock), 0, None
        for index in range(full):   # from the root: the matched path is touched too
            h = self._hashes.hash_of(request, index)
            taken += self._node_for(h, parent, tick)
            parent = h
        return taken

    def cache_unfinished(self, request: Request) -> None:
        """cache_unfinished_req (R3): after a prefill step, a running request's full computed
        pages go into the tree, locked by it as its path grows; its copy of a page the tree
        already had is freed (it reads the tree's)."""
        path = self._paths.get(request)
        if path is None or not self._hashes.knows_tokens(request):
            return
        private = self._num_blocks.get(request, 0)
        start = len(path)
        full = min(request.num_computed_tokens // self.block_size, start + private)
        if full <= start:
            return
        tick, parent = next(self._clock), None
        for index in range(full):   # from the root, as _insert
            h = self._hashes.hash_of(request, index)
            made = self._node_for(h, parent, tick)
            if index >= start:
                if not made:
                    self.num_free_blocks += 1   # a duplicate: the request's own page is freed
                self._lock_node(h)
                path.append(h)
                private -= 1
            parent = h
        self._num_blocks[request] = private

    def _node_for(self, h: int, parent: int | None, tick: int) -> bool:
        """Touch the tree's page ``h``, made (unlocked, under ``parent``) if absent; True if made."""
        node = self._nodes.get(h)
        made = node is None
        if made:
            node = self._nodes[h] = _Node(parent, tick)
            if parent is not None:
                self._nodes[parent].num_children += 1
            self.num_evictable_blocks += 1
        node.last_access = tick
        return made

    def dfs_weight_order(self, requests: list[Request]) -> list[int]:
        """SGLang's dfs-weight order (S9): each request sits at its last matched page (after
        lookup_prefix); a node weighs the requests in its subtree; a depth-first walk visits
        heavier children first (ties: older nodes) and lists a node's requests after its
        children's. Returns indices into ``requests``. Iterative: paths can be deep."""
        last = [(self._hits.get(r) or [None])[-1] for r in requests]
        weight: dict[int | None, int] = {}
        for node in last:
            while True:
                weight[node] = weight.get(node, 0) + 1
                if node is None:
                    break
                node = self._nodes[node].parent
        rank = {h: i for i, h in enumerate(self._nodes)}
        children: dict[int | None, list[int]] = {}
        for h in sorted((h for h in weight if h is not None), key=lambda h: (-weight[h], rank[h])):
            children.setdefault(self._nodes[h].parent, []).append(h)
        at: dict[int | None, list[int]] = {}
        for index, node in enumerate(last):
            at.setdefault(node, []).append(index)
        order, stack = [], [(None, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                order.extend(at.get(node, ()))
                continue
            stack.append((node, True))
            stack.extend((child, False) for child in reversed(children.get(node, ())))
        return order

    def record_admission(self, request: Request, num_hit_tokens: int) -> None:
        """Hit metrics count first admissions only: SGLang logs a retracted request's
        re-prefill apart (its reprocessed_log_* counters)."""
        if request.num_preemptions == 0:
            self.num_queries_tokens += request.num_tokens
            self.num_hit_tokens += num_hit_tokens

    def check_invariants(self) -> None:
        private = sum(self._num_blocks.values())
        assert private + len(self._nodes) + self.num_free_blocks == self.num_total_blocks
        assert 0 <= self.num_free_blocks <= self.num_total_blocks, self.num_free_blocks
        unlocked = sum(1 for n in self._nodes.values() if n.lock_ref == 0)
        assert unlocked == self.num_evictable_blocks, (unlocked, self.num_evictable_blocks)
