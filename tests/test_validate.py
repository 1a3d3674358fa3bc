"""`servesim validate`: loading measured vLLM runs, cutting one run out of an iteration log,
rebuilding the scenario from the recorded engine arguments, the comparison table (semantics §7
definitions on both sides) and the command end to end on the real runs in ../shared/reference.

The end-to-end tests print the table's errors but do not bound them: fidelity is tuned elsewhere.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from simulator.cli import main
from simulator.results.step_table import StepTable
from simulator.results.timeseries import EngineSeries
from simulator.runner import prepare
from simulator.scenario import validate_scenario
from simulator.validate.client_time import client_round_trip, prefill_steps
from simulator.validate.compare import RunLatencies, compare, figures
from simulator.validate.iteration_log import (bench_date_s, log_time_s, read_iteration_log, run_steps,
                                              unlogged_step_time_s)
from simulator.validate.measured import load_llmservingsim_run, load_vllm_bench, with_prompts
from simulator.validate.plots import resample_steps
from simulator.validate.rebuild import (RebuildOptions, rebuild_scenario, resolve_arrivals,
                                        resolve_async_scheduling, resolve_hardware, write_trace)
from simulator.validate.record import read_engine_record

REFERENCE = Path(__file__).resolve().parents[1] / ".." / "shared" / "reference"
RTX_RUN = REFERENCE / "llmservingsim" / "vllm-runs" / "RTXPRO6000-Llama-3.1-8B"
CPU = REFERENCE / "vllm-cpu"
OUR_DATA = Path(__file__).resolve().parent / "data" / "vllm-cpu"
CLOSED_LOOP_LOG = CPU / "run2_closed_loop_iterations.csv"
CPU_ENGINE_ARGS = OUR_DATA / "engine_args.json"   # what ../shared/tools/vllm-cpu serves with
BENCH_FILES = ("run2_c1_n32_in256_out128", "run2_c4_n64_in256_out128", "run2_c16_n64_in256_out128",
               "run2_c32_n48_r0.5_in256_out128")
needs_reference = pytest.mark.skipif(not (RTX_RUN.is_dir() and CPU.is_dir()),
                                     reason="../shared/reference (LLMServingSim run and vllm-cpu runs) is absent")


# -- loading ---------------------------------------------------------------------------------------
@needs_reference
def test_llmservingsim_run_loads_300_requests_with_the_readme_means():
    run = load_llmservingsim_run(RTX_RUN)
    assert len(run) == 300
    # bench-0: queued 479748.340626232, first token 479748.510151426, last 479764.054028055
    assert (run.arrival_s[0], run.num_prompt_tokens[0], run.num_output_tokens[0]) == (0.0, 2358, 531)
    assert run.ttft_s[0] == pytest.approx(0.169525194, abs=1e-9)
    assert run.e2el_s[0] == pytest.approx(15.713401823, abs=1e-9)
    assert run.arrival_s[1] == pytest.approx(0.284928449, abs=1e-9)
    assert run.prompt_token_ids is not None and run.prompt_token_ids[0][:3] == (5971, 2927, 220)
    assert all(len(ids) == p for ids, p in zip(run.prompt_token_ids, run.num_prompt_tokens))
    f = figures(RunLatencies.of_measured(run))   # README: TTFT 7.10 s, TPOT 32.5 ms, E2E 28.2 s
    assert (round(f["mean_ttft_ms"] / 1e3, 2), round(f["mean_tpot_ms"], 1), round(f["mean_e2el_ms"] / 1e3, 1)) \
        == (7.10, 32.5, 28.2)
    assert run.engine_args["max_num_seqs"] == 128 and run.engine_args["max_num_batched_tokens"] == 2048
    assert run.series is not None and run.series.kv_usage is None   # kv_cache_pct is all zero there
    assert resolve_hardware(run, None, None) == "rtx-pro-6000"      # from the folder name RTXPRO6000-...


@needs_reference
@pytest.mark.parametrize("name", BENCH_FILES)
def test_vllm_bench_loader_reproduces_the_files_own_statistics_exactly(name):
    bench = json.loads((CPU / f"{name}.json").read_text())
    f = figures(RunLatencies.of_measured(load_vllm_bench(CPU / f"{name}.json")))
    for key in ("mean_ttft_ms", "mean_tpot_ms", "mean_e2el_ms", "median_ttft_ms", "median_tpot_ms",
                "p90_ttft_ms", "p99_tpot_ms", "p99_e2el_ms"):
        assert f[key] == bench[key], key            # same arrays, same arithmetic: bit for bit
    assert f["makespan_s"] == pytest.approx(bench["duration"], rel=1e-12)
    assert f["output_throughput"] == pytest.approx(bench["output_throughput"], rel=1e-12)


@needs_reference
@pytest.mark.parametrize("name, log, first_row, num_steps", [
    ("run2_c1_n32_in256_out128", "run2_closed_loop_iterations.csv", 260, 4096),   # after 2 warm-ups
    ("run2_c4_n64_in256_out128", "run2_closed_loop_iterations.csv", 4485, 2064),
    ("run2_c16_n64_in256_out128", "run2_closed_loop_iterations.csv", 6678, 518),
    ("run2_c32_n48_r0.5_in256_out128", "run2_poisson_iterations.csv", 129, 1784)])
def test_each_bench_run_gets_exactly_its_own_steps_of_the_shared_log(name, log, first_row, num_steps):
    run = load_vllm_bench(CPU / f"{name}.json", CPU / log)
    assert (run.steps.first_row, len(run.steps)) == (first_row, num_steps)
    assert int(run.steps.ctx_tokens.sum()) == int(run.num_prompt_tokens.sum())
    assert int(run.steps.gen_reqs.sum()) == int((run.num_output_tokens - 1).sum())  # one decode per gap
    assert run.series is not None and run.series.time_s[-1] == pytest.approx(run.duration_s)


def test_run_steps_stops_at_the_bench_date_and_walks_back_over_the_prompt_tokens(tmp_path):
    rows = [  # warm-up (1 prompt), run A (2 prompts), then a later run B after the bench date
        (1, 4, 0, 0, "01-01 00:00:01"), (0, 0, 1, 1, "01-01 00:00:01"),
        (2, 8, 0, 0, "01-01 00:00:02"), (0, 0, 2, 2, "01-01 00:00:03"),
        (1, 4, 0, 0, "01-01 00:00:09")]
    path = tmp_path / "iterations.csv"
    path.write_text("iter,ctx_reqs,ctx_tokens,gen_reqs,gen_tokens,elapsed_ms,kv_usage_pct,log_time\n" + "".join(
        f"{i},{c},{t},{g},{gt},10.0,1.0,{when}\n" for i, (c, t, g, gt, when) in enumerate(rows)))
    steps = run_steps(read_iteration_log(path), 8, bench_date_s("20260101-000003"))
    assert (steps.first_row, len(steps)) == (2, 2)
    with pytest.raises(ValueError, match="fewer than the run's 20"):
        run_steps(read_iteration_log(path), 20, None)


def test_raw_server_log_lines_are_read_and_dummy_steps_dropped(tmp_path):
    path = tmp_path / "serve.log"
    path.write_text(
        "INFO 11-29 21:43:58 [loggers.py:1] Iteration(0): 1 context requests, 6 context tokens, 0 generation "
        "requests, 0 generation tokens, iteration elapsed time: 41.52 ms, CPU KV cache usage: 0.1%\n"
        "INFO 11-29 21:43:59 [loggers.py:1] Iteration(1): 0 context requests, 0 context tokens, 0 generation "
        "requests, 0 generation tokens, iteration elapsed time: 1.00 ms (dummy), CPU KV cache usage: 0.1%\n"
        "noise\n")
    steps = read_iteration_log(path)
    assert len(steps) == 1 and steps.ctx_tokens.tolist() == [6]
    assert steps.elapsed_s[0] == pytest.approx(0.04152) and steps.kv_usage[0] == pytest.approx(0.001)
    assert steps.log_time_s[0] == log_time_s("11-29 21:43:58")


def test_unlogged_step_time_is_the_busy_time_less_the_logged_time_per_step(tmp_path):
    path = tmp_path / "iterations.csv"
    path.write_text("ctx_reqs,ctx_tokens,gen_reqs,gen_tokens,elapsed_ms\n1,8,0,0,50\n0,0,2,2,20\n0,0,1,1,30\n")
    steps = read_iteration_log(path)
    # requests held over [0, 0.06] and [0.05, 0.11] (one busy span of 0.11 s), and [5, 5.02] after an
    # idle gap that does not count: 0.13 s busy, 0.10 s logged, over 3 steps
    arrival, e2el = np.array([0.0, 0.05, 5.0]), np.array([0.06, 0.06, 0.02])
    assert unlogged_step_time_s(steps, arrival, e2el) == pytest.approx(0.01)


def test_unlogged_step_time_ignores_preemption_where_client_gaps_do_not():
    """Our small-KV run: preempted requests stretch a gap over the steps they sat out (20 ms per step
    from the gaps); the busy time gives the log's own figure."""
    run = load_vllm_bench(OUR_DATA / "run3_c16_n64_blocks24_in256_out128.json",
                          OUR_DATA / "run3_blocks24_iterations.csv")
    unlogged_s = unlogged_step_time_s(run.steps, run.arrival_s, run.e2el_s)
    assert unlogged_s == pytest.approx((run.duration_s - run.steps.elapsed_s.sum()) / len(run.steps), rel=0.01)
    assert 0.003 < unlogged_s < 0.005


