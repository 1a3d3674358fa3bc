"""vLLM V1 scheduler against hand-worked steps (scheduler-semantics.md §1, §2)."""
import pytest

from simulator.policies.base import SchedulerError
from tests.sched_helpers import Driver, make_scheduler, req


def v1(**kw):
    kw.setdefault("max_num_seqs", 4)
    kw.setdefault("max_num_batched_tokens", 10)
    return Driver(make_scheduler("vllm_v1", **kw))


def test_budget_chunks_the_last_admitted_prompt_and_only_final_chunk_samples():
    # Rule 1.2 B6: the last admitted request gets a partial chunk; rule 1.3.1 / trap 1: only
    # the step that completes a prefill samples a token.
    d = v1()
    a, b = req(0, 8, 2), req(1, 6, 1)
    d.add(a, b)
    assert d.step() == {0: 8, 1: 2}
    assert (a.num_output_tokens, b.num_output_tokens) == (1, 0)
    assert a.first_token_s == 1.0 and b.first_token_s is None
    assert d.step() == {0: 1, 1: 4}
    assert b.first_token_s == 2.0
    assert a.finish_s == 2.0 and b.finish_s == 2.0   # A: 2 tokens; B: 1 token


def test_running_in_admission_order_is_not_decode_first():
    # Trap 3: a long in-progress prefill ahead of a decode takes the whole budget.
    d = v1(max_num_batched_tokens=8)
    long_, dec = req(0, 20, 2), req(1, 2, 5)
    d.s.running = [long_, dec]
    dec.num_computed_tokens, dec.num_output_tokens = 2, 1   # dec waits for its 2nd token
    d.s.kv.allocate_up_to(dec, 2)
    assert d.step() == {0: 8}
    assert dec.num_output_tokens == 1


def test_max_num_seqs_caps_running_even_with_budget_left():
    # Rule 1.2 B2 / trap 5.
    d = v1(max_num_seqs=2, max_num_batched_tokens=100)
    d.add(req(0, 3, 2), req(1, 3, 2), req(2, 3, 2))
    assert d.step() == {0: 3, 1: 3}
    assert d.step() == {0: 1, 1: 1}
    assert d.step() == {2: 3}      # seats free only from the step after the finish (trap 9)


def test_chunking_off_is_head_of_line():
    # Rule 1.2 B5: a prompt that does not fit whole stops admission; smaller ones behind wait.
    d = v1(enable_chunked_prefill=False, max_num_batched_tokens=16, max_model_len=16)
    d.add(req(0, 10, 3), req(1, 10, 3), req(2, 2, 3))
    assert d.step() == {0: 10}                     # B (10) > 6 left: C (2) is not tried
    assert d.step() == {0: 1, 1: 10, 2: 2}         # 16 - 1 - 10 = 5 >= 2


def test_chunking_off_needs_budget_of_max_model_len():
    # [CFG] startup check quoted in rule 1.2.
    with pytest.raises(SchedulerError, match="max_num_batched_tokens: 10 must be >= max_model_len"):
        make_scheduler("vllm_v1", enable_chunked_prefill=False, max_num_batched_tokens=10,
                       max_num_seqs=4, max_model_len=64)


def test_long_prefill_threshold_caps_tokens_per_request():
    # Rule 1.5: the threshold caps tokens per request per step.
    d = v1(max_num_batched_tokens=100, long_prefill_token_threshold=6)
    d.add(req(0, 14, 1), req(1, 3, 1))
    assert d.step() == {0: 6, 1: 3}
    assert d.step() == {0: 6}
    assert d.step() == {0: 2}


def test_fcfs_preempts_the_running_tail_and_keeps_outputs():
    # Rule 2.5 / trap 6: the victim is the last of `running`; outputs are kept, C=0, back to
    # the head of waiting; Phase B is skipped that step; the re-prefill covers P + outputs.
    d = v1(num_gpu_blocks=5, max_num_batched_tokens=16, enable_prefix_caching=False)  # 4 blocks
    a, b = req(0, 4, 10), req(1, 4, 10)
    d.add(a, b)
    for _ in range(5):
        d.step()                                   # both decode; each holds 2 blocks at C=8
    assert (a.num_output_tokens, b.num_output_tokens) == (5, 5)
    assert d.s.kv.num_free_blocks == 0
    assert d.step() == {0: 1}                      # A needs a 3rd block: B is the tail victim
    assert (b.num_preemptions, b.num_computed_tokens, b.num_output_tokens) == (1, 0, 5)
    assert d.s.waiting.peek() is b and d.s.num_preemptions == 1
    # Full-ISL gate (rule 2.3): B's 9 tokens need 3 blocks; it waits until A finishes.
    while not a.is_finished:
        assert 1 not in d.step()
    assert a.finish_s == 10.0
    assert d.step() == {1: 9}                      # re-prefill P + 5 outputs, samples token 6
    assert b.num_output_tokens == 6
    assert d.run() == 4 and b.finish_s == 15.0


