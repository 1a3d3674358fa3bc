"""summarize(): `vllm bench serve` metrics (semantics section 7, traps 14 and 15)."""
from __future__ import annotations

import json
import math
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from simulator.core.request import Request, RequestStatus
from simulator.results import summary as summary_module
from simulator.results.request_table import RequestTable
from simulator.results.step_table import StepTable
from simulator.results.summary import percentile_key


def summarize(requests, step_log=None, **kwargs):
    """The summary of these requests (the unfinished ones counted, not completed)."""
    table = RequestTable.of([r for r in requests if r.finish_s is not None], num_requests=len(requests))
    return summary_module.summarize(table, steps=step_log, **kwargs)

REFERENCE = Path(__file__).resolve().parents[1] / ".." / "shared" / "reference"


def make_request(request_id, arrival_s, prompt, token_times_s, keep_gaps=True):
    r = Request(request_id, arrival_s, prompt, max_output_tokens=len(token_times_s),
                itl_gaps_s=[] if keep_gaps else None)
    for t in token_times_s:
        r.record_token(t)
    r.status, r.finish_s = RequestStatus.FINISHED, token_times_s[-1]
    return r


def three_requests(keep_gaps=True):
    # A: TTFT 1, E2EL 4, TPOT 3/3 = 1, gaps .5 .5 2 | B: TTFT 1, E2EL 2, TPOT 1/2, gaps .5 .5
    # C: one token: TTFT 2, E2EL 2, no TPOT, no gap.
    return [make_request(0, 0.0, 10, [1.0, 1.5, 2.0, 4.0], keep_gaps),
            make_request(1, 1.0, 20, [2.0, 2.5, 3.0], keep_gaps),
            make_request(2, 2.0, 30, [4.0], keep_gaps)]


def approx(x):
    return pytest.approx(x, rel=1e-12, abs=1e-9)


def test_hand_computed_latency_statistics():
    s = summarize(three_requests(), duration_s=4.0)
    # TTFT [1, 1, 2] s; p99 by linear interpolation at rank 0.99 * 2 = 1.98.
    assert s["mean_ttft_ms"] == approx(4000 / 3)
    assert s["median_ttft_ms"] == 1000.0
    assert s["std_ttft_ms"] == approx(1000 * math.sqrt(2 / 9))
    assert s["p99_ttft_ms"] == approx(1980.0)
    # TPOT [1.0, 0.5] s: the 1-token request is excluded (trap 14).
    assert s["mean_tpot_ms"] == 750.0 and s["median_tpot_ms"] == 750.0
    assert s["std_tpot_ms"] == 250.0
    assert s["p99_tpot_ms"] == approx(995.0)
    # ITL pools the gaps [.5, .5, 2, .5, .5]: mean 0.8 != mean TPOT 0.75.
    assert s["mean_itl_ms"] == approx(800.0)
    assert s["median_itl_ms"] == 500.0
    assert s["std_itl_ms"] == approx(600.0)
    assert s["p99_itl_ms"] == approx(1940.0)
    # E2EL [4, 2, 2] s.
    assert s["mean_e2el_ms"] == approx(8000 / 3)
    assert s["median_e2el_ms"] == 2000.0
    assert s["std_e2el_ms"] == approx(1000 * math.sqrt(8 / 9))
    assert s["p99_e2el_ms"] == approx(3960.0)


def test_hand_computed_counts_and_throughputs():
    s = summarize(three_requests(), duration_s=4.0)
    assert (s["completed"], s["failed"], s["num_unfinished"], s["num_prompts"]) == (3, 0, 0, 3)
    assert (s["total_input_tokens"], s["total_output_tokens"]) == (60, 8)
    assert s["duration"] == 4.0
    assert s["request_throughput"] == 0.75
    assert s["output_throughput"] == 2.0
    assert s["total_token_throughput"] == 17.0
    assert s["request_goodput"] is None          # vLLM: None when no SLO is given
    assert s["max_concurrent_requests"] == 3     # all three in flight during [2, 3)
    assert s["max_output_tokens_per_s"] == 3.0   # tokens at 2.0, 2.0, 2.5 share bucket [2, 3)
    assert s["max_itl_ms"] == 2000.0


