"""Prefix caching against vLLM's own test cases (issue 19, point 3; semantics §2.4).

Each test names the vLLM test it follows (tests/v1/core/test_prefix_caching.py unless said
otherwise, the newest version, where blocks without a hash are prepended to the free queue).
vLLM numbers blocks from 1 (block 0 is its null block); this pool numbers the usable blocks
from 0, so vLLM's block b is block b - 1 here.
"""
import pytest

from simulator.core.request import Request, RequestStatus
from simulator.kv.block_hashes import BlockHashes, answer_key, answer_token_ids
from simulator.kv.prefix_cache import PrefixCachingKVCache
from simulator.runner import prepare
from simulator.scenario import ScenarioError, validate_scenario
from tests.sched_helpers import Driver, make_scheduler


def req(rid, ids, out=17):
    return Request(rid, 0.0, len(ids), out, prompt_token_ids=tuple(ids))


def finish(kv, request):
    request.status = RequestStatus.FINISHED
    kv.free(request)


def vllm_ids(blocks):
    return [b + 1 for b in blocks]


COMMON = [i for i in range(3) for _ in range(16)]   # 3 full blocks


def test_prefill_frees_blocks_without_hash_to_the_head_and_cached_ones_to_the_tail():
    # vLLM test_prefill: [5, 4, 6, 7, 8, 9, 10, 3, 2, 1] after both requests free.
    kv = PrefixCachingKVCache(11, 16)
    req0 = req("0", COMMON + [3] * 7)
    assert kv.lookup_prefix(req0) == 0
    assert kv.allocate(req0, 55)
    req1 = req("1", COMMON + [3] * 5)
    assert kv.lookup_prefix(req1) == 48
    assert kv.allocate(req1, 53 - 48, num_hit_tokens=48)
    assert kv.num_free_blocks == 5
    finish(kv, req0)
    finish(kv, req1)
    assert vllm_ids(kv._free) == [5, 4, 6, 7, 8, 9, 10, 3, 2, 1]
    req2 = req("2", COMMON + [3] * 6)                 # hits the freed prefix, takes the head
    assert kv.lookup_prefix(req2) == 48
    assert kv.allocate(req2, 6, num_hit_tokens=48)
    assert vllm_ids(kv._blocks[req2]) == [1, 2, 3, 5]


def test_evict_takes_the_partial_block_first_then_the_least_recently_freed():
    # vLLM test_evict: [6, 10, 5, 4, 3, 2, 1] after req0, [..., 9, 8, 7] after req1; req2's
    # new block is 6.
    kv = PrefixCachingKVCache(11, 16)
    req0 = req("0", list(range(5 * 16 + 7)))
    assert kv.allocate(req0, 5 * 16 + 7)
    req1 = req("1", list(range(87, 87 + 3 * 16)))
    assert kv.allocate(req1, 3 * 16)
    assert kv.num_free_blocks == 1
    finish(kv, req0)
    assert vllm_ids(kv._free) == [6, 10, 5, 4, 3, 2, 1]
    finish(kv, req1)
    assert vllm_ids(kv._free) == [6, 10, 5, 4, 3, 2, 1, 9, 8, 7]
    req2 = req("2", list(range(2 * 16 + 3)))
    assert kv.lookup_prefix(req2) == 32
    assert kv.allocate(req2, 3, num_hit_tokens=32)
    assert vllm_ids(kv._blocks[req2]) == [1, 2, 6]
    assert kv.num_free_blocks == 7


def test_every_copy_of_a_hash_is_kept_and_evicting_one_keeps_the_hit():
    # vLLM test_maybe_evict_cached_block (duplicates kept per hash) and test_prefill_plp (a
    # request that computes a cached prefix itself registers a second copy).
    kv = PrefixCachingKVCache(8, 16)
    a = req("a", COMMON)
    assert kv.allocate(a, 48)
    b = req("b", COMMON)                                # computes the same blocks again
    assert kv.allocate(b, 48)
    a_blocks, b_blocks = list(kv._blocks[a]), list(kv._blocks[b])
    assert list(kv._by_hash[kv._block_hash[a_blocks[0]]]) == [a_blocks[0], b_blocks[0]]
    finish(kv, a)
    finish(kv, b)
    c = req("c", COMMON + [7])
    assert kv.lookup_prefix(c) == 48 and kv._hits[c] == a_blocks   # the first copy wins
    for i in range(4):              # the never-used block, then a's copies (freed first)
        assert kv.allocate(req(f"x{i}", [90 + i] * 16), 16)
    assert kv.lookup_prefix(c) == 48 and kv._hits[c] == b_blocks   # b's copies still hit


def _preempt_and_resume(enable_prefix_caching: bool):
    d = Driver(make_scheduler("vllm_v1", enable_prefix_caching=enable_prefix_caching,
                              max_num_seqs=4, max_num_batched_tokens=256, block_size=16,
                              num_gpu_blocks=9, max_model_len=256))
    a, b = req(0, list(range(64)), out=40), req(1, list(range(500, 564)), out=40)
    d.add(a, b)
    d.run()
    return d, a, b


