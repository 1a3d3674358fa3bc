"""make_requests and simulate: the requests are built and run outside the cycle collector's
passes, and the collector is left as it was found."""
from __future__ import annotations

import gc
from pathlib import Path

import pytest

from simulator.runner import make_requests, prepare, simulate
from simulator.scenario import load_scenario

STANDARD = Path(__file__).resolve().parents[1] / "bench" / "standard.yaml"


@pytest.fixture
def prepared():
    return prepare(load_scenario(STANDARD, ["workload.num_requests=200"]), ["vllm_v1"])


@pytest.fixture
def collector_restored():
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    (gc.enable if enabled else gc.disable)()


@pytest.mark.parametrize("enabled", [True, False])
def test_simulate_leaves_the_collector_as_it_found_it(prepared, collector_restored, enabled):
    (gc.enable if enabled else gc.disable)()
    assert gc.get_freeze_count() == 0
    output = simulate(prepared, prepared.runs[0])
    assert output.summary["completed"] == 200
    assert gc.isenabled() is enabled and gc.get_freeze_count() == 0


def test_frozen_requests_are_the_trace_with_their_own_gap_lists(prepared, collector_restored):
    trace = prepared.trace
    requests = make_requests(trace, keep_itl_gaps=True, freeze=True)
    assert gc.get_freeze_count() > 0 and gc.isenabled()
    assert [r.request_id for r in requests] == list(range(len(trace)))
    assert [r.arrival_s for r in requests] == trace.arrival_s.tolist()
    assert [r.num_prompt_tokens for r in requests] == trace.num_prompt_tokens.tolist()
    assert all(r.itl_gaps_s == [] for r in requests)
    assert len({id(r.itl_gaps_s) for r in requests}) == len(requests)   # one list each
    assert all(r.itl_gaps_s is None for r in make_requests(trace))
