"""Paged KV accounting (scheduler-semantics.md §2.1, §2.2)."""
import pytest

from simulator.kv.block_pool import KVCache
from simulator.core.request import Request


def r(i=0, prompt=100, out=10):
    return Request(i, 0.0, prompt, out)


def test_null_block_is_not_usable():
    # Rule 2.1: block 0 is a null block, so num_gpu_blocks - 1 are usable.
    kv = KVCache(num_gpu_blocks=11, block_size=16)
    assert kv.num_total_blocks == kv.num_free_blocks == 10
    assert KVCache(11, 16, reserve_null_block=False).num_total_blocks == 11


def test_blocks_for_tokens_is_ceil():
    kv = KVCache(100, 16)
    assert [kv.blocks_for(n) for n in (0, 1, 16, 17, 32, 33)] == [0, 1, 1, 2, 2, 3]


def test_prefill_of_100_tokens_takes_7_blocks_and_the_113th_token_an_8th():
    # Rule 2.2 example: P=100 -> 7 blocks (112 slots); computing the 113th token needs an 8th.
    kv = KVCache(100, 16)
    req = r()
    assert kv.allocate(req, 100)
    assert kv.num_blocks_of(req) == 7
    req.num_computed_tokens = 111
    assert kv.allocate(req, 1) and kv.num_blocks_of(req) == 7      # the 112th token: slot 111
    req.num_computed_tokens = 112
    assert kv.allocate(req, 1) and kv.num_blocks_of(req) == 8      # the 113th token
    assert kv.num_free_blocks == 99 - 8


def test_allocation_is_all_or_nothing():
    kv = KVCache(6, 16)            # 5 usable
    a, b = r(0), r(1)
    assert kv.allocate(a, 48)      # 3 blocks
    assert not kv.allocate(b, 48)  # needs 3, 2 free: nothing taken
    assert kv.num_free_blocks == 2 and kv.num_blocks_of(b) == 0
    assert kv.allocate(b, 32)
    assert kv.num_free_blocks == 0
    kv.check_invariants()


def test_headroom_blocks_watermark():
    kv = KVCache(11, 16)           # 10 usable
    a = r()
    assert not kv.allocate_up_to(a, 16 * 9, headroom_blocks=2)
    assert kv.allocate_up_to(a, 16 * 8, headroom_blocks=2)


def test_max_model_len_caps_the_slots():
    kv = KVCache(100, 16)
    a = r(prompt=40)
    assert kv.allocate(a, 40, max_model_len=32)
    assert kv.num_blocks_of(a) == 2


def test_free_returns_blocks_and_usage_is_a_fraction():
    # Rule 2.1 / trap 8: usage = 1 - free / (num_gpu_blocks - 1), in 0..1.
    kv = KVCache(11, 16)
    a = r()
    kv.allocate(a, 64)
    assert kv.usage == pytest.approx(0.4)
    kv.free(a)
    assert kv.usage == 0.0 and kv.num_free_blocks == 10
    kv.free(a)                     # freeing twice is harmless
    assert kv.num_free_blocks == 10


def test_prefix_cache_seam_reports_no_hits_without_prefix_caching():
    assert KVCache(11, 16).lookup_prefix(r()) == 0


def test_bad_sizes_are_user_errors():
    with pytest.raises(ValueError, match="engine.block_size"):
        KVCache(10, 0)
    with pytest.raises(ValueError, match="engine.num_gpu_blocks"):
        KVCache(1, 16)
