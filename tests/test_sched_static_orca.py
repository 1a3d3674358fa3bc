"""Static batching (semantics §6, trap 18) and Orca (§5, trap 19) against hand-worked steps."""

from tests.sched_helpers import Driver, make_scheduler, req


def static(**kw):
    kw.setdefault("max_num_seqs", 2)
    return Driver(make_scheduler("static", **kw))


def test_static_runs_until_longest_member_finishes_without_refill():
    # §6 FT variant: a member's latency ends at its own last token; its slot is not refilled.
    d = static()
    a, b, c = req(0, 4, 3), req(1, 4, 1), req(2, 4, 2)
    d.add(a, b, c)
    assert d.step() == {0: 4, 1: 4}
    assert b.finish_s == 1.0
    assert d.step() == {0: 1}          # C waits although a slot is free
    assert d.step() == {0: 1}
    assert a.finish_s == 3.0
    assert d.step() == {2: 4}
    assert d.step() == {2: 1}
    assert c.finish_s == 5.0


def test_faster_transformer_is_an_alias_of_static():
    s = make_scheduler("faster_transformer", max_num_seqs=2)
    assert type(s).__name__ == "StaticScheduler"


def test_static_hf_variant_pads_rows_and_returns_at_batch_end():
    # Trap 18: B rows of compute until the longest finishes; outputs return at batch end.
    d = static(variant="hf")
    a, b = req(0, 4, 3), req(1, 4, 1)
    d.add(a, b)
    d.step()
    batch = d.s.schedule(d.now)
    assert batch.num_padding_rows == 1 and batch.shape().num_seqs == 2
    d.now = 2.0
    d.s.update_from_output(batch, d.now)
    d.step()
    assert b.first_token_s == b.finish_s == 3.0 and a.first_token_s == 3.0


def test_static_max_wait_holds_a_partial_batch():
    # Triton-style "full batch or max queue delay" (§6 last bullet).
    d = static(max_wait_s=2.0)
    d.add(req(0, 4, 1))
    assert d.step() == {}
    assert d.s.next_wakeup_s(1.0) == 2.0
    d.now = 2.0
    assert d.step() == {0: 4}


def test_static_reserves_a_whole_context_per_member():
    # §6: each member reserves ceil(max_model_len / block_size) blocks.
    d = static(max_num_seqs=4, num_gpu_blocks=9, max_model_len=16)   # 8 usable, 4 per request
    d.add(*(req(i, 4, 2) for i in range(3)))
    assert d.step() == {0: 4, 1: 4}


def orca(**kw):
    kw.setdefault("max_num_seqs", 4)
    return Driver(make_scheduler("orca", num_gpu_blocks=9, max_model_len=16, **kw))


def test_orca_reservation_limits_concurrency_not_max_bs():
    # Alg. 1 Select: a new request reserves its maximum; break when it does not fit.
    d = orca()
    d.add(req(0, 4, 2), req(1, 4, 2), req(2, 4, 2))
    assert d.step() == {0: 4, 1: 4}     # 2 x 4 blocks fill the 8 usable blocks
    assert d.step() == {0: 1, 1: 1}
    assert d.step() == {2: 4}


def test_orca_whole_prompt_joins_decoding_batch():
    # Selective batching: a full-prompt initiation and increments share one iteration.
    d = orca(reserve="request")
    a = req(0, 4, 5)
    d.add(a)
    d.step()
    d.add(req(1, 7, 2, arrival_s=1.0))
    assert d.step() == {0: 1, 1: 7}


def test_orca_never_preempts():
    d = orca(reserve="request")
    d.add(*(req(i, 6, 6) for i in range(6)))
    d.run()
    assert d.s.num_preemptions == 0 and len(d.finished) == 6