def test_prefill_steps_follow_first_come_first_served_and_refuse_a_log_that_disagrees():
    closed = load_vllm_bench(OUR_DATA / "run4_c4_n64_in256_out128.json", OUR_DATA / "run4_closed_loop_iterations.csv")
    done = prefill_steps(closed)
    assert done is not None and np.all(closed.steps.ctx_reqs[done] > 0)
    preempted = load_vllm_bench(OUR_DATA / "run3_c16_n64_blocks24_in256_out128.json",
                                OUR_DATA / "run3_blocks24_iterations.csv")
    assert prefill_steps(preempted) is None     # recomputed requests break the mapping


def test_client_round_trip_is_ttft_less_the_prefill_step_on_an_idle_engine():
    run = load_vllm_bench(OUR_DATA / "run4_c1_n32_in256_out128.json", OUR_DATA / "run4_closed_loop_iterations.csv")
    trip = client_round_trip(run, 0.002)
    expected = run.ttft_s - run.steps.elapsed_s[prefill_steps(run)] - 0.002
    assert trip.num_requests == 32 and trip.seconds == pytest.approx(expected.mean())
    c16 = load_vllm_bench(OUR_DATA / "run4_c16_n64_in256_out128.json", OUR_DATA / "run4_closed_loop_iterations.csv")
    assert client_round_trip(c16, 0.002) is None   # every request finds the engine busy


