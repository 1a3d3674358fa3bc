"""Requests are made as the arrival process reaches them and let go once finished: memory follows
the requests in flight, not the requests done."""
from __future__ import annotations

from pathlib import Path

import simulator.runner.execution as runner
from simulator.core.request import Request
from simulator.runner import iter_requests, make_requests, prepare, simulate
from simulator.scenario import load_scenario

STANDARD = Path(__file__).resolve().parents[1] / "bench" / "standard.yaml"


def test_requests_are_the_trace_with_their_own_gap_lists():
    prepared = prepare(load_scenario(STANDARD, ["workload.num_requests=200"]), ["vllm_v1"])
    trace = prepared.trace
    requests = make_requests(trace, keep_itl_gaps=True)
    assert [r.request_id for r in requests] == list(range(200))
    assert [r.arrival_s for r in requests] == trace.arrival_s.tolist()
    assert [r.num_prompt_tokens for r in requests] == trace.num_prompt_tokens.tolist()
    assert len({id(r.itl_gaps_s) for r in requests}) == 200 and requests[0].itl_gaps_s == []
    assert all(type(r.arrival_s) is float for r in iter_requests(trace))


def test_only_the_requests_in_flight_and_a_chunk_are_alive(monkeypatch):
    prepared = prepare(load_scenario(STANDARD, ["workload.num_requests=3000"]), ["vllm_v1"])
    monkeypatch.setattr(runner, "_REQUEST_CHUNK", 16)
    made, finished, peak = [0], [0], [0]
    original_init = Request.__init__

    def counting_init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        made[0] += 1
        peak[0] = max(peak[0], made[0] - finished[0])

    original_record = runner.RequestTable.record

    def counting_record(self, requests):
        finished[0] += len(requests)
        original_record(self, requests)

    monkeypatch.setattr(Request, "__init__", counting_init)
    monkeypatch.setattr(runner.RequestTable, "record", counting_record)
    out = simulate(prepared, prepared.runs[0])
    assert made[0] == finished[0] == 3000
    assert peak[0] <= out.summary["peak_num_running"] + out.summary["peak_num_waiting"] + 16 + 1
