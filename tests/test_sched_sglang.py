"""Hand-worked steps of the sglang preset; rule numbers are docs/sglang-semantics.md's (SGLang
v0.4.x scheduler, schedule_policy.py at 00550cd). Pages are 4 tokens; the pool is
(num_gpu_blocks - 1) pages (S1)."""
from __future__ import annotations

import pytest

from simulator.core.request import Request, RequestStatus
from simulator.kv.radix_cache import RadixKVCache
from simulator.policies.base import SchedulerError
from tests.sched_helpers import Driver, make_scheduler, req

# init 0.5, min 0.5 x 0.2 = 0.1, decay (0.5 - 0.1) / 4 = 0.1 per decode step (S6).
RATIO = dict(init_new_token_ratio=0.5, min_new_token_ratio_factor=0.2, new_token_ratio_decay_steps=4)


def test_admission_waits_for_the_decaying_estimate():
    """S5.1 with S6: B (12 + 12 outputs = 24 tokens) is refused while A's 19..16 remaining
    outputs x ratio leave less than 24 of the 40-token pool, and admitted once the ratio decays."""
    s = make_scheduler("sglang", num_gpu_blocks=11, chunked_prefill_size=-1, **RATIO)
    d = Driver(s)
    d.add(req(1, 8, 20), req(2, 12, 12))
    # Step 1: rem_total 40; A: 8 + 20 < 40, charged 8 + 20 -> 12; B: 24 >= 12 (NO_TOKEN).
    assert d.step() == {1: 8} and s.new_token_ratio == 0.5
    # Step 2: 32 free - 19 x 0.5 = 22.5 <= 24: a decode step, which decays the ratio.
    assert d.step() == {1: 1} and s.new_token_ratio == pytest.approx(0.4)
    # Step 3: 28 - 18 x 0.4 = 20.8; step 4: 28 - 17 x 0.3 = 22.9: still refused.
    assert d.step() == {1: 1} and s.new_token_ratio == pytest.approx(0.3)
    assert d.step() == {1: 1} and s.new_token_ratio == pytest.approx(0.2)
    # Step 5: 28 - 16 x 0.2 = 24.8 > 24: B is admitted, in a prefill-only step (S4).
    assert d.step() == {2: 12} and s.new_token_ratio == pytest.approx(0.2)
    assert d.step() == {1: 1, 2: 1} and s.new_token_ratio == pytest.approx(0.1)
    assert d.step() == {1: 1, 2: 1} and s.new_token_ratio == pytest.approx(0.1)   # the floor


def test_ratio_resets_to_init_when_the_engine_is_idle():
    """S6: an idle engine starts over at init_new_token_ratio."""
    s = make_scheduler("sglang", **RATIO)
    d = Driver(s)
    d.add(req(1, 4, 3))
    d.run()
    assert s.new_token_ratio == pytest.approx(0.3)   # two decode steps after the prefill
    d.add(req(2, 4, 3))
    assert d.step() == {2: 4} and s.new_token_ratio == 0.5


def test_retraction_takes_the_longest_prompt_among_the_fewest_outputs():
    """S7-S8 with ratio 0 (conservativeness 0): a 6-page pool, A (5 + 12) then B (3 + 12).
    At step 10 A's 13th token needs a page and none is free: A and B have 8 outputs each, so
    the longer prompt (A) is retracted; the ratio becomes min(1, (8 + 20) / 12) = 1."""
    s = make_scheduler("sglang", num_gpu_blocks=7, schedule_conservativeness=0.0)
    d = Driver(s)
    a, b = req(1, 5, 12), req(2, 3, 12)
    d.add(a)
    assert d.step() == {1: 5}
    d.add(b)
    assert d.step() == {2: 3}   # 20 free tokens > 3 + 12: a prefill-only step, A waits (S4)
    for _ in range(7):          # steps 3-9: both decode, the pool fills
        assert d.step() == {1: 1, 2: 1}
    assert s.kv.num_free_blocks == 0 and a.num_output_tokens == b.num_output_tokens == 8
    assert d.step() == {2: 1}   # step 10
    assert a.status is RequestStatus.PREEMPTED and s.num_preemptions == 1
    assert s.new_token_ratio == 1.0 and list(s.waiting) == [a]
    # Step 11: 12 free - 3 x 1.0 = 9 <= 13 + 4: A stays out until B finishes (step 13).
    assert [d.step() for _ in range(3)] == [{2: 1}] * 3 and b.is_finished
    assert d.step() == {1: 13} and s.new_token_ratio == 0.0   # re-prefill of prompt + outputs


