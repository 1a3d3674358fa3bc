"""summary.json carries every field `vllm bench serve --save-result` writes (vLLM 0.32.0, as in
tests/data/vllm-cpu), and with --save-detailed its per-request lists, which say what requests.csv
says (results/bench_fields.py)."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from simulator.commands.run import run_scenario_file
from simulator.results import load
from simulator.results.bench_fields import (DATE_FORMAT, DETAILED_FIELDS, EPOCH_DATE, traffic_of,
                                            vllm_field_names)
from simulator.results.files import summary_json
from simulator.workload.arrivals import ConstantArrivals, GammaArrivals, InfArrivals, PoissonArrivals
from simulator.workload.traces import TraceArrivals

ROOT = Path(__file__).resolve().parents[1]
VLLM_RESULT = ROOT / "tests" / "data" / "vllm-cpu" / "run4_c4_n64_in256_out128.json"
# Like that run: 4 closed-loop clients (request rate inf), no goodput, percentiles 50, 90, 99.
CLOSED_LOOP = """\
name: bench-fields
model: llama-2-7b
hardware: a100-80gb
cost_model: {kind: unit, fixed_step_time_s: 0.01}
engine: {num_gpu_blocks: 400, max_model_len: 256}
workload:
  arrival: {kind: inf}
  max_concurrency: 4
  prompt_len: {kind: uniform, low: 8, high: 40}
  output_len: {kind: uniform, low: 1, high: 12}
  num_requests: 12