def test_the_requester_can_preempt_itself():
    # Rule 2.5: the victim may be the requesting request itself; Phase A then ends.
    d = v1(num_gpu_blocks=4, max_num_batched_tokens=16)        # 3 usable blocks
    a, b = req(0, 4, 10), req(1, 8, 10)
    d.add(a, b)
    d.step()                                       # A:1 block, B:2 blocks, pool empty
    scheduled = d.step()                           # A needs a 2nd block: victim B (tail)
    assert scheduled == {0: 1} and b.num_preemptions == 1
    d2 = v1(num_gpu_blocks=3, max_num_batched_tokens=16)       # 2 usable blocks
    solo = req(0, 4, 10)
    d2.add(solo)
    d2.step()
    d2.step()                                      # C=4 -> 5 slots: 2 blocks, fine
    for _ in range(3):
        d2.step()                                  # up to C=8
    assert d2.step() == {}                         # needs a 3rd block: preempts itself
    assert solo.num_preemptions == 1 and d2.s.waiting.peek() is solo


def test_priority_victim_is_rolled_back_if_already_scheduled():
    # Rule 2.5: priority victim = max (priority, arrival); if it was already scheduled in this
    # step its tokens and allocation are rolled back.
    d = v1(num_gpu_blocks=4, max_num_batched_tokens=16, scheduling_policy="priority")
    low, high = req(0, 4, 10, priority=5), req(1, 4, 10, priority=0)
    for r in (low, high):                          # running = [low, high], each 1 block, C=4
        d.s.kv.allocate_up_to(r, 4)
        r.num_computed_tokens, r.num_output_tokens = 4, 1
    d.s.running = [low, high]
    scheduled = d.step()          # low takes the last block, then high fails: victim = low
    assert scheduled == {1: 1}
    assert (low.num_preemptions, low.num_computed_tokens, high.num_preemptions) == (1, 0, 0)
    assert d.s.kv.num_blocks_of(low) == 0 and d.s.kv.num_blocks_of(high) == 2


def test_priority_ties_preempt_the_last_submitted_and_requeue_by_submission():
    # Rules 1.4 and 2.5 with a burst (issue 22: four tied requests preempted each other): vLLM
    # orders ties by arrival time, then request id, and stamps each request of a burst with its
    # own arrival time, so the victim among equals is the last submitted, never the requester
    # that is furthest along, and the preempted go back in submission order.
    d = v1(num_gpu_blocks=5, max_num_batched_tokens=16, scheduling_policy="priority")
    burst = [req(i, 4, 10) for i in range(4)]      # priority 0, arrival 0.0: all tied
    for r in burst:                                 # running = burst, 1 block each, C=4: KV full
        d.s.kv.allocate_up_to(r, 4)
        r.num_computed_tokens, r.num_output_tokens = 4, 1
        d.s.enter_running(r)
    assert d.step() == {0: 1, 1: 1}   # 0 takes 3's block, 1 takes 2's
    assert [r.num_preemptions for r in burst] == [0, 0, 1, 1]
    assert [r.request_id for r in d.s.waiting] == [2, 3]
    steps = d.run(max_steps=200)
    assert steps < 200 and all(r.num_output_tokens == 10 for r in burst)


def test_priority_admission_order():
    # Rule 1.4: priority waiting queue is a heap on (priority, arrival).
    d = v1(max_num_batched_tokens=16, scheduling_policy="priority", max_num_seqs=1)
    d.add(req(0, 4, 1, priority=5), req(1, 4, 1, arrival_s=0.0, priority=0))
    assert d.step() == {1: 4}


def test_kv_usage_is_a_fraction_of_the_usable_pool():
    # Rule 2.1 / trap 8: block 0 is the null block; usage = 1 - free/(num_gpu_blocks - 1).
    d = v1(num_gpu_blocks=11)
    d.add(req(0, 8, 3))
    d.step()
    assert d.s.kv.num_total_blocks == 10
    assert d.s.kv.usage == pytest.approx(0.2)


def test_priority_waiting_queue_is_a_heap_on_priority_then_arrival():
    # Rule 1.4: (priority, arrival_time) min-heap; a request put back is just pushed.
    from simulator.policies.queues import PriorityQueue
    q = PriorityQueue()
    late_urgent, early, early_urgent = req(0, 4, 1, arrival_s=2.0, priority=0), \
        req(1, 4, 1, arrival_s=0.0, priority=1), req(2, 4, 1, arrival_s=1.0, priority=0)
    for r in (late_urgent, early, early_urgent):
        q.push(r)
    assert q.peek() is early_urgent
    assert [q.pop().request_id for _ in range(3)] == [2, 0, 1]
    q.push(early)
    q.push_preempted(early_urgent)            # "prepend" after a preemption
    assert q.peek() is early_urgent and len(q) == 2


def test_priority_policy_is_refused_where_it_is_not_modelled():
    with pytest.raises(SchedulerError, match="scheduling_policy: 'priority' is not modelled for orca"):
        make_scheduler("orca", max_num_seqs=4, scheduling_policy="priority")
