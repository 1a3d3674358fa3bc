"""vLLM V0 (semantics §3) and Sarathi-Serve (§4) against hand-worked steps."""
import pytest

from simulator.policies.base import SchedulerError
from tests.sched_helpers import Driver, make_scheduler, req


def v0(**kw):
    kw.setdefault("max_num_seqs", 4)
    kw.setdefault("max_num_batched_tokens", 64)
    return Driver(make_scheduler("vllm_v0", **kw))


def test_v0_prefill_step_stalls_every_decode():
    # §3 chunking off, step 2: any admitted prefill makes the step prefill-only (trap 3).
    d = v0()
    a = req(0, 4, 5)
    d.add(a)
    assert d.step() == {0: 4}
    d.add(req(1, 6, 2, arrival_s=1.0))
    assert d.step() == {1: 6}           # A stalls
    assert d.step() == {0: 1, 1: 1}


def test_v0_admits_while_prompts_fit_the_budget():
    # §3 step 1: break unless sum(prompt) <= max_num_batched_tokens.
    d = v0(max_num_batched_tokens=10, max_model_len=10)
    d.add(req(0, 6, 1), req(1, 6, 1), req(2, 2, 1))
    assert d.step() == {0: 6}
    assert d.step() == {1: 6, 2: 2}


def test_v0_watermark_blocks_admission():
    # §3 block manager: admit only if free - required >= 1% of blocks.
    d = v0(num_gpu_blocks=201, max_model_len=1024, max_num_batched_tokens=1024)  # watermark 2
    d.add(req(0, 4 * 198, 1, arrival_s=0.0))
    assert d.step() == {0: 792}         # 198 blocks leave exactly 2 free
    d2 = v0(num_gpu_blocks=201, max_model_len=1024, max_num_batched_tokens=1024)
    d2.add(req(0, 4 * 199, 1))
    assert d2.step() == {}              # would leave 1 < 2 free: LATER


def test_v0_preempts_the_running_tail_by_recompute():
    d = v0(num_gpu_blocks=5, watermark=0.0)      # 4 usable blocks of 4 tokens
    a, b = req(0, 4, 10), req(1, 4, 10)
    d.add(a, b)
    d.step()                                       # prefill both: 1 block each
    for _ in range(4):
        d.step()                                   # decode to C=8: 2 blocks each
    assert d.step() == {0: 1}                      # A needs a 3rd block: B (tail) preempted
    assert (b.num_preemptions, b.num_output_tokens, d.s.waiting.peek()) == (1, 5, b)


def test_v0_budget_must_cover_max_model_len_with_chunking_off():
    # §3: V0 ignores prompts longer than min(max_model_len, max_num_batched_tokens); its
    # SchedulerConfig refuses a budget below max_model_len at startup, so with chunking off
    # every prompt that fits the context fits the budget.
    with pytest.raises(SchedulerError, match="must be >= max_model_len"):
        make_scheduler("vllm_v0", max_num_batched_tokens=48, max_num_seqs=4, max_model_len=64)
    s = make_scheduler("vllm_v0", max_num_batched_tokens=64, max_num_seqs=4, max_model_len=64)
    assert s.max_request_tokens() == 64


def sarathi(**kw):
    kw.setdefault("max_num_seqs", 4)
    kw.setdefault("max_num_batched_tokens", 8)
    kw.setdefault("watermark", 0.0)
    return Driver(make_scheduler("sarathi", **kw))


def test_sarathi_decodes_first_then_chunks():
    # §4 steps 2-3: every decode first, then the ongoing prefill takes what is left.
    d = sarathi()
    long_, dec = req(0, 20, 2), req(1, 2, 5)
    d.s.kv.allocate_up_to(long_, 20)
    d.s.kv.allocate_up_to(dec, 2)
    dec.num_computed_tokens, dec.num_output_tokens = 2, 1
    d.s.running = [long_, dec]
    assert d.step() == {1: 1, 0: 7}


def test_sarathi_allocates_the_whole_prompt_at_admission():
    # §4 step 4 / trap 20: can_allocate covers the whole prompt although one chunk runs.
    d = sarathi()
    r = req(0, 20, 2)
    d.add(r)
    assert d.step() == {0: 8}
    assert d.s.kv.num_blocks_of(r) == 5


def test_sarathi_stalls_prefills_when_decodes_fill_the_budget():
    # §4: prefills stall when #decodes >= budget.
    d = sarathi(max_num_batched_tokens=4, max_num_seqs=4)
    decs = [req(i, 2, 9) for i in range(4)]
    d.add(*decs)
    assert d.step() == {0: 2, 1: 2}
    assert d.step() == {0: 1, 1: 1, 2: 2}
    assert d.step() == {0: 1, 1: 1, 2: 1, 3: 1}
    d.add(req(9, 3, 1, arrival_s=3.0))
    assert 9 not in d.step()


def test_sarathi_preempts_latest_arrival():
    d = sarathi(num_gpu_blocks=5, max_num_batched_tokens=16)   # 4 usable blocks
    a, b = req(0, 4, 10, arrival_s=0.0), req(1, 4, 10, arrival_s=0.0)
    d.add(a, b)
    d.step()
    for _ in range(4):
        d.step()
    assert d.step() == {0: 1}
    assert b.num_preemptions == 1 and d.s.waiting.peek() is b


def test_v0_with_chunked_prefill_uses_sarathi_rules():
    # §3 "Chunked prefill": running (decodes, chunks) then new prefills in one mixed step.
    s = make_scheduler("vllm_v0", enable_chunked_prefill=True, max_num_seqs=4,
                       max_num_batched_tokens=8)
    assert type(s).__name__ == "SarathiScheduler"