def test_resumed_lookups_and_lookups_without_caching_are_not_counted():
    # vLLM get_computed_blocks: nothing is looked up (or counted) with prefix caching off, and
    # a preempted request's lookup goes to the preempted-request statistics.
    d, a, b = _preempt_and_resume(True)
    assert a.num_preemptions + b.num_preemptions > 0, "precondition: the run preempts"
    assert d.s.kv.num_queries_tokens == 64 + 64          # first admissions only
    assert d.s.kv.num_hit_tokens == 0
    assert {a.num_cached_tokens, b.num_cached_tokens} == {0}   # set at the first admission
    d, a, b = _preempt_and_resume(False)
    assert (d.s.kv.num_queries_tokens, d.s.kv.num_hit_tokens) == (0, 0)


def test_generated_tokens_are_hashed_so_a_follow_up_turn_hits_the_answer():
    # vLLM hashes blocks filled by generated tokens (test_decode: the block completed by
    # outputs gets a hash). A second turn whose prompt is turn 1's prompt, its answer and a new
    # message computes only the new tokens and the last partial block.
    d = Driver(make_scheduler("vllm_v1", enable_prefix_caching=True, max_num_seqs=4,
                              max_num_batched_tokens=512, block_size=16, num_gpu_blocks=64,
                              max_model_len=512))
    prompt, num_out = tuple(range(1000, 1040)), 30
    turn1 = req(0, prompt, out=num_out)
    d.add(turn1)
    d.run()
    history = prompt + answer_token_ids(answer_key(prompt), 0, num_out)
    turn2 = req(1, history + (7,) * 5)
    d.add(turn2)
    first = d.step()
    # Turn 1 held 40 + 29 = 69 tokens of KV (its last token never gets KV): 4 full blocks.
    assert turn2.num_cached_tokens == 64
    assert first[1] == len(history) + 5 - 64


def test_answer_ids_depend_on_the_prompt_only():
    key = answer_key((1, 2, 3))
    assert answer_token_ids(key, 0, 5) == answer_token_ids(answer_key((1, 2, 3)), 0, 5)
    assert answer_token_ids(key, 2, 5) == answer_token_ids(key, 0, 5)[2:]
    assert answer_token_ids(key, 0, 5) != answer_token_ids(answer_key((1, 2, 4)), 0, 5)
    hashes = BlockHashes(4)
    r = Request(0, 0.0, 3, 8, prompt_token_ids=(1, 2, 3))
    r.num_output_tokens = 5                                  # 8 tokens: 2 full blocks
    assert hashes.num_hashable(r) == 2
    assert hashes.hash_of(r, 0) == hash((None, (1, 2, 3) + answer_token_ids(key, 0, 1)))


def _scenario(num_gpu_blocks, max_model_len, preset="vllm_v1", memory_gib=None):
    raw = {"name": "startup", "model": "llama-2-7b", "hardware": "a100-80gb",
           "cost_model": {"kind": "unit"}, "engine": {"max_model_len": max_model_len},
           "workload": {"arrival": {"kind": "inf"}, "prompt_len": {"kind": "fixed", "value": 16},
                        "output_len": {"kind": "fixed", "value": 4}, "num_requests": 2},
           "schedulers": [{"preset": preset}]}
    if num_gpu_blocks is not None:
        raw["engine"]["num_gpu_blocks"] = num_gpu_blocks
    if memory_gib is not None:
        raw["hardware"] = {"memory_gib": memory_gib, "memory_bandwidth_GBps": 2000,
                           "bf16_tflops": 300}
    return validate_scenario(raw)


@pytest.mark.parametrize("preset", ["vllm_v1", "vllm_v0"])
def test_memory_below_one_max_model_len_request_is_refused_at_start_up(preset):
    # vLLM V1 check_enough_kv_cache_memory (V0: its cache-size check): the KV memory must hold
    # one max_model_len request. Llama-2-7B weighs 12.6 GiB; 15 GiB at 0.92 leaves ~0.6 GiB of
    # KV cache, fewer than a 4096-token request's 2 GiB.
    with pytest.raises(ScenarioError, match=r"engine.max_model_len: 4096 tokens need 256 KV "
                                            rf"blocks of 16, more than the \d+ .*{preset} refuses"):
        prepare(_scenario(None, 4096, preset, memory_gib=15))
    prepare(_scenario(None, 256, preset, memory_gib=15))         # a short context fits


def test_given_blocks_are_an_override_the_memory_check_does_not_see():
    # As num_gpu_blocks_override: vLLM checks the memory before the override applies, so a
    # small pool on a large GPU starts (the workload's requests must still fit, checked later).
    prepare(_scenario(3, 512))