def test_prompt_cut_to_whole_pages_leads_the_next_prefill():
    """S3, S5.3: a 10-token chunk budget cuts A's 14 tokens at 8 (whole pages); A's rest leads
    the next batch unrounded and is charged paged(6) = 8, so the 2 left cut B to no page: B
    waits a step, then has a prefill-only step of its own while A's decode waits (S4)."""
    s = make_scheduler("sglang", chunked_prefill_size=10)
    d = Driver(s)
    d.add(req(1, 14, 2), req(2, 9, 2))
    assert d.step() == {1: 8}
    assert d.step() == {1: 6}
    assert d.step() == {2: 9}
    assert d.step() == {1: 1, 2: 1}


def test_mixed_chunk_adds_the_decodes_and_shrinks_the_chunk():
    """S4 with enable_mixed_chunk: A decodes inside B's prefill step, and B's chunk budget is
    10 - 1 decoder = 9, cut to 8 (two pages)."""
    s = make_scheduler("sglang", chunked_prefill_size=10, enable_mixed_chunk=True)
    d = Driver(s)
    d.add(req(1, 4, 5))
    assert d.step() == {1: 4}
    d.add(req(2, 12, 2))
    assert d.step() == {1: 1, 2: 8}
    assert d.step() == {1: 1, 2: 4}


def test_chunk_below_one_page_is_refused():
    with pytest.raises(SchedulerError, match="chunked_prefill_size: 3 must be >= page_size"):
        make_scheduler("sglang", chunked_prefill_size=3)


def _ids(*pages):
    return tuple(t for page in pages for t in page)


X0, X1, Y1 = (1, 2, 3, 4), (5, 6, 7, 8), (9, 9, 9, 9)


def _finish(kv: RadixKVCache, rid: int, ids: tuple) -> int:
    """Admit a request of these prompt ids, compute all of them, finish it (R2-R4)."""
    r = Request(rid, 0.0, len(ids), 1, prompt_token_ids=ids)
    hit = kv.lookup_prefix(r)
    assert kv.allocate(r, len(ids) - hit, num_hit_tokens=hit)
    r.num_computed_tokens, r.status = len(ids), RequestStatus.FINISHED
    kv.free(r)
    kv.check_invariants()
    return hit


def _probe(kv: RadixKVCache, ids: tuple) -> int:
    return kv.lookup_prefix(Request(0, 0.0, len(ids) + 1, 1, prompt_token_ids=ids + (0,)))


def test_radix_hit_shares_one_copy_and_evicts_the_lru_leaf_first():
    """R2: Y matches X's first page (its own 8 tokens allow one page: num_tokens - 1 = 7);
    R3: only Y's second page is new, the tree holds X0 -> {X1, Y1}; R5: a 3-page request on a
    5-page pool evicts one page, the least recently used leaf X1, and never X0, Y1's parent."""
    kv = RadixKVCache(6, 4)
    assert _finish(kv, 1, _ids(X0, X1)) == 0
    assert _finish(kv, 2, _ids(X0, Y1)) == 4
    assert kv.num_tree_blocks == 3 and kv.num_free_blocks == 2 and kv.num_evictable_blocks == 3
    z = Request(3, 0.0, 12, 1)   # no token ids: never shared, never inserted (R1)
    assert kv.allocate(z, 12)
    assert kv.num_tree_blocks == 2 and kv.num_free_blocks == 0
    probe = Request(0, 0.0, 9, 1, prompt_token_ids=_ids(X0, Y1, (0,)))
    assert kv.cached_prefix_tokens(probe) == 8   # a router's question: no node is touched
    assert _probe(kv, _ids(X0, X1)) == 4 and _probe(kv, _ids(X0, Y1)) == 8


def test_locked_prefix_is_not_evictable():
    """R4: a running request's matched path is locked; only unlocked pages count as available."""
    kv = RadixKVCache(4, 4)
    _finish(kv, 1, _ids(X0, X1))
    r = Request(2, 0.0, 12, 1, prompt_token_ids=_ids(X0, X1, Y1))
    assert kv.lookup_prefix(r) == 8
    assert kv.allocate(r, 4, num_hit_tokens=8)
    assert kv.num_evictable_blocks == 0 and kv.num_available_blocks == 0
    assert not kv.allocate(Request(3, 0.0, 4, 1), 4)   # nothing may be evicted for it
    kv.check_invariants()


