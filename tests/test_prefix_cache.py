"""Prefix caching as vLLM V1 does it (scheduler-semantics.md §2.2, §2.4, traps 7 and 8)."""
from simulator.kv.prefix_cache import PrefixCachingKVCache
from simulator.core.request import Request, RequestStatus
from tests.sched_helpers import Driver, make_scheduler


def req(rid, ids, out=4, arrival=0.0):
    return Request(rid, arrival, len(ids), out, prompt_token_ids=tuple(ids))


def v1(**kw):
    kw.setdefault("max_num_seqs", 8)
    kw.setdefault("max_num_batched_tokens", 256)
    kw.setdefault("block_size", 16)
    return Driver(make_scheduler("vllm_v1", enable_prefix_caching=True, **kw))


SHARED = list(range(1000, 1040))     # 40 tokens: 2 full blocks of 16 + 8


def test_a_later_request_in_the_same_step_hits_blocks_hashed_at_schedule_time():
    # Rule 2.2 step 5 / trap 7: full blocks are hashed at schedule time, visible in the same step.
    d = v1()
    a, b = req(0, SHARED), req(1, SHARED + [7, 8])
    d.add(a, b)
    assert d.step() == {0: 40, 1: 42 - 32}
    assert b.num_cached_tokens == 32
    kv = d.s.kv
    assert kv.num_blocks_of(b) == 3 and kv.num_used_blocks == 3 + 1   # 2 shared + A's 3rd + B's 3rd
    assert (kv.num_queries_tokens, kv.num_hit_tokens) == (82, 32)


def test_a_fully_cached_block_aligned_prompt_recomputes_its_last_block():
    # Rule 2.4: look at most (num_tokens - 1) // block_size blocks; the last token is recomputed.
    d = v1()
    a = req(0, SHARED[:32], out=1)
    d.add(a)
    d.step()                                   # A finishes (1 output): blocks freed, still hashed
    b = req(1, SHARED[:32])
    d.add(b)
    assert d.step() == {1: 16}
    assert b.num_cached_tokens == 16


def test_freed_blocks_stay_cached_until_evicted_tail_first():
    # Rule 2.4: freeing appends in reverse order; allocation pops the least recently freed.
    kv = PrefixCachingKVCache(num_gpu_blocks=4, block_size=4)   # 3 usable blocks
    a = req(0, list(range(12)))
    a.num_computed_tokens = 0
    assert kv.allocate(a, 12)
    a.status = RequestStatus.FINISHED
    kv.free(a)
    assert kv.num_free_blocks == 3 and kv.usage == 0.0         # cached blocks count as free
    b = req(1, list(range(12)))
    assert kv.lookup_prefix(b) == 8                            # (12 - 1) // 4 = 2 blocks
    other = req(2, [99] * 4)
    assert kv.allocate(other, 4)                               # evicts A's last block first
    assert kv.lookup_prefix(b) == 8
    assert kv.allocate(req(3, [98] * 4), 4)                    # then A's second block
    assert kv.lookup_prefix(b) == 4
    kv.check_invariants()


def test_hitting_an_evictable_block_uses_free_capacity():
    # Trap 7: a hit on a free cached block takes it off the free queue.
    kv = PrefixCachingKVCache(num_gpu_blocks=4, block_size=4)   # 3 usable
    a = req(0, list(range(8)))
    kv.allocate(a, 8)
    a.status = RequestStatus.FINISHED
    kv.free(a)
    b = req(1, list(range(8)) + [50, 51, 52, 53])
    hit = kv.lookup_prefix(b)
    assert hit == 8
    assert kv.blocks_to_admit(b, 12, hit) == 1 + 2             # one new block + two idle hits
    assert kv.allocate(b, 4, num_hit_tokens=hit)
    assert kv.num_free_blocks == 0
    kv.check_invariants()


def test_a_preempted_request_resumes_with_hits_on_its_own_blocks():
    # Rule 2.5: blocks are freed with their hashes kept, so a quick resume may hit them, including
    # blocks of its own generated tokens (which no other request can hit).
    kv = PrefixCachingKVCache(num_gpu_blocks=11, block_size=4)
    r = req(0, [1, 2, 3, 4], out=10)
    r.num_output_tokens = 6                     # 10 tokens, the last not yet computed
    assert kv.allocate(r, 10)                   # 3 blocks; blocks 0 and 1 are full and hashed
    r.status = RequestStatus.PREEMPTED
    kv.free(r)
    assert kv.lookup_prefix(r) == 8             # (10 - 1) // 4 = 2 blocks
    other = req(1, [1, 2, 3, 4, 9, 9, 9, 9, 9])
    assert kv.lookup_prefix(other) == 4         # shares the prompt block, not the generated one


def test_a_preempted_request_without_token_ids_keeps_its_own_blocks_while_blocks_are_counted():
    # The cache counts blocks until identities matter (module docstring); a preemption of a
    # request with full blocks is such a moment: its blocks must stay hittable on resume.
    kv = PrefixCachingKVCache(num_gpu_blocks=11, block_size=4)
    r = Request(0, 0.0, 4, 10)                  # no prompt token ids
    r.num_output_tokens = 6
    assert kv.allocate(r, 10)
    assert kv._counting                         # nothing keyed yet: counted
    r.status = RequestStatus.PREEMPTED
    kv.free(r)
    assert not kv._counting
    assert kv.lookup_prefix(r) == 8             # its own two full blocks, as with identities
    kv.check_invariants()


def _same_results_with_and_without_counting(scenario: dict):
    import pytest
    from simulator.runner import prepare, simulate
    from simulator.scenario import validate_scenario
    from tests.test_fast_paths import fingerprint
    prepared = prepare(validate_scenario(scenario))
    counted = simulate(prepared, prepared.runs[0])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PrefixCachingKVCache, "start_counting", False)
        identified = simulate(prepared, prepared.runs[0])
    assert fingerprint(counted) == fingerprint(identified)
    return counted


def test_counting_blocks_until_identities_matter_changes_no_result():
    from tests.test_fast_paths import PRESETS, prefix_cache_scenario, random_scenario
    preempted = 0
    for seed in range(12):
        # token ids (identities from the first allocation) ...
        _same_results_with_and_without_counting(prefix_cache_scenario(seed))
        # ... and synthetic prompts on a small cache (identities from the first preemption, if any)
        scenario = random_scenario(seed * len(PRESETS))   # vllm_v1 with prefix caching, its default
        assert scenario["schedulers"][0]["preset"] == "vllm_v1"
        out = _same_results_with_and_without_counting(scenario)
        preempted += out.summary["num_preemptions"]
    assert preempted > 0
