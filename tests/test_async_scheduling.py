"""Async scheduling of vLLM V1 (scheduler-semantics.md §1.6, trap 13): step k+1 is scheduled while
step k runs, with placeholders for the tokens not yet sampled."""
from cost_models.unit import UnitCostModel
from simulator.engine.simulation import Simulation
from simulator.results.step_table import StepTable
from simulator.core.request import Request
from tests.sched_helpers import make_scheduler


def run(requests, async_scheduling, **kw):
    s = make_scheduler("vllm_v1", max_num_seqs=4, max_num_batched_tokens=64, block_size=4,
                       async_scheduling=async_scheduling, enable_prefix_caching=False, **kw)
    log = StepTable()
    Simulation(requests, [s], UnitCostModel(fixed_step_time_s=1.0), log).run()
    return s, log.to_columns()


def test_an_arrival_during_step_k_joins_at_k_plus_2():
    # Sync: B arrives at 0.5 (during step 1) and is scheduled at t=1 (step 2), first token t=2.
    # Async: step 2 was scheduled at t=0 already, so B joins step 3: one step more TTFT.
    for async_on, first_token in ((False, 2.0), (True, 3.0)):
        a, b = Request(0, 0.0, 4, 6), Request(1, 0.5, 4, 2)
        run([a, b], async_on)
        assert b.first_token_s == first_token, async_on


def test_decodes_continue_without_a_bubble_and_never_past_max_tokens():
    # One request, prompt 4, 5 outputs: step 1 prefill (token 1), steps 2-5 decode. Async
    # schedules step 2 while step 1 runs (placeholder for token 1) and schedules no step 6.
    for async_on in (False, True):
        r = Request(0, 0.0, 4, 5)
        s, steps = run([r], async_on)
        assert steps["num_tokens"].tolist() == [4, 1, 1, 1, 1]
        assert r.finish_s == 5.0 and r.num_output_tokens == 5
        assert r.num_output_placeholders == 0


def test_a_finished_request_frees_its_seat_one_step_later():
    # max_num_seqs 2: A (2 outputs) and C (10) run, B waits for a seat. Sync: A finishes at t=2,
    # schedule(3) at t=2 admits B, first token at 3. Async: schedule(3) ran at t=1 while step 2
    # was in flight (seat still taken); schedule(4) at t=2 admits B into step 4, token at 4.
    for async_on, first_token in ((False, 3.0), (True, 4.0)):
        a, c, b = Request(0, 0.0, 4, 2), Request(1, 0.0, 4, 10), Request(2, 0.0, 4, 1)
        s = make_scheduler("vllm_v1", max_num_seqs=2, max_num_batched_tokens=64, block_size=4,
                           async_scheduling=async_on, enable_prefix_caching=False)
        Simulation([a, c, b], [s], UnitCostModel(fixed_step_time_s=1.0), StepTable()).run()
        assert (a.finish_s, b.first_token_s) == (2.0, first_token), async_on


def test_with_an_empty_queue_async_adds_no_delay():
    # Nothing else in flight: the next schedule happens after the outputs, exactly as in sync.
    for async_on in (False, True):
        a, b = Request(0, 0.0, 4, 2), Request(1, 0.0, 4, 1)
        s = make_scheduler("vllm_v1", max_num_seqs=1, max_num_batched_tokens=64, block_size=4,
                           async_scheduling=async_on, enable_prefix_caching=False)
        Simulation([a, b], [s], UnitCostModel(fixed_step_time_s=1.0), StepTable()).run()
        assert (a.finish_s, b.first_token_s) == (2.0, 3.0), async_on
