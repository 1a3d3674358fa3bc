"""The event loop: arrivals, closed-loop clients, replicas (design §3)."""
import pytest

from simulator.runner import prepare, simulate
from simulator.scenario import validate_scenario


def scenario(arrival, n=8, prompt=4, output=3, engine=None, sched=None, concurrency=None):
    workload = {"arrival": arrival, "prompt_len": {"kind": "fixed", "value": prompt},
                "output_len": {"kind": "fixed", "value": output}, "num_requests": n}
    if concurrency:
        workload["max_concurrency"] = concurrency
    return validate_scenario({
        "name": "engine", "model": "llama-2-7b", "hardware": "a100-80gb",
        "cost_model": {"kind": "unit", "fixed_step_time_s": 1.0},
        "engine": {"num_gpu_blocks": 1000, "max_model_len": 64, **(engine or {})},
        "workload": workload,
        "schedulers": [sched or {"preset": "vllm_v1", "max_num_seqs": 4, "max_num_batched_tokens": 64}]})


def run(sc):
    prepared = prepare(sc)
    return simulate(prepared, prepared.runs[0])


def test_closed_loop_of_one_client_serves_back_to_back():
    # vLLM bench --max-concurrency 1 with rate inf: the next request is sent when one completes;
    # the wait is client-side queueing, not TTFT (rule 7, trap 15).
    out = run(scenario({"kind": "inf"}, n=4, output=3, concurrency=1))
    reqs = sorted(out.requests.rows(), key=lambda r: r.request_id)
    for prev, nxt in zip(reqs, reqs[1:]):
        assert nxt.arrival_s == prev.finish_s
    assert [r.finish_s - r.arrival_s for r in reqs] == [3.0] * 4      # prefill step + 2 decodes
    assert [r.client_queue_s for r in reqs] == [0.0, 3.0, 6.0, 9.0]
    assert out.summary["mean_ttft_ms"] == 1000.0


def test_closed_loop_caps_requests_in_flight():
    out = run(scenario({"kind": "inf"}, n=12, concurrency=3))
    events = sorted([(r.arrival_s, 1) for r in out.requests.rows()] +
                    [(r.finish_s, -1) for r in out.requests.rows()])
    in_flight = peak = 0
    for _, delta in events:
        in_flight += delta
        peak = max(peak, in_flight)
    assert peak == 3


def test_arrivals_during_a_step_join_the_next_step():
    # Rule 1.2: schedule() runs at step boundaries; an arrival mid-step waits for the boundary.
    out = run(scenario({"kind": "constant", "rate": 2.0, "timing": "older"}, n=2, output=2))
    first, second = sorted(out.requests.rows(), key=lambda r: r.request_id)
    assert second.arrival_s == 0.5 and second.scheduled_s == 1.0
    assert second.first_token_s == 2.0


def test_two_replicas_serve_twice_as_fast_round_robin():
    one = run(scenario({"kind": "inf"}, n=16, output=8,
                       sched={"preset": "vllm_v1", "max_num_seqs": 2, "max_num_batched_tokens": 64}))
    two = run(scenario({"kind": "inf"}, n=16, output=8, engine={"num_replicas": 2},
                       sched={"preset": "vllm_v1", "max_num_seqs": 2, "max_num_batched_tokens": 64}))
    assert two.result.duration_s == pytest.approx(one.result.duration_s / 2)


def test_an_error_raised_after_the_last_finish_is_not_lost():
    # The serve loop logs a decode run after telling the engine of its finishes: an error there
    # (a result writer that failed, say) must reach the caller even though every request is done.
    from simulator.engine.simulation import Simulation
    from simulator.results.step_table import StepTable
    from simulator.runner import make_requests

    class FailingLog(StepTable):
        def extend_decode_steps(self, *args, **kwargs):
            raise OSError("the step log could not be stored")

    prepared = prepare(scenario({"kind": "inf"}, n=2, output=12))
    run_ = prepared.runs[0]
    scheduler = run_.scheduler_cls(run_.options, run_.scheduler_cls.make_kv_cache(
        run_.options, run_.num_gpu_blocks, 16), run_.context)
    sim = Simulation(make_requests(prepared.trace), [scheduler], prepared.cost_model, FailingLog())
    with pytest.raises(OSError, match="could not be stored"):
        sim.run()
    assert sim.num_finished == 2   # raised after the last finish, not before


@pytest.mark.parametrize("fast_path", [True, False])
def test_a_run_with_requests_left_and_nothing_to_happen_stops_with_a_diagnosis(fast_path):
    # A scheduler that loses the requests it is given: the serve loop idles with no arrival left,
    # and the run stops instead of spinning.
    from simulator.engine.simulation import Simulation
    from simulator.results.step_table import StepTable
    from simulator.engine.progress import NoProgressError
    from simulator.runner import make_requests

    prepared = prepare(scenario({"kind": "inf"}, n=3))
    run_ = prepared.runs[0]

    class Forgetful(run_.scheduler_cls):
        def add(self, request):
            pass

    scheduler = Forgetful(run_.options, run_.scheduler_cls.make_kv_cache(
        run_.options, run_.num_gpu_blocks, 16), run_.context)
    sim = Simulation(make_requests(prepared.trace), [scheduler], prepared.cost_model, StepTable(),
                     fast_path=fast_path)
    with pytest.raises(NoProgressError, match="stopped with 3 unfinished requests and no pending event"):
        sim.run()