def test_client_round_trip_adds_to_ttft_and_e2e_but_not_tpot():
    side = RunLatencies(np.array([0.0, 1.0]), np.array([3, 5]), np.array([0.2, 0.3]), np.array([1.0, 2.0]))
    shifted = side.plus_client_s(0.01)
    assert np.allclose(shifted.ttft_s, [0.21, 0.31]) and np.allclose(shifted.e2el_s, [1.01, 2.01])
    assert np.allclose(shifted.tpot_s, side.tpot_s)


# -- rebuilding ------------------------------------------------------------------------------------
@needs_reference
def test_rebuilt_llmservingsim_scenario_validates_with_exactly_the_measured_requests(tmp_path):
    run = load_llmservingsim_run(RTX_RUN)
    options = RebuildOptions({"kind": "profiled", "profile": "rtx-pro-6000-llama-3.1-8b"}, "rtx-pro-6000",
                             "llama-3.1-8b")
    raw, _ = rebuild_scenario(run, options, write_trace(run, tmp_path / "trace.jsonl"))
    prepared = prepare(validate_scenario(raw))
    trace = prepared.trace
    assert np.array_equal(trace.arrival_s, run.arrival_s)
    assert np.array_equal(trace.num_prompt_tokens, run.num_prompt_tokens)
    assert np.array_equal(trace.max_output_tokens, run.num_output_tokens)
    assert trace.prompt_token_ids == run.prompt_token_ids and trace.max_concurrency is None
    options = prepared.runs[0].options
    assert (options.max_num_seqs, options.max_num_batched_tokens) == (128, 2048)
    assert options.enable_prefix_caching and options.enable_chunked_prefill
    assert options.async_scheduling is True            # vLLM 0.19 on a GPU: on by default (§1.6)


@needs_reference
def test_rebuilt_bench_scenario_copies_the_cpu_engine_and_can_close_the_loop(tmp_path):
    engine = read_engine_record(json.loads(CPU_ENGINE_ARGS.read_text()), "engine_args.json")
    run = load_vllm_bench(CPU / "run2_c4_n64_in256_out128.json", engine=engine)
    options = RebuildOptions({"kind": "profiled", "profile": "cpu-tiny-llama-vllm"},
                             {"memory_gib": 16, "memory_bandwidth_GBps": 20, "bf16_tflops": 1}, "tiny-llama",
                             arrivals="closed-loop")
    raw, _ = rebuild_scenario(run, options, write_trace(run, tmp_path / "trace.jsonl", "closed-loop"))
    prepared = prepare(validate_scenario(raw))
    assert prepared.trace.max_concurrency == 4 and len(prepared.trace) == 64
    assert prepared.runs[0].num_gpu_blocks == 1024 and prepared.scenario.engine.block_size == 128
    assert prepared.runs[0].options.enable_prefix_caching is False
    assert prepared.runs[0].options.async_scheduling is False