schedulers: [{preset: vllm_v1, max_num_seqs: 4}, {preset: static, max_num_seqs: 2}]
metrics: {percentiles: [50, 90, 99]}
"""


def json_type(value) -> str:
    return type(value).__name__


@pytest.fixture(scope="module")
def detailed(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("bench")
    (folder / "s.yaml").write_text(CLOSED_LOOP)
    run_scenario_file(folder / "s.yaml", folder / "out", (), plots=False, save_detailed=True)
    return folder / "out"


def test_the_documented_field_list_is_exactly_what_vllm_0_32_saved():
    vllm = json.loads(VLLM_RESULT.read_text())
    assert sorted(vllm_field_names((50, 90, 99), detailed=True)) == sorted(vllm)


def test_summary_json_has_every_vllm_field_with_vllm_types(detailed):
    vllm = json.loads(VLLM_RESULT.read_text())
    ours = json.loads((detailed / "vllm_v1" / "summary.json").read_text())
    assert [k for k in vllm if k not in ours] == []
    differ = {k: (json_type(vllm[k]), json_type(ours[k])) for k in vllm
              if json_type(vllm[k]) != json_type(ours[k])}
    assert differ == {"label": ("NoneType", "str")}   # ours names the scheduler
    assert (ours["request_rate"], ours["burstiness"], ours["max_concurrency"]) == ("inf", 1.0, 4)
    assert (ours["backend"], ours["endpoint_type"], ours["label"]) == ("vllm", "vllm", "vllm_v1")
    assert ours["model_id"] == ours["tokenizer_id"] == "llama-2-7b"
    assert (ours["date"], ours["rtfx"], ours["failed"]) == (EPOCH_DATE, 0.0, 0)


def test_the_per_request_lists_say_what_requests_csv_says(detailed):
    for label in ("vllm_v1", "static"):
        run = load(detailed / label)
        s, r = run.summary, run.requests
        assert s["input_lens"] == r["num_prompt_tokens"].tolist()
        assert s["output_lens"] == r["num_output_tokens"].tolist()
        assert s["start_times"] == r["arrival_s"].tolist()
        np.testing.assert_allclose(np.array(s["ttfts"]) * 1000, r["ttft_ms"], rtol=1e-12)
        np.testing.assert_allclose(np.array(s["latencies"]) * 1000, r["e2el_ms"], rtol=1e-12)
        np.testing.assert_allclose(np.array(s["queue_times"]) * 1000, r["client_queue_ms"], atol=1e-9)
        assert [len(g) for g in s["itls"]] == [max(n - 1, 0) for n in s["output_lens"]]
        assert s["errors"] == s["generated_texts"] == [""] * 12
        assert max(s["queue_times"]) > 0   # 12 requests, 4 clients: most waited for a slot


def test_vllm_arithmetic_on_the_lists_gives_the_summary(detailed):
    s = json.loads((detailed / "vllm_v1" / "summary.json").read_text())
    ttfts, itls = np.array(s["ttfts"]), np.array([g for gaps in s["itls"] for g in gaps])
    assert np.mean(ttfts) * 1000 == pytest.approx(s["mean_ttft_ms"], rel=1e-12)
    assert np.percentile(ttfts, 90) * 1000 == pytest.approx(s["p90_ttft_ms"], rel=1e-12)
    assert np.median(itls) * 1000 == pytest.approx(s["median_itl_ms"], rel=1e-12)
    assert np.mean(s["latencies"]) * 1000 == pytest.approx(s["mean_e2el_ms"], rel=1e-12)


def test_without_save_detailed_the_lists_are_left_out(tmp_path):
    (tmp_path / "s.yaml").write_text(CLOSED_LOOP)
    outputs = run_scenario_file(tmp_path / "s.yaml", tmp_path / "out", (), plots=False)
    written = json.loads((tmp_path / "out" / "static" / "summary.json").read_text())
    assert set(DETAILED_FIELDS).isdisjoint(written)
    assert set(vllm_field_names((50, 90, 99))) <= set(written)
    assert written == json.loads(summary_json(outputs[1].summary))


def test_date_now_writes_the_wall_clock_date_in_vllms_format(tmp_path):
    (tmp_path / "s.yaml").write_text(CLOSED_LOOP)
    run_scenario_file(tmp_path / "s.yaml", tmp_path / "out", (), plots=False, schedulers=("static",),
                      date_now=True)
    date = json.loads((tmp_path / "out" / "static" / "summary.json").read_text())["date"]
    assert abs((datetime.strptime(date, DATE_FORMAT) - datetime.now()).total_seconds()) < 120


@pytest.mark.parametrize("arrival, expected", [
    (PoissonArrivals(rate=2), (2.0, 1.0)),
    (GammaArrivals(rate=3.0, burstiness=0.25), (3.0, 0.25)),
    (ConstantArrivals(rate=5.0), (5.0, math.inf)),    # vLLM's --burstiness inf
    (InfArrivals(), (math.inf, 1.0)),                 # --request-rate inf, burstiness default
    (TraceArrivals(path="t.jsonl"), (None, None)),    # a replay has no configured rate
])
def test_request_rate_and_burstiness_are_vllms_flags_for_each_arrival_kind(arrival, expected):
    assert traffic_of(arrival) == expected


def test_save_detailed_without_kept_gaps_is_a_one_line_error(tmp_path):
    (tmp_path / "s.yaml").write_text(CLOSED_LOOP)
    proc = subprocess.run([sys.executable, "-m", "simulator.cli", "run", str(tmp_path / "s.yaml"),
                           "--no-plots", "-o", str(tmp_path / "out"), "--save-detailed",
                           "--set", "metrics.record_itl_gaps=false"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr == ("error: --save-detailed: needs metrics.record_itl_gaps: true (vLLM's "
                           "itls list every request's inter-token gaps)\n")
    assert not (tmp_path / "out").exists()


def test_servesim_validate_reads_a_detailed_summary_as_a_vllm_bench_file(detailed):
    from simulator.validate.measured import load_vllm_bench
    measured = load_vllm_bench(detailed / "vllm_v1" / "summary.json", engine={})
    r = load(detailed / "vllm_v1").requests
    np.testing.assert_allclose(measured.arrival_s, r["arrival_s"], atol=1e-9)
    np.testing.assert_allclose(measured.ttft_s * 1000, r["ttft_ms"], rtol=1e-12)
    np.testing.assert_allclose(measured.client_arrival_s, r["arrival_s"] - r["client_queue_ms"] / 1000,
                               atol=1e-9)
    assert measured.num_output_tokens.tolist() == r["num_output_tokens"].tolist()
    assert (measured.max_concurrency, measured.request_rate) == (4, math.inf)