def test_peak_output_tokens_per_s_of_a_long_sparse_run_needs_no_counter_per_second():
    # Issue 22: rate 1e-9 allocated a counter for every second of the run (52 GiB). Tokens at
    # 1.0 and 1.5 share bucket [1, 2); one ~3 years later is alone in its bucket.
    tracemalloc.start()
    try:
        s = summarize([make_request(0, 0.0, 10, [1.0, 1.5]), make_request(1, 1e8, 10, [1e8 + 1.0])])
        peak_bytes = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert s["max_output_tokens_per_s"] == 2.0
    assert peak_bytes < 10_000_000   # a counter per second would take 800 MB


def test_duration_defaults_to_first_arrival_to_last_finish():
    requests = [make_request(0, 10.0, 10, [11.0, 12.0]), make_request(1, 10.5, 10, [13.5])]
    assert summarize(requests)["duration"] == 13.5 - 10.0


def test_duration_given_includes_arrival_gaps():
    # Trap 15: the main run started at t=0 but the first request arrived later; rates use 8 s.
    s = summarize(three_requests(), duration_s=8.0)
    assert s["request_throughput"] == 3 / 8 and s["output_throughput"] == 1.0


def test_goodput_counts_requests_meeting_every_slo():
    # A fails TPOT (1000 > 600), B passes both, C fails TTFT (2000 > 1500).
    s = summarize(three_requests(), duration_s=4.0, goodput_slos_ms={"ttft": 1500, "tpot": 600})
    assert s["request_goodput"] == 0.25


def test_goodput_slo_boundary_is_inclusive():
    s = summarize(three_requests(), duration_s=4.0, goodput_slos_ms={"ttft": 1000})
    assert s["request_goodput"] == 0.5   # A and B have TTFT exactly 1000 ms


def test_one_token_request_counts_as_tpot_zero_for_goodput():
    # Only C (one token, TPOT taken as 0) meets a 0.1 ms TPOT SLO (trap 14).
    s = summarize(three_requests(), duration_s=4.0,
                  goodput_slos_ms={"tpot": 0.1, "e2el": 2500})
    assert s["request_goodput"] == 0.25
    assert s["mean_tpot_ms"] == 750.0   # ... yet C stays out of the TPOT statistics


def test_itl_without_kept_gaps_gives_exact_mean_std_and_no_quantiles():
    s = summarize(three_requests(keep_gaps=False), duration_s=4.0)
    assert s["mean_itl_ms"] == approx(800.0)
    assert s["std_itl_ms"] == approx(600.0)
    assert s["median_itl_ms"] is None and s["p99_itl_ms"] is None
    assert s["max_output_tokens_per_s"] is None
    assert s["mean_tpot_ms"] == 750.0   # TPOT needs no gaps


def test_several_percentiles_use_vllm_key_names():
    s = summarize(three_requests(), duration_s=4.0, percentiles=(50, 90, 99.9))
    assert s["p50_ttft_ms"] == s["median_ttft_ms"] == 1000.0
    assert s["p90_e2el_ms"] == approx(3600.0)
    assert "p99.9_itl_ms" in s and "p99_itl_ms" not in s
    assert percentile_key("tpot", 99.0) == "p99_tpot_ms"


def test_client_queue_time_reported_under_max_concurrency():
    requests = three_requests()
    for r, queue_s in zip(requests, (0.0, 0.5, 1.0)):
        r.client_queue_s = queue_s
    assert "mean_client_queue_time_ms" not in summarize(requests, duration_s=4.0)
    s = summarize(requests, duration_s=4.0, max_concurrency=2, request_rate=math.inf)
    assert s["max_concurrency"] == 2 and s["request_rate"] == math.inf
    assert s["mean_client_queue_time_ms"] == 500.0 and s["p99_client_queue_time_ms"] == 990.0
    assert "mean_e2el_including_client_queue_ms" not in s   # vLLM: only with a finite rate
    s = summarize(requests, duration_s=4.0, max_concurrency=2, request_rate=1.0)
    assert s["median_e2el_including_client_queue_ms"] == 3000.0   # [4, 2.5, 3] s
    assert s["mean_e2el_ms"] == approx(8000 / 3)                  # queueing stays out of E2EL


def test_unfinished_requests_are_not_completed():
    requests = three_requests() + [Request(9, 0.5, 40, 8)]
    s = summarize(requests, duration_s=4.0)
    assert (s["completed"], s["num_unfinished"], s["total_input_tokens"]) == (3, 1, 60)


