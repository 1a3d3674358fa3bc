"""Capacity at steady state (issue 19, point 1): achieved against offered rate, the waiting
queue's growth, and a capacity answer that does not depend on the run's length."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.results.steady_state import SteadyState, steady_state
from simulator.runner import prepare, simulate
from simulator.scenario import validate_scenario
from simulator.sweep.capacity import CapacitySearch, find_capacity

SLOS = {"p99_ttft_ms": 1000.0}


def fifo_server(rate: float, service_s: float, n: int):
    """Arrivals every 1/rate s to one FIFO server of fixed service time: (arrival, admitted,
    finished) times, worked out exactly."""
    arrival = np.arange(n) / rate
    admitted = np.empty(n)
    free_s = 0.0
    for i, a in enumerate(arrival):
        admitted[i] = max(a, free_s)
        free_s = admitted[i] + service_s
    return arrival, admitted, admitted + service_s


def test_a_server_faster_than_its_arrivals_is_steady():
    s = steady_state(*fifo_server(10.0, 0.05, 1000))
    assert s.steady and s.queue_growth_per_s == pytest.approx(0.0, abs=1e-9)
    # Window (49.95, 99.9]: arrivals 500 to 999 in it; finishes of arrivals 500 to 998.
    assert (s.offered_rate, s.achieved_rate) == (500 / 49.95, 499 / 49.95)


def test_an_overloaded_server_is_not_steady_and_its_queue_grows_at_the_excess_rate():
    s = steady_state(*fifo_server(10.0, 0.2, 1000))      # serves 5 a second, 10 arrive
    assert not s.steady
    assert s.achieved_rate == pytest.approx(5.0, rel=0.01)
    assert s.queue_growth_per_s == pytest.approx(10.0 - 5.0, rel=0.02)


def test_a_window_too_narrow_to_square_still_gives_the_queue_growth():
    # The overloaded server 1e300 times faster (a fuzzed rate of 1e300 req/s): times near 1e-298 s
    # square to 0, which broke a least-squares fit in seconds; the growth scales by 1e300.
    s = steady_state(*(times * 1e-300 for times in fifo_server(10.0, 0.2, 1000)))
    assert not s.steady
    assert s.queue_growth_per_s == pytest.approx((10.0 - 5.0) * 1e300, rel=0.02)


def test_all_arrivals_at_once_have_no_window_and_count_as_steady():
    assert steady_state(np.zeros(5), np.zeros(5), np.ones(5)) == SteadyState(None, None, 0.0, True)


def raw(num_requests: int, rate: float = 10.0) -> dict:
    """vLLM V1 with 8 seats, each request holding one for 32 steps of 10 ms: about 25 req/s."""
    return {"name": "steady", "model": "llama-2-7b", "hardware": "a100-80gb",
            "cost_model": {"kind": "unit", "fixed_step_time_s": 0.01},
            "engine": {"num_gpu_blocks": 4000, "max_model_len": 256},
            "workload": {"arrival": {"kind": "poisson", "rate": rate},
                         "prompt_len": {"kind": "fixed", "value": 16},
                         "output_len": {"kind": "fixed", "value": 32},
                         "num_requests": num_requests},
            "schedulers": [{"preset": "vllm_v1", "max_num_seqs": 8}],
            "metrics": {"record_itl_gaps": False}}


def capacity(num_requests: int) -> float:
    return find_capacity(raw(num_requests), None, 0, 0, SLOS, CapacitySearch(rel_tol=0.02)).capacity


def test_capacity_is_the_same_from_short_and_long_runs(monkeypatch):
    # Issue 19: 120 req/s from 1k requests, 57 from 30k. The seats bound the rate at 8 / 0.32 s.
    short, long = capacity(200), capacity(1600)
    assert short == pytest.approx(long, rel=0.05)
    assert long <= 8 / 0.32
    prepared = prepare(validate_scenario(raw(1600, rate=long)))
    summary = simulate(prepared, prepared.runs[0]).summary
    assert summary["steady_state"] and summary["achieved_request_rate"] == pytest.approx(
        summary["offered_request_rate"], rel=0.05)
    # Without the steady-state test the short run's answer is the transient's.
    import simulator.runner.execution as runner
    monkeypatch.setattr(runner, "steady_state", lambda *a, **k: SteadyState(None, None, 0.0, True))
    assert capacity(200) > 1.1 * long