@pytest.mark.parametrize("mode, engine, expected", [
    ("on", {"device": "cpu"}, True), ("off", {"vllm_version": "0.19.0"}, False),
    ("auto", {"async_scheduling": False, "vllm_version": "0.19.0"}, False),   # recorded wins
    ("auto", {"device": "cpu", "vllm_version": "0.32.0"}, False),             # forced off on CPU
    ("auto", {"vllm_version": "0.19.0"}, True), ("auto", {"vllm_version": "0.11.2"}, False),
    ("auto", {}, None)])
def test_async_scheduling_auto_follows_the_recorded_vllm(mode, engine, expected):
    assert resolve_async_scheduling(mode, engine)[0] is expected


@needs_reference
def test_arrivals_auto_closes_the_loop_only_for_a_bench_run_with_max_concurrency():
    bench = load_vllm_bench(CPU / "run2_c4_n64_in256_out128.json")
    assert bench.max_concurrency == 4 and resolve_arrivals(bench, "auto") == "closed-loop"
    assert resolve_arrivals(bench, "replay") == "replay"
    assert resolve_arrivals(load_llmservingsim_run(RTX_RUN), "auto") == "replay"   # open loop, no semaphore


# -- comparing ------------------------------------------------------------------------------------
def test_table_uses_vllm_definitions_on_both_sides():
    measured = RunLatencies(np.array([0.0, 1.0, 2.0]), np.array([1, 3, 5]),
                            np.array([0.1, 0.2, 0.3]), np.array([0.1, 0.6, 1.1]))
    f = figures(measured)
    assert f["mean_tpot_ms"] == pytest.approx(200.0)        # (0.4/2 + 0.8/4)/2; out=1 has no TPOT
    assert f["p90_ttft_ms"] == pytest.approx(280.0)         # np.percentile, linear
    assert f["makespan_s"] == pytest.approx(3.1)            # max(arrival + E2E) from t=0
    assert f["output_throughput"] == pytest.approx(9 / 3.1)
    simulated = RunLatencies(measured.arrival_s, measured.num_output_tokens, measured.ttft_s * 1.1,
                             measured.e2el_s)
    row = next(r for r in compare(measured, simulated) if r.key == "mean_ttft_ms")
    assert row.error_pct == pytest.approx(10.0)
    assert len(compare(measured, simulated)) == 3 * 5 + 3


def test_resampling_is_the_time_weighted_mean_over_each_tick_with_idle_as_zero():
    log = StepTable()
    log.append(0.0, 1.0, 2, 0, 2, 2, 0, 2, 0, 0.5, 0)
    log.append(2.0, 3.0, 4, 0, 4, 4, 0, 4, 0, 0.25, 0)   # idle from 1 to 2
    series = EngineSeries.from_columns(log.to_columns())
    assert resample_steps(series, "num_running", np.array([1.0, 2.0, 3.0, 1.5]), 1.0).tolist() \
        == pytest.approx([2.0, 0.0, 4.0, 1.0])


# -- the command ------------------------------------------------------------------------------------
def _validate(tmp_path: Path, *args: str) -> dict:
    result = CliRunner().invoke(main, ["validate", *args, "-o", str(tmp_path)])
    assert result.exit_code == 0, f"{result.exception!r}\n{result.output}"
    assert "TTFT mean" in result.output and "makespan" in result.output
    report = json.loads((tmp_path / "validation.json").read_text())
    errors = {row["metric"]: row["error_pct"] for row in report["table"]}
    lines = result.output.splitlines()
    table = lines[next(i for i, line in enumerate(lines) if line.startswith("metric")):-3]
    print("\n" + lines[0] + "\n" + "\n".join(table))   # the errors, for the log (pytest -s)
    assert len(errors) == 18 and all(isinstance(e, float) and math.isfinite(e) for e in errors.values())
    for name in ("latency_cdfs.png", "engine_series.png", "simulated/requests.csv", "scenario.yaml"):
        assert (tmp_path / name).is_file(), name
    return report