def test_empty_request_list_gives_zeros():
    s = summarize([], duration_s=0.0, goodput_slos_ms={"ttft": 100}, step_log=StepTable())
    assert s["completed"] == 0 and s["request_throughput"] == 0.0
    assert s["request_goodput"] == 0.0
    for metric in ("ttft", "tpot", "itl", "e2el"):
        assert s[f"mean_{metric}_ms"] == s[f"p99_{metric}_ms"] == s[f"std_{metric}_ms"] == 0.0
    assert s["max_concurrent_requests"] == 0 and s["num_steps"] == 0
    assert summarize([])["duration"] == 0.0


def test_step_log_fields_are_time_weighted():
    log = StepTable()
    log.append(0.0, 1.0, 2, 1, 1, 300, 299, 1, 4, 0.2, 0)
    log.append(1.0, 4.0, 1, 0, 1, 1, 0, 3, 0, 0.6, 2)
    s = summarize(three_requests(), duration_s=4.0, step_log=log)
    assert s["num_steps"] == 2 and s["total_step_time_s"] == 4.0
    assert s["peak_kv_usage"] == 0.6
    assert s["mean_kv_usage"] == approx((0.2 * 1 + 0.6 * 3) / 4)
    assert s["mean_num_running"] == 2.5 and s["peak_num_running"] == 3
    assert s["mean_num_waiting"] == 1.0 and s["peak_num_waiting"] == 4
    assert s["mean_step_time_ms"] == 2000.0


def test_num_preemptions_sums_requests():
    requests = three_requests()
    requests[0].num_preemptions, requests[2].num_preemptions = 2, 1
    assert summarize(requests, duration_s=4.0)["num_preemptions"] == 3


@pytest.mark.parametrize("kwargs, field", [
    ({"duration_s": -1.0}, "duration_s"),
    ({"duration_s": 0.0}, "duration_s"),
    ({"percentiles": (101,)}, "percentiles"),
    ({"goodput_slos_ms": {"itl": 5}}, "goodput_slos_ms"),
    ({"goodput_slos_ms": {"ttft": 0}}, "goodput_slos_ms.ttft"),
])
def test_bad_arguments_raise_value_error_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        summarize(three_requests(), **kwargs)


def _requests_from_vllm_result(result: dict) -> list[Request]:
    requests = []
    for i, (start, ttft, latency, itls, n_in, n_out) in enumerate(zip(
            result["start_times"], result["ttfts"], result["latencies"], result["itls"],
            result["input_lens"], result["output_lens"])):
        r = Request(i, start, n_in, n_out, status=RequestStatus.FINISHED,
                    num_output_tokens=n_out, first_token_s=start + ttft,
                    last_token_s=start + latency, finish_s=start + latency,
                    itl_gaps_s=list(itls),
                    itl_sq_sum_s2=sum(g * g for g in itls), max_itl_s=max(itls, default=0.0))
        requests.append(r)
    return requests


def test_reproduces_a_real_vllm_bench_serve_result_from_its_own_lists():
    path = REFERENCE / "vllm-cpu" / "run2_c4_n64_in256_out128.json"
    if not path.exists():
        pytest.skip(f"reference data absent: {path}")
    real = json.loads(path.read_text())
    s = summarize(_requests_from_vllm_result(real), duration_s=real["duration"],
                  percentiles=(50, 90, 99))
    for key in ("completed", "total_input_tokens", "total_output_tokens"):
        assert s[key] == real[key]
    for key in ("request_throughput", "output_throughput", "total_token_throughput",
                *(f"{stat}_{m}_ms" for stat in ("mean", "median", "std", "p50", "p90", "p99")
                  for m in ("ttft", "tpot", "itl", "e2el"))):
        # Times are rebuilt as start + ttft and start + latency: equal up to rounding.
        assert s[key] == pytest.approx(real[key], rel=1e-12), key
    assert s["max_output_tokens_per_s"] == real["max_output_tokens_per_s"]
    # This run's vLLM counted max_concurrent_requests per 1-s bucket (8 at concurrency 4); we
    # report the exact in-flight peak, as newer vLLM does: never above the concurrency limit.
    assert s["max_concurrent_requests"] == real["max_concurrency"] == 4
    # The sums alone reproduce pooled mean and std of ITL.
    for r in (reqs := _requests_from_vllm_result(real)):
        r.itl_gaps_s = None
    s_sums = summarize(reqs, duration_s=real["duration"])
    assert s_sums["mean_itl_ms"] == pytest.approx(real["mean_itl_ms"], rel=1e-9)
    assert s_sums["std_itl_ms"] == pytest.approx(real["std_itl_ms"], rel=1e-9)
    assert np.isclose(s_sums["mean_tpot_ms"], real["mean_tpot_ms"], rtol=1e-9)
