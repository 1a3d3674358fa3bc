"""Trace files, the WorkloadTrace table, and generate_workload (determinism, spec checks)."""
from pathlib import Path

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError

from simulator.core.request import Request
from simulator.runner import make_requests
from simulator.workload import (ConstantArrivals, FixedLength, InfArrivals, PoissonArrivals,
                                PriorityChoice, TraceArrivals, UniformLength, VllmRandomLengths,
                                WorkloadSpec, WorkloadTrace, generate_workload)

REFERENCE = Path(__file__).resolve().parents[1] / ".." / "shared" / "reference"
SHAREGPT = REFERENCE / "llmservingsim" / "workloads" / "sharegpt-llama-3.1-8b-300-sps10.jsonl"


def write_csv(tmp_path, header, rows, name="trace.csv"):
    path = tmp_path / name
    path.write_text(",".join(header) + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return str(path)


def spec(**overrides):
    base = dict(arrival=PoissonArrivals(2.0), prompt_len=UniformLength(10, 100),
                output_len=UniformLength(1, 50), num_requests=500)
    return WorkloadSpec(**{**base, **overrides})


# --- trace files ---

@pytest.fixture
def sharegpt():
    if not SHAREGPT.exists():
        pytest.skip(f"reference workload not found at {SHAREGPT} (the shared/reference folder is absent)")
    return str(SHAREGPT)


def test_llmservingsim_jsonl_workload_loads_with_its_first_row(sharegpt):
    trace = TraceArrivals(sharegpt).load()
    assert len(trace) == 300
    assert trace.arrival_s[0] == 46926808 * 1e-9
    assert trace.num_prompt_tokens[0] == 2358 and trace.max_output_tokens[0] == 531
    assert len(trace.prompt_token_ids[0]) == 2358 and trace.prompt_token_ids[0][:3] == (5971, 2927, 220)
    assert trace.arrival_s[-1] == pytest.approx(29.183763203)  # "about 10 requests per second over 29 s"


def test_trace_time_scale_and_start_at_zero(sharegpt):
    base = TraceArrivals(sharegpt).load().arrival_s
    scaled = TraceArrivals(sharegpt, time_scale=0.5, start_at_zero=True).load().arrival_s
    np.testing.assert_allclose(scaled, (base - base[0]) * 0.5)
    assert scaled[0] == 0.0


@pytest.mark.parametrize("arrival_col, factor",
                         [("arrival_s", 1.0), ("arrived_at", 1.0), ("arrival_time_ns", 1e-9)])
def test_csv_accepts_each_arrival_column_name(tmp_path, arrival_col, factor):
    path = write_csv(tmp_path, [arrival_col, "prompt_len", "output_len"], [[0, 5, 6], [2, 7, 8]])
    trace = TraceArrivals(path).load()
    np.testing.assert_array_equal(trace.arrival_s, [0.0, 2 * factor])


@pytest.mark.parametrize("prompt_col",
                         ["input_toks", "num_prompt_tokens", "prompt", "num_prefill_tokens", "prompt_len"])
@pytest.mark.parametrize("output_col",
                         ["output_toks", "num_output_tokens", "output", "num_decode_tokens", "output_len"])
def test_csv_accepts_each_length_column_name(tmp_path, prompt_col, output_col):
    path = write_csv(tmp_path, ["arrived_at", prompt_col, output_col], [[0.5, 5, 6], [1.5, 7.0, 8]])
    trace = TraceArrivals(path).load()
    assert trace.num_prompt_tokens.tolist() == [5, 7] and trace.max_output_tokens.tolist() == [6, 8]
    assert trace.prompt_token_ids is None and trace.priority is None


def test_out_of_order_rows_are_sorted_stably(tmp_path):
    path = write_csv(tmp_path, ["arrival_s", "prompt_len", "output_len", "priority"],
                     [[2.0, 1, 1, 0], [1.0, 2, 1, 0], [2.0, 3, 1, 5], [1.0, 4, 1, 0]])
    trace = TraceArrivals(path).load()
    assert trace.arrival_s.tolist() == [1.0, 1.0, 2.0, 2.0]
    assert trace.num_prompt_tokens.tolist() == [2, 4, 1, 3]  # ties keep file order
    assert trace.priority.tolist() == [0, 0, 0, 5]


def test_jsonl_token_ids_are_kept_and_checked(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"input_toks": 2, "output_toks": 1, "arrival_time_ns": 5, "input_tok_ids": [7, 8]}\n')
    assert TraceArrivals(str(path)).load().prompt_token_ids == ((7, 8),)
    path.write_text('{"input_toks": 3, "output_toks": 1, "arrival_time_ns": 5, "input_tok_ids": [7, 8]}\n')
    with pytest.raises(ValueError, match=r"t\.jsonl:1.*input_tok_ids.*2 ids.*3 tokens"):
        TraceArrivals(str(path)).load()


def test_trace_errors_name_the_file_the_column_and_the_accepted_names(tmp_path):
    with pytest.raises(ValueError, match=r"TraceArrivals\.path.*missing\.csv.*does not exist"):
        TraceArrivals(str(tmp_path / "missing.csv")).load()
    path = write_csv(tmp_path, ["arrival_s", "tokens", "output_len"], [[0, 5, 6]])
    accepted = "input_toks, num_prompt_tokens, prompt, num_prefill_tokens, prompt_len"
    message = rf"trace\.csv has no prompt length column; accepted names: {accepted}"
    with pytest.raises(ValueError, match=message):
        TraceArrivals(path).load()
    path = write_csv(tmp_path, ["arrival_s", "prompt_len", "output_len"], [[0, 5, 6], [1, -5, 6]], "neg.csv")
    with pytest.raises(ValueError, match=r"neg\.csv:3 column prompt_len.*'-5'.*>= 1"):
        TraceArrivals(path).load()
    path = write_csv(tmp_path, ["arrival_s", "prompt_len", "output_len"], [["soon", 5, 6]], "nan.csv")
    with pytest.raises(ValueError, match=r"nan\.csv:2: column arrival_s value 'soon' is not a number"):
        TraceArrivals(path).load()
    with pytest.raises(ValueError, match=r"TraceArrivals\.path.*\.jsonl or \.csv"):
        TraceArrivals("trace.parquet")
    with pytest.raises(ValueError, match=r"TraceArrivals\.time_scale"):
        TraceArrivals("t.csv", time_scale=0.0)


@pytest.mark.parametrize("name, text, message", [
    # Issue 22: each of these raised a traceback or was read silently wrong.
    ("big.csv", "arrival_s,prompt_len,output_len\n0,99999999999999999999,6\n",
     r"big\.csv:2 column prompt_len: '99999999999999999999' is not allowed; a token count must "
     r"be an integer >= 1 and <= 9223372036854775807"),
    ("prio.csv", "arrival_s,prompt_len,output_len,priority\n0,5,6,99999999999999999999\n",
     r"prio\.csv:2: column priority value '99999999999999999999' is not allowed; must fit int64"),
    ("dup.csv", "arrival_s,prompt_len,prompt_len,output_len\n0,5,500,6\n",
     r"dup\.csv: column 'prompt_len' appears twice in the header; name each column once"),
    ("ns.csv", "arrival_s,prompt_len,output_len\n1.7e17,5,6\n",
     r"ns\.csv:2: column arrival_s value 1\.7e\+17 s is not allowed; float times resolve only 32 s "
     r"there: must be <= 8\.58993e\+09 s"),
    ("list.jsonl", '{"input_toks": 2, "output_toks": 1, "arrival_time_ns": 5}\n[1, 2]\n',
     r"list\.jsonl:2 is not a JSON object \(one request per line"),
    ("int.jsonl", '{"input_toks": 2, "output_toks": 1, "arrival_time_ns": 5, "input_tok_ids": 7}\n',
     r"int\.jsonl:1: column input_tok_ids is not a list of token ids"),
    ("float.jsonl", '{"input_toks": 2, "output_toks": 1, "arrival_time_ns": 5, "input_tok_ids": [7, 8.9]}\n',
     r"float\.jsonl:1: column input_tok_ids holds 8\.9; a token id is an integer from 0 to "),
    ("null.jsonl", '{"input_toks": 2, "output_toks": 1, "arrival_time_ns": 5, "input_tok_ids": [7, null]}\n',
     r"null\.jsonl:1: column input_tok_ids holds None; a token id is an integer"),
    ("huge.jsonl", '{"input_toks": 1, "output_toks": 1, "arrival_time_ns": 5, "input_tok_ids": [%d]}\n' % 2 ** 64,
     r"huge\.jsonl:1: column input_tok_ids holds 18446744073709551616; a token id is an integer"),
])
def test_bad_trace_files_are_refused_in_one_line(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        TraceArrivals(str(path)).load()


def test_a_trace_that_is_not_utf8_names_the_file(tmp_path):
    path = tmp_path / "latin.csv"
    path.write_bytes("arrival_s,prompt_len,output_len\n0,5,6\n# caf\xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin\.csv:3 is not UTF-8 text; save the file as UTF-8"):
        TraceArrivals(str(path)).load()


# --- WorkloadTrace ---

def test_workload_trace_is_read_only_and_slices():
    token_ids = ((1,) * 3, (2,) * 4, (3,) * 5)
    trace = WorkloadTrace([0.0, 1.0, 2.0], [3, 4, 5], [6, 7, 8], token_ids, max_concurrency=2)
    with pytest.raises(ValueError):
        trace.arrival_s[0] = 9.0
    head = trace.head(2)
    assert len(head) == 2 and head.num_prompt_tokens.tolist() == [3, 4]
    assert head.prompt_token_ids == token_ids[:2]
    assert head.max_concurrency == 2 and len(trace.slice(1, None)) == 2 and len(trace.until(1.0)) == 2


def test_workload_trace_becomes_requests():
    requests = make_requests(WorkloadTrace([0.5], [3], [6], priority=[2]))
    assert len(requests) == 1 and isinstance(requests[0], Request)
    r = requests[0]
    fields = (r.request_id, r.arrival_s, r.num_prompt_tokens, r.max_output_tokens, r.priority)
    assert fields == (0, 0.5, 3, 6, 2) and r.prompt_token_ids is None


@pytest.mark.parametrize("arrival, prompt, output, message", [
    ([1.0, 0.0], [1, 1], [1, 1], "arrival_s.*sorted"),
    ([0.0], [0], [1], "num_prompt_tokens"),
    ([0.0], [1], [1, 2], "max_output_tokens"),
])
def test_workload_trace_rejects_bad_columns(arrival, prompt, output, message):
    with pytest.raises(ValueError, match=message):
        WorkloadTrace(arrival, prompt, output)


def test_fingerprint_covers_every_column():
    base = WorkloadTrace([0.0, 1.0], [3, 4], [5, 6])
    assert base.fingerprint() == WorkloadTrace([0.0, 1.0], [3, 4], [5, 6]).fingerprint()
    others = [WorkloadTrace([0.0, 1.5], [3, 4], [5, 6]), WorkloadTrace([0.0, 1.0], [3, 5], [5, 6]),
              WorkloadTrace([0.0, 1.0], [3, 4], [5, 7]),
              WorkloadTrace([0.0, 1.0], [3, 4], [5, 6], max_concurrency=4),
              WorkloadTrace([0.0, 1.0], [3, 4], [5, 6], priority=[0, 0]),
              WorkloadTrace([0.0, 1.0], [3, 4], [5, 6], ((1, 2, 3), (4, 5, 6, 7)))]
    assert len({t.fingerprint() for t in others} | {base.fingerprint()}) == 1 + len(others)


# --- generate_workload ---

def test_same_seed_gives_the_same_bytes_and_another_seed_does_not():
    first = generate_workload(spec(), np.random.default_rng(42))
    again = generate_workload(spec(), np.random.default_rng(42))
    other = generate_workload(spec(), np.random.default_rng(43))
    assert first.fingerprint() == again.fingerprint() != other.fingerprint()


def test_lengths_are_drawn_before_arrivals_so_a_rate_sweep_keeps_them():
    slow = generate_workload(spec(arrival=PoissonArrivals(1.0)), np.random.default_rng(0))
    fast = generate_workload(spec(arrival=PoissonArrivals(8.0)), np.random.default_rng(0))
    np.testing.assert_array_equal(slow.num_prompt_tokens, fast.num_prompt_tokens)
    np.testing.assert_allclose(slow.arrival_s, fast.arrival_s * 8.0)  # same standardised gaps


def test_vllm_random_workload_matches_vllms_own_length_stream():
    lengths = VllmRandomLengths(1024, 128, 0.5)
    workload = generate_workload(spec(prompt_len=None, output_len=None, lengths=lengths, num_requests=100),
                                 np.random.default_rng(0))
    np.testing.assert_array_equal(workload.num_prompt_tokens,
                                  np.random.default_rng(0).integers(512, 1537, size=100))


def test_duration_workload_and_closed_loop_fields():
    workload = generate_workload(spec(arrival=ConstantArrivals(4.0), num_requests=None, duration_s=2.0,
                                      max_concurrency=3), np.random.default_rng(0))
    assert len(workload) == 8 and workload.arrival_s[-1] == 2.0 and workload.max_concurrency == 3
    closed = generate_workload(spec(arrival=InfArrivals(), num_requests=10, max_concurrency=4),
                               np.random.default_rng(0))
    assert closed.arrival_s.tolist() == [0.0] * 10 and closed.max_concurrency == 4


def test_priorities_are_drawn_last_from_the_choices():
    priority = PriorityChoice((0, 5), (1.0, 3.0))
    with_priority = generate_workload(spec(priority=priority), np.random.default_rng(0))
    without = generate_workload(spec(), np.random.default_rng(0))
    np.testing.assert_array_equal(with_priority.arrival_s, without.arrival_s)
    assert set(with_priority.priority.tolist()) == {0, 5} and without.priority is None


def test_a_million_requests_generate_quickly():
    import time
    start = time.perf_counter()
    million = spec(lengths=VllmRandomLengths(range_ratio=0.5), prompt_len=None, output_len=None,
                   num_requests=1_000_000)
    workload = generate_workload(million, np.random.default_rng(0))
    assert len(workload) == 1_000_000 and time.perf_counter() - start < 2.0  # typically ~0.1 s


def test_trace_workload_head_window_and_whole(sharegpt):
    arrival = TraceArrivals(sharegpt)
    assert len(generate_workload(WorkloadSpec(arrival), np.random.default_rng(0))) == 300
    assert len(generate_workload(WorkloadSpec(arrival, num_requests=10), np.random.default_rng(0))) == 10
    window = generate_workload(WorkloadSpec(arrival, duration_s=5.0), np.random.default_rng(0))
    assert window.arrival_s[-1] <= 5.0 and 20 < len(window) < 100
    with pytest.raises(ValueError, match=r"num_requests: 301 is more than the 300"):
        generate_workload(WorkloadSpec(arrival, num_requests=301), np.random.default_rng(0))


@pytest.mark.parametrize("overrides, field", [
    (dict(duration_s=10.0), "num_requests/duration_s: both"),
    (dict(num_requests=None), "num_requests/duration_s: neither"),
    (dict(output_len=None), r"WorkloadSpec\.output_len: missing"),
    (dict(lengths=VllmRandomLengths()), r"WorkloadSpec\.lengths: not allowed together with prompt_len"),
    (dict(arrival=InfArrivals(), num_requests=None, duration_s=5.0), r"WorkloadSpec\.duration_s.*'inf'"),
    (dict(arrival=TraceArrivals("t.csv")), r"WorkloadSpec\.prompt_len: not allowed with arrival kind 'trace"),
    (dict(max_concurrency=0), r"WorkloadSpec\.max_concurrency"),
    (dict(num_requests=0), r"WorkloadSpec\.num_requests"),
    (dict(prompt_len=VllmRandomLengths()), r"WorkloadSpec\.prompt_len.*fixed, uniform"),
])
def test_bad_specs_name_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        spec(**overrides)


def test_bad_priority_choices_name_the_field():
    with pytest.raises(ValueError, match=r"PriorityChoice\.values"):
        PriorityChoice(())
    with pytest.raises(ValueError, match=r"PriorityChoice\.weights"):
        PriorityChoice((0, 1), (1.0,))


def test_config_layer_builds_the_design_doc_workload():
    adapter = TypeAdapter(WorkloadSpec)
    parsed = adapter.validate_python({
        "arrival": {"kind": "poisson", "rate": 4.0},
        "prompt_len": {"kind": "uniform", "low": 256, "high": 768},
        "output_len": {"kind": "lognormal", "median": 200, "sigma": 0.8, "max": 2048},
        "num_requests": 2000})
    assert len(generate_workload(parsed, np.random.default_rng(0))) == 2000
    with pytest.raises(ValidationError, match="num_request"):
        adapter.validate_python({"arrival": {"kind": "inf"}, "lengths": {}, "num_request": 5})
    assert "WorkloadSpec" in str(adapter.json_schema())


def test_a_spec_built_in_code_refuses_a_value_of_the_wrong_kind():
    with pytest.raises(ValueError, match=r"^WorkloadSpec\.arrival: FixedLength\(kind='fixed', value=8\) "
                                         r"is not allowed; kind must be one of poisson, gamma, constant, "
                                         r"inf, trace$"):
        WorkloadSpec(arrival=FixedLength(8), prompt_len=FixedLength(8), output_len=FixedLength(8),
                     num_requests=1)
    with pytest.raises(ValueError, match=r"^WorkloadSpec\.output_len: PoissonArrivals\(.*\) is not "
                                         r"allowed; kind must be one of fixed, uniform, lognormal, "
                                         r"empirical, sharegpt$"):
        WorkloadSpec(arrival=PoissonArrivals(1.0), prompt_len=FixedLength(8),
                     output_len=PoissonArrivals(1.0), num_requests=1)


def test_a_trace_spec_is_told_by_its_kind():
    assert WorkloadSpec(arrival=TraceArrivals("t.csv")).is_trace
    assert not WorkloadSpec(arrival=PoissonArrivals(1.0), prompt_len=FixedLength(8),
                            output_len=FixedLength(8), num_requests=1).is_trace