@needs_reference
def test_validate_llmservingsim_run_end_to_end(tmp_path):
    report = _validate(tmp_path, str(RTX_RUN), "--cost-model", "rtx-pro-6000-llama-3.1-8b")
    assert report["run"]["num_requests"] == 300 and report["simulated_summary"]["completed"] == 300
    # Every engine argument says where it came from: this run's meta.json has engine_kwargs only.
    settings = {n.split()[0]: n.strip() for n in report["notes"] if n.startswith("  ")}
    assert set(settings) == {"model", "hardware", "tensor_parallel_size", "pipeline_parallel_size",
                             "data_parallel_size", "block_size",
                             "num_gpu_blocks", "gpu_memory_utilization", "max_model_len", "dtype",
                             "kv_cache_dtype", "quantization", "max_num_seqs", "max_num_batched_tokens",
                             "enable_chunked_prefill", "enable_prefix_caching", "async_scheduling",
                                 "enable_expert_parallel"}
    assert settings["max_num_seqs"] == "max_num_seqs 128: recorded (meta.json engine_kwargs.max_num_seqs)"
    assert settings["enable_expert_parallel"] == ("enable_expert_parallel false: recorded "
                                                  "(meta.json engine_kwargs.enable_expert_parallel)")
    assert settings["pipeline_parallel_size"] == "pipeline_parallel_size 1: derived (not recorded: vLLM's default)"
    assert settings["num_gpu_blocks"] == ("num_gpu_blocks 37112: derived (not recorded: from GPU memory at "
                                          "gpu_memory_utilization 0.92, per engine)")
    assert settings["async_scheduling"] == "async_scheduling true: derived (not recorded: vLLM 0.19.0's default)"


@needs_reference
def test_prompts_option_gives_the_same_token_ids_as_the_workload_the_run_names(tmp_path):
    run = load_llmservingsim_run(RTX_RUN)
    again = with_prompts(run, REFERENCE / "llmservingsim" / "workloads" / "sharegpt-llama-3.1-8b-300-sps10.jsonl")
    assert again.prompt_token_ids == run.prompt_token_ids and "(--prompts" in again.prompts_note


@needs_reference
@pytest.mark.filterwarnings("ignore:cost model .* outside the fitted range:RuntimeWarning")
def test_validate_vllm_cpu_run_with_a_fit_of_its_own_log(tmp_path):
    report = _validate(tmp_path, "--bench-json", str(CPU / "run2_c16_n64_in256_out128.json"),
                       "--engine-args", str(CPU_ENGINE_ARGS), "--iteration-log", str(CLOSED_LOOP_LOG),
                       "--cost-model", "fit",
                       "--step-overhead-ms", "auto")
    assert (tmp_path / "fitted_cost_model.json").is_file()
    assert report["cost_model"]["step_overhead_s"] > 0
    assert any(note.startswith("step overhead auto") for note in report["notes"])


@needs_reference
@pytest.mark.parametrize("args, message", [
    (["--cost-model", "fit"], "needs --iteration-log"),
    (["--cost-model", "no-such-profile"], "is not a shipped profile"),
    (["--cost-model", "rtx-pro-6000-llama-3.1-8b", "--step-overhead-ms", "auto"], "only for a cost model fitted"),
    (["--cost-model", "roofline", "--client-overhead-ms", "-3"], "--client-overhead-ms: '-3' must be >= 0")])
def test_validate_user_errors_exit_2_with_one_line(tmp_path, args, message):
    result = CliRunner().invoke(main, ["validate", str(CPU / "run2_c1_n32_in256_out128.json"), *args,
                                       "--engine-args", str(CPU_ENGINE_ARGS), "-o", str(tmp_path)])
    assert result.exit_code == 2 and message in result.output and len(result.output.splitlines()) == 1


@needs_reference
def test_a_bench_file_without_engine_arguments_is_refused_in_one_line(tmp_path):
    result = CliRunner().invoke(main, ["validate", str(CPU / "run2_c1_n32_in256_out128.json"), "--cost-model",
                                       "roofline", "-o", str(tmp_path)])
    assert result.exit_code == 2 and result.output.startswith(
        "error: --engine-args: a vllm bench JSON records no engine arguments; pass --engine-args FILE.json")
    assert len(result.output.splitlines()) == 1


def test_validate_wants_exactly_one_run(tmp_path):
    result = CliRunner().invoke(main, ["validate", "--cost-model", "roofline", "-o", str(tmp_path)])
    assert result.exit_code == 2 and "exactly one of RUN" in result.output