def test_a_prompt_is_cached_after_its_prefill_while_it_decodes():
    """R3 (cache_unfinished_req): A's 8-token prompt goes into the tree when its prefill step
    ends, locked by A; B, admitted while A decodes, matches both pages (its 12 tokens allow
    two) and computes only its last page. Once A finishes its pages stay, now evictable."""
    s = make_scheduler("sglang", num_gpu_blocks=11)
    d = Driver(s)
    a = Request(1, 0.0, 8, 3, prompt_token_ids=_ids(X0, X1))
    d.add(a)
    assert d.step() == {1: 8}
    assert s.kv.num_tree_blocks == 2 and s.kv.num_evictable_blocks == 0   # locked by A
    d.add(Request(2, 0.0, 12, 3, prompt_token_ids=_ids(X0, X1, Y1)))
    assert d.step() == {2: 4}   # a prefill-only step (S4): B's last page alone
    assert s.kv.num_hit_tokens == 8 and s.kv.num_tree_blocks == 3
    s.kv.check_invariants()
    d.run()
    assert s.kv.num_tree_blocks >= 3 and s.kv.num_evictable_blocks == s.kv.num_tree_blocks
    s.kv.check_invariants()


def test_a_chunked_prompt_is_cached_chunk_by_chunk():
    """R3 after each chunk (SGLang caches the chunked request before its next chunk): a 12-token
    prompt whose first page is cached computes 4-token chunks, each page joining the tree."""
    s = make_scheduler("sglang", num_gpu_blocks=11, chunked_prefill_size=4)
    d = Driver(s)
    _finish(s.kv, 9, _ids(X0, Y1))   # the tree holds X0 -> Y1
    r = Request(1, 0.0, 12, 2, prompt_token_ids=_ids(X0, X1, Y1))
    d.add(r)
    assert d.step() == {1: 4}        # X0 hit (its 12 tokens allow two pages, only X0 is cached)
    assert s.kv.num_tree_blocks == 3 and s.kv.num_evictable_blocks == 1   # X1 added, locked; Y1 free to evict
    assert d.step() == {1: 4}
    assert s.kv.num_tree_blocks == 4
    s.kv.check_invariants()


def test_a_page_two_prefills_computed_at_once_is_kept_once():
    """R3: A and B, the same 8-token prompt, prefill in one step (neither can hit the other). A's
    pages go into the tree; B's copies are duplicates, freed, and B locks A's: two pages freed."""
    s = make_scheduler("sglang", num_gpu_blocks=11)
    d = Driver(s)
    d.add(Request(1, 0.0, 8, 3, prompt_token_ids=_ids(X0, X1)),
          Request(2, 0.0, 8, 3, prompt_token_ids=_ids(X0, X1)))
    free_before = s.kv.num_free_blocks
    assert d.step() == {1: 8, 2: 8}
    assert s.kv.num_tree_blocks == 2 and s.kv.num_evictable_blocks == 0
    assert s.kv.num_free_blocks == free_before - 4 + 2   # 4 pages allocated, 2 kept
    s.kv.check_invariants()


def test_lpm_admits_the_longest_cached_prefix_first():
    """S9: with one seat, fcfs admits the first arrival; lpm the request whose 8 tokens are
    cached (it then computes only its last page)."""
    for policy, first, tokens in (("fcfs", 2, 12), ("lpm", 3, 4)):
        s = make_scheduler("sglang", max_running_requests=1, schedule_policy=policy)
        d = Driver(s)
        d.add(Request(1, 0.0, 8, 1, prompt_token_ids=_ids(X0, X1)))
        d.run()
        d.add(Request(2, 0.0, 12, 1, prompt_token_ids=_ids(Y1, Y1, Y1)),
              Request(3, 0.0, 12, 1, prompt_token_ids=_ids(X0, X1, Y1)))
        assert d.step() == {first: tokens}, policy
        assert s.kv.num_hit_tokens == (8 if policy == "lpm" else 0)


def test_dfs_weight_walks_the_heaviest_subtree_first():
    """S9 dfs-weight: the tree holds X0 -> {X1, Y1} and Z0. Waiting a (at Z0), b (at Y1), c and
    d (at X1), e (no match): X0 weighs 3 > Z0's 1, X1 2 > Y1 1, and a node's requests follow its
    children's, so the order is c, d, b, a, e; one seat admits c."""
    q, z0 = (8, 8, 8, 8), (7, 7, 7, 7)
    s = make_scheduler("sglang", max_running_requests=1, schedule_policy="dfs-weight")
    d = Driver(s)
    for rid, ids in enumerate((_ids(X0, X1), _ids(X0, Y1), z0), 1):
        d.add(Request(rid, 0.0, len(ids), 1, prompt_token_ids=ids))
    d.run()
    waiting = [Request(rid, 0.0, len(ids), 1, prompt_token_ids=ids) for rid, ids in
               ((10, _ids(z0, q)), (11, _ids(X0, Y1, q)), (12, _ids(X0, X1, q)),
                (13, _ids(X0, X1, q, q)), (14, _ids(q, q)))]
    d.add(*waiting)
    assert d.step() == {12: 4}
    assert [r.request_id for r in s.waiting] == [13, 11, 10, 14]
