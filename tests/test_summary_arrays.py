"""Request arrays: read exactly or not at all, and once per finished run for summary and files."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simulator.metrics import request_arrays as arrays_module
from simulator.metrics import summarize
from simulator.metrics import summary as summary_module
from simulator.metrics.request_arrays import (COUNTS, TIMES, FinishedRequests,
                                              read_request_arrays, request_arrays)
from simulator.output import write_results
from simulator.core.request import Request, RequestStatus

ROOT = Path(__file__).resolve().parents[1]


def finished(request_id, arrival_s, token_times_s, num_preemptions=0):
    r = Request(request_id, arrival_s, 10 + request_id, len(token_times_s),
                num_preemptions=num_preemptions)
    r.scheduled_s = arrival_s
    for t in token_times_s:
        r.record_token(t)
    r.status, r.finish_s = RequestStatus.FINISHED, token_times_s[-1]
    return r


def standard_output(num_requests=300):
    from simulator.runner import prepare, simulate
    from simulator.scenario import load_scenario
    scenario = load_scenario(ROOT / "bench" / "standard.yaml",
                             [f"workload.num_requests={num_requests}"])
    prepared = prepare(scenario, ["vllm_v1"])
    return simulate(prepared, prepared.runs[0])


def test_arrays_hold_every_attribute_in_order():
    requests = [finished(0, 0.5, [1.0, 1.25, 2.0], num_preemptions=2), finished(1, 0.75, [3.0])]
    arrays = read_request_arrays(requests)
    for name in COUNTS + TIMES:
        assert arrays[name].tolist() == [getattr(r, name) for r in requests], name
        assert arrays[name].dtype == (np.int64 if name in COUNTS else np.float64)


@pytest.mark.parametrize("name, value", [("first_token_s", None), ("arrival_s", 1),
                                         ("num_cached_tokens", np.int64(3)),
                                         ("num_output_tokens", 2**63)])
def test_a_value_arrays_would_not_hold_exactly_gives_none(name, value):
    # An int time would be written "1", not "1.0"; a None has no float; 2**63 is past int64.
    requests = [finished(0, 0.5, [1.0, 1.25]), finished(1, 0.75, [3.0])]
    setattr(requests[1], name, value)
    assert read_request_arrays(requests) is None


def test_a_finished_runs_requests_are_read_once_for_summary_and_files(tmp_path, monkeypatch):
    calls = []
    read = arrays_module.read_request_arrays
    monkeypatch.setattr(arrays_module, "read_request_arrays",
                        lambda requests: calls.append(len(requests)) or read(requests))
    output = standard_output()
    assert isinstance(output.result.requests, FinishedRequests)
    write_results(tmp_path / "run", output.result.requests, output.result.step_log, output.summary)
    assert calls == [300]
    assert request_arrays(list(output.result.requests)) is not None and calls == [300, 300]


def test_summary_with_unfinished_requests_reads_the_finished_ones_exactly(monkeypatch):
    """The completed requests' arrays give the request-by-request figures bit for bit, and the
    preemptions still count the unfinished requests'."""
    requests = list(standard_output().result.requests)
    waiting = Request(len(requests), 1.0, 64, 8, num_preemptions=3)   # preempted, unfinished
    requests.insert(10, waiting)
    kwargs = dict(duration_s=100.0, percentiles=(50, 99), max_concurrency=64, request_rate=20.0)
    assert summary_module._completed(requests)[1] is not None   # the arrays path
    from_arrays = summarize(requests, **kwargs)
    monkeypatch.setattr(summary_module, "request_arrays", lambda requests: None)
    by_request = summarize(requests, **kwargs)
    assert json.dumps(from_arrays, sort_keys=True) == json.dumps(by_request, sort_keys=True)
    assert from_arrays["num_unfinished"] == 1
    assert from_arrays["num_preemptions"] == sum(r.num_preemptions for r in requests)
