"""Hand-worked TensorRT-LLM steps (rule numbers: docs/trtllm-semantics.md)."""
from __future__ import annotations

import pytest

from simulator.core.request import Request
from simulator.policies.base import SchedulerError
from tests.sched_helpers import Driver, make_scheduler, req


def trt(**options):
    # 9 blocks of 4 tokens, block 0 null: 8 usable blocks (32 tokens).
    base = dict(num_gpu_blocks=9, block_size=4, max_model_len=64, max_num_tokens=64,
                max_batch_size=4, enable_block_reuse=False)
    return make_scheduler("trtllm", **{**base, **options})


@pytest.mark.parametrize("policy, step1, free_after", [
    # T2: A reserves 8 + 16 = 24 tokens = 6 blocks; B needs 12 = 3 more, only 2 free: refused.
    ("GUARANTEED_NO_EVICT", {0: 8}, 2),
    # T5: only this step's tokens are allocated: 2 blocks each, both admitted, 4 free.
    ("MAX_UTILIZATION", {0: 8, 1: 8}, 4),
])
def test_no_evict_refuses_what_max_utilization_admits(policy, step1, free_after):
    d = Driver(trt(capacity_scheduler_policy=policy))
    d.add(req(0, 8, 16), req(1, 8, 4))
    assert d.step() == step1
    assert d.s.kv.num_free_blocks == free_after


def test_no_evict_never_pauses_and_finishes_in_order():
    d = Driver(trt())
    d.add(req(0, 8, 16), req(1, 8, 4))
    d.run()
    # T2: B waits until A frees its 6 blocks at step 16, is admitted at step 17, ends at 20.
    assert [(r.request_id, r.finish_s) for r in d.finished] == [(0, 16.0), (1, 20.0)]
    assert d.s.num_preemptions == 0


def test_max_utilization_pauses_the_newest():
    # T5: 4 usable blocks; A and B each hold 2 after their prompts; A's 9th token needs a third
    # block: B (the newest) is paused and recomputes later.
    d = Driver(trt(num_gpu_blocks=5, capacity_scheduler_policy="MAX_UTILIZATION"))
    d.add(req(0, 8, 6), req(1, 8, 6))
    assert d.step() == {0: 8, 1: 8}
    assert d.step() == {0: 1}
    assert d.s.num_preemptions == 1 and [r.request_id for r in d.s.waiting] == [1]
    d.run()
    assert sorted(r.request_id for r in d.finished) == [0, 1]


def test_context_not_chunked_waits_for_the_budget():
    # T3/T4: budget 12; A and C decode (2 tokens), B's 11-token prompt exceeds the 10 left: it
    # waits whole, unchunked, until A and C finish.
    d = Driver(trt(max_num_tokens=12, max_model_len=12, num_gpu_blocks=40))
    d.add(req(0, 4, 4), req(2, 4, 4))
    assert d.step() == {0: 4, 2: 4}
    d.add(req(1, 11, 1))
    assert d.step() == {0: 1, 2: 1}


def test_chunked_context_takes_whole_blocks():
    # T4: budget 10 - 1 decode = 9 left, rounded down to 2 blocks of 4: an 8-token chunk.
    d = Driver(trt(max_num_tokens=10, enable_chunked_context=True, num_gpu_blocks=40))
    d.add(req(0, 4, 4))
    assert d.step() == {0: 4}
    d.add(req(1, 20, 1))
    assert d.step() == {0: 1, 1: 8}
    assert d.step() == {0: 1, 1: 8}
    assert d.step() == {0: 1, 1: 4}


def test_names_map_to_common_fields_and_defaults():
    s = make_scheduler("trtllm", max_model_len=64)
    # T1: TensorRT-LLM's defaults, under both names.
    assert (s.options.max_num_tokens, s.options.max_num_batched_tokens) == (8192, 8192)
    assert (s.options.max_batch_size, s.options.max_num_seqs) == (2048, 2048)
    assert make_scheduler("trtllm", max_num_seqs=8).options.max_batch_size == 8


@pytest.mark.parametrize("options, field", [
    (dict(max_batch_size=4, max_num_seqs=8), "max_batch_size"),
    (dict(tokens_per_block=32), "tokens_per_block"),          # T7: the pool uses block_size 4
    (dict(free_gpu_memory_fraction=0.9), "free_gpu_memory_fraction"),   # T8
])
def test_refused_options_name_the_field(options, field):
    with pytest.raises(SchedulerError, match=field):
        make_scheduler("trtllm", **options)


def test_block_reuse_hits_a_shared_prompt():
    # T6: a second identical prompt reuses the first's 2 full blocks (hits capped below P).
    d = Driver(make_scheduler("trtllm", num_gpu_blocks=40, block_size=4, max_model_len=64))
    ids = tuple(range(9))
    a, b = (Request(i, 0.0, 9, 2, prompt_token_ids=ids) for i in (0, 1))
    d.add(a)
    d.run()
    d.add(b)
    assert d.step() == {1: 1}   # 8 of 9 tokens hit: only the last is computed
    assert b.num_cached_tokens == 8
