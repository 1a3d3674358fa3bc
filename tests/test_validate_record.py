"""`servesim validate` uses what the run recorded (issue 19, point 2): KV blocks, block size,
memory utilisation, data- and tensor-parallel sizes, dtype and async scheduling from the record,
HuggingFace names mapped to presets, no engine arguments invented for a bench file, `--prompts`
for prefix caching, and a client round trip measured only on enough idle requests.

The run folders are small fixtures in the shape LLMServingSim's bench runner writes (casys-kaist/
LLMServingSim commit 4a23e9f, bench/core/runner.py and recorder.py): ``meta.json`` with
``engine_kwargs``, ``kv_cache``, ``hardware`` and ``resolved_config``, the latter one section per
vLLM config class (``cache_config.num_gpu_blocks``, ``parallel_config.data_parallel_size``, ...,
field names of vLLM 0.19; a torch dtype recorded as its repr ``"torch.bfloat16"``). The block count
is the front end's sum over its data-parallel engines (vLLM v1/engine/utils.py
``wait_for_engine_startup``), hence 2,588 = 2 x 1,294.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cost_models.model_spec import load_model
from simulator.cli import main
from simulator.results import load
from simulator.validate.measured import load_llmservingsim_run, load_vllm_bench
from simulator.validate.pipeline import client_overhead_s
from simulator.validate.record import read_engine_record

OUR_DATA = Path(__file__).resolve().parent / "data" / "vllm-cpu"
HF_QWEN = "Qwen/Qwen3-30B-A3B-Instruct-2507"


def _meta(resolved: bool = True) -> dict:
    meta = {"schema_version": 1, "model": HF_QWEN, "vllm_version": "0.19.0",
            "engine_kwargs": {"model": HF_QWEN, "tensor_parallel_size": 1, "data_parallel_size": 2,
                              "max_num_seqs": 64, "max_num_batched_tokens": 2048, "max_model_len": None,
                              "dtype": "bfloat16", "kv_cache_dtype": "auto", "seed": 42},
            "num_requests": 4}
    if resolved:
        meta["kv_cache"] = {"num_gpu_blocks": 2588, "block_size": 16, "gpu_memory_utilization": 0.9,
                            "enable_prefix_caching": True, "num_kv_tokens": 2588 * 16}
        meta["hardware"] = {"device_count": 2, "device_name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"}
        meta["resolved_config"] = {
            "cache_config": {"block_size": 16, "gpu_memory_utilization": 0.9, "num_gpu_blocks": 2588,
                             "num_gpu_blocks_override": None, "cache_dtype": "auto", "enable_prefix_caching": True},
            "parallel_config": {"tensor_parallel_size": 1, "data_parallel_size": 2, "pipeline_parallel_size": 1},
            "model_config": {"model": HF_QWEN, "dtype": "torch.bfloat16", "max_model_len": 8192,
                             "hf_config": "<Qwen3MoeConfig>"},
            "scheduler_config": {"max_num_seqs": 64, "max_num_batched_tokens": 2048,
                                 "enable_chunked_prefill": True, "async_scheduling": True}}
    return meta


def _run_folder(tmp_path: Path, meta: dict, name: str = "RTXPRO6000-Qwen3-30B") -> Path:
    """Four requests: two 2,048-token prompts at t=0 (one step each), two short ones later."""
    run = tmp_path / name
    run.mkdir()
    (run / "meta.json").write_text(json.dumps(meta))
    rows = [(0.0, 2048, 8), (0.0, 2048, 8), (1.0, 100, 4), (1.5, 100, 4)]
    (run / "requests.jsonl").write_text("".join(json.dumps({
        "request_id": f"bench-{i}", "input_toks": p, "output_toks": o, "queued_ts": 100.0 + t,
        "first_token_ts": 100.2 + t, "last_token_ts": 100.5 + t}) + "\n" for i, (t, p, o) in enumerate(rows)))
    return run


def _validate(out: Path, *args: str) -> tuple[dict, str]:
    result = CliRunner().invoke(main, ["validate", *args, "--cost-model", "roofline", "--no-plots", "-o", str(out)])
    assert result.exit_code == 0, f"{result.exception!r}\n{result.output}"
    return json.loads((out / "validation.json").read_text()), result.output


def test_each_recorded_value_is_read_from_the_resolved_config_first():
    record = read_engine_record(_meta(), "meta.json")
    assert {k: record.values[k] for k in ("num_gpu_blocks", "block_size", "gpu_memory_utilization",
                                          "data_parallel_size", "tensor_parallel_size", "dtype",
                                          "async_scheduling", "max_model_len", "model")} == {
        "num_gpu_blocks": 1294, "block_size": 16, "gpu_memory_utilization": 0.9, "data_parallel_size": 2,
        "tensor_parallel_size": 1, "dtype": "bfloat16", "async_scheduling": True, "max_model_len": 8192,
        "model": HF_QWEN}
    assert record.sources["num_gpu_blocks"] == ("meta.json resolved_config.cache_config.num_gpu_blocks: 2588 "
                                                "summed by vLLM's front end over 2 data-parallel engines")
    assert record.sources["max_model_len"] == "meta.json resolved_config.model_config.max_model_len"
    old = read_engine_record(_meta(resolved=False), "meta.json")   # engine_kwargs only; a null is no record
    assert "num_gpu_blocks" not in old.values and "max_model_len" not in old.values
    assert old.sources["data_parallel_size"] == "meta.json engine_kwargs.data_parallel_size"
    flat = read_engine_record({"num_gpu_blocks_override": 24, "data_parallel_size": 2}, "args.json")
    assert flat.values["num_gpu_blocks"] == 24 and flat.sources["num_gpu_blocks"] == "args.json num_gpu_blocks_override"


def test_a_recorded_value_of_the_wrong_type_names_its_field():
    meta = _meta()
    meta["resolved_config"]["cache_config"]["block_size"] = "sixteen"
    with pytest.raises(ValueError, match=r"^meta.json resolved_config.cache_config.block_size: 'sixteen' is not "
                                         r"a positive integer$"):
        read_engine_record(meta, "meta.json")


def test_validate_simulates_what_the_run_recorded_and_says_so(tmp_path):
    report, output = _validate(tmp_path / "out", str(_run_folder(tmp_path, _meta())))
    engine, scheduler = report["scenario"]["engine"], report["scenario"]["schedulers"][0]
    assert report["scenario"]["model"] == "qwen3-30b-a3b" and report["scenario"]["hardware"] == "rtx-pro-6000"
    assert engine == {"tensor_parallel_size": 1, "block_size": 16, "gpu_memory_utilization": 0.9,
                      "num_replicas": 2, "router": "least_loaded", "max_model_len": 8192, "num_gpu_blocks": 1294}
    assert scheduler["async_scheduling"] is True and scheduler["max_num_seqs"] == 64
    summary = report["simulated_summary"]
    assert summary["num_gpu_blocks"] == 1294 and summary["completed"] == 4
    notes = report["notes"]
    for line in (
            "num_gpu_blocks 1294: recorded (meta.json resolved_config.cache_config.num_gpu_blocks: 2588 summed "
            "by vLLM's front end over 2 data-parallel engines)",
            "gpu_memory_utilization 0.9: recorded (meta.json resolved_config.cache_config.gpu_memory_utilization)",
            "block_size 16: recorded (meta.json resolved_config.cache_config.block_size)",
            "tensor_parallel_size 1: recorded (meta.json resolved_config.parallel_config.tensor_parallel_size)",
            "dtype bfloat16: recorded (meta.json resolved_config.model_config.dtype; qwen3-30b-a3b at 2 bytes)",
            "async_scheduling true: recorded (meta.json resolved_config.scheduler_config.async_scheduling)",
            f"model qwen3-30b-a3b: recorded (meta.json resolved_config.model_config.model '{HF_QWEN}', "
            f"preset qwen3-30b-a3b)",
            "hardware rtx-pro-6000: recorded (meta.json hardware.device_name 'NVIDIA RTX PRO 6000 Blackwell "
            "Workstation Edition')"):
        assert f"  {line}" in notes, line
    assert any(n.startswith("  data_parallel_size 2: recorded (meta.json resolved_config.parallel_config."
                            "data_parallel_size; simulated as 2 engine replicas") for n in notes)
    assert "the run did not record" not in output
    # Two engines: the two prompts that arrived together are prefilled side by side, not one after the other.
    requests = load(tmp_path / "out" / "simulated").requests
    assert requests["first_token_s"][0] == requests["first_token_s"][1]


def test_what_the_run_did_not_record_is_derived_and_said_so(tmp_path):
    report, _ = _validate(tmp_path / "out", str(_run_folder(tmp_path, _meta(resolved=False))), "--hardware",
                          "rtx-pro-6000")
    blocks = report["simulated_summary"]["num_gpu_blocks"]
    notes = report["notes"]
    assert f"  num_gpu_blocks {blocks}: derived (not recorded: from GPU memory at gpu_memory_utilization 0.92, " \
           f"per engine)" in notes
    assert "  block_size 16: derived (not recorded: vLLM's default on GPU)" in notes
    assert "  max_model_len 262144: derived (not recorded: the model's context length)" in notes
    assert "  async_scheduling true: derived (not recorded: vLLM 0.19.0's default)" in notes
    assert "  hardware rtx-pro-6000: given (--hardware)" in notes
    assert report["scenario"]["engine"]["num_replicas"] == 2   # engine_kwargs' data_parallel_size


def test_a_dtype_other_than_the_models_is_simulated_at_its_width(tmp_path):
    meta = _meta()
    meta["resolved_config"]["model_config"]["dtype"] = "torch.float32"
    report, _ = _validate(tmp_path / "out", str(_run_folder(tmp_path, meta)))
    assert report["scenario"]["engine"]["dtype"] == "float32"
    assert ("  dtype float32: recorded (meta.json resolved_config.model_config.dtype; simulated at 4 bytes "
            "(engine.dtype), qwen3-30b-a3b's own is 2)") in report["notes"]


def test_a_dtype_other_than_a_fitted_models_is_refused_in_one_line(tmp_path):
    meta = _meta()
    meta["resolved_config"]["model_config"]["dtype"] = "torch.float32"
    result = CliRunner().invoke(main, ["validate", str(_run_folder(tmp_path, meta)), "--cost-model",
                                       "rtx-pro-6000-qwen3-30b-a3b", "-o", str(tmp_path / "out")])
    assert result.exit_code == 2 and result.output == (
        "error: dtype: the run recorded float32 (4-byte weights and KV) but qwen3-30b-a3b is sized at 2 bytes, "
        "as the fitted cost model was measured; pass --model a config.json with torch_dtype float32\n")


def test_a_run_with_pipeline_parallelism_is_simulated_in_stages(tmp_path):
    meta = _meta()
    meta["resolved_config"]["parallel_config"]["pipeline_parallel_size"] = 2
    report, _ = _validate(tmp_path / "out", str(_run_folder(tmp_path, meta)))
    assert report["scenario"]["engine"]["pipeline_parallel_size"] == 2
    assert ("  pipeline_parallel_size 2: recorded (meta.json resolved_config.parallel_config."
            "pipeline_parallel_size)") in report["notes"]
    assert report["simulated_summary"]["completed"] == 4


def test_huggingface_names_map_to_presets_and_a_local_folder_loads_its_config(tmp_path, monkeypatch):
    assert load_model(HF_QWEN).name == "qwen3-30b-a3b"
    assert load_model("meta-llama/Meta-Llama-3.1-8B-Instruct").name == "llama-3.1-8b"
    folder = tmp_path / "Qwen" / "Qwen3-30B-A3B-Instruct-2507"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 512}))
    monkeypatch.chdir(tmp_path)
    spec = load_model(HF_QWEN)              # the folder at that relative path wins over the preset
    assert (spec.name, spec.num_layers) == ("Qwen3-30B-A3B-Instruct-2507", 2)


def _bench(tmp_path: Path, prompts: list[list[int]]) -> Path:
    """A --save-detailed bench file: one request a second, each finished before the next."""
    n = len(prompts)
    bench = {"date": "20260101-000010", "duration": n - 0.5, "max_concurrency": None, "request_rate": 1.0,
             "start_times": [float(i) for i in range(n)], "ttfts": [0.05] * n, "latencies": [0.5] * n,
             "input_lens": [len(p) for p in prompts], "output_lens": [4] * n, "errors": [""] * n}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(bench))
    return path


ENGINE = {"model": "meta-llama/Llama-3.1-8B", "vllm_version": "0.19.0", "max_num_seqs": 8,
          "max_num_batched_tokens": 2048, "num_gpu_blocks": 512, "block_size": 16}


def test_prompts_give_prefix_caching_the_real_prompts(tmp_path):
    shared = list(range(1000, 1048))                          # 3 full blocks every prompt shares
    prompts = [shared + [i] * 16 for i in range(6)]           # 64 tokens, the last block each its own
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps({"input_tok_ids": p}) + "\n" for p in prompts))
    (tmp_path / "engine.json").write_text(json.dumps(ENGINE))
    args = (str(_bench(tmp_path, prompts)), "--engine-args", str(tmp_path / "engine.json"), "--hardware", "h100-sxm")
    without, _ = _validate(tmp_path / "without", *args)
    with_ids, _ = _validate(tmp_path / "with", *args, "--prompts", str(tmp_path / "prompts.jsonl"))
    assert without["simulated_summary"]["prefix_cache_hit_rate"] == 0.0
    summary = with_ids["simulated_summary"]
    # Requests 1-5 each find request 0's three shared blocks cached: 5 x 48 of 6 x 64 prompt tokens.
    assert (summary["prefix_cache_hits"], summary["prefix_cache_queries"]) == (240, 384)
    assert any(n.startswith(f"prompt token ids from {tmp_path / 'prompts.jsonl'} (--prompts")
               for n in with_ids["notes"])


def test_prompts_whose_lengths_disagree_with_the_run_are_refused_naming_the_first(tmp_path):
    prompts = [[1] * 32, [2] * 32, [3] * 32]
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps({"input_tok_ids": p}) + "\n"
                                                    for p in (prompts[0], prompts[1], [3] * 31)))
    (tmp_path / "engine.json").write_text(json.dumps(ENGINE))
    result = CliRunner().invoke(main, ["validate", str(_bench(tmp_path, prompts)), "--engine-args",
                                       str(tmp_path / "engine.json"), "--prompts", str(tmp_path / "prompts.jsonl"),
                                       "--cost-model", "roofline", "-o", str(tmp_path / "out")])
    assert result.exit_code == 2 and result.output == (
        f"error: --prompts: {tmp_path / 'prompts.jsonl'}: prompt 2 has 31 token ids but the run's request 2 had "
        f"32 prompt tokens (prompts are matched in the dataset's order)\n")


def test_the_client_round_trip_needs_five_idle_requests_and_says_how_many_it_used():
    engine = read_engine_record(json.loads((OUR_DATA / "engine_args.json").read_text()), "engine_args.json")
    c1 = load_vllm_bench(OUR_DATA / "run4_c1_n32_in256_out128.json", OUR_DATA / "run4_closed_loop_iterations.csv",
                         engine)
    seconds, (note,) = client_overhead_s("auto", c1)
    assert 0.005 < seconds < 0.02 and "over 32 requests that found the engine idle" in note
    c4 = load_vllm_bench(OUR_DATA / "run4_c4_n64_in256_out128.json", OUR_DATA / "run4_closed_loop_iterations.csv",
                         engine)
    seconds, (note,) = client_overhead_s("auto", c4)
    assert seconds == 0.0 and note.startswith("client round trip auto: only 1 request(s) found the engine idle, "
                                              "fewer than the 5 an estimate needs: 0 ms added")


def test_an_llmservingsim_run_without_its_workload_has_no_token_ids_and_says_so(tmp_path):
    run = load_llmservingsim_run(_run_folder(tmp_path, _meta()))
    assert run.prompt_token_ids is None and run.prompts_note.startswith("no dataset_path in meta.json")
    assert run.workload_index.tolist() == [0, 1, 2, 3]


def test_a_recorded_fp8_quantization_reaches_the_scenario(tmp_path):
    meta = _meta()
    meta["resolved_config"]["model_config"]["quantization"] = "fp8"
    meta["resolved_config"]["cache_config"]["cache_dtype"] = "fp8"
    report, _ = _validate(tmp_path / "out", str(_run_folder(tmp_path, meta)))
    engine = report["scenario"]["engine"]
    assert (engine["quantization"], engine["kv_cache_dtype"]) == ("fp8", "fp8")
    assert "  quantization fp8: recorded (meta.json resolved_config.model_config.quantization 'fp8')" in report["notes"]


def test_a_recorded_expert_parallel_run_reaches_the_scenario_or_says_why_not(tmp_path):
    # docs/expert-parallel-semantics.md: E1 within one engine; E2 refused across data-parallel ranks.
    meta = _meta()
    meta["resolved_config"]["parallel_config"].update(tensor_parallel_size=2, data_parallel_size=1,
                                                      enable_expert_parallel=True)
    meta["engine_kwargs"].update(tensor_parallel_size=2, data_parallel_size=1)
    report, _ = _validate(tmp_path / "out", str(_run_folder(tmp_path, meta)))
    assert report["scenario"]["engine"]["enable_expert_parallel"] is True
    assert any(n.startswith("  enable_expert_parallel true: recorded") for n in report["notes"])
    coupled = _meta()
    coupled["resolved_config"]["parallel_config"]["enable_expert_parallel"] = True
    result = CliRunner().invoke(main, ["validate", str(_run_folder(tmp_path, coupled, "RTXPRO6000-Qwen3-30B-dp")), "--cost-model",
                                       "roofline", "--no-plots", "-o", str(tmp_path / "out2")])
    assert result.exit_code == 2 and "engine.enable_expert_parallel: true with engine.num_replicas 2" in result.output


def test_a_recorded_method_without_a_format_asks_for_the_config(tmp_path):
    meta = _meta()
    meta["resolved_config"]["model_config"]["quantization"] = "awq"
    result = CliRunner().invoke(main, ["validate", str(_run_folder(tmp_path, meta)), "--cost-model", "roofline",
                                       "--no-plots", "-o", str(tmp_path / "out")])
    assert result.exit_code != 0 and "quantization: 'awq'" in result.output and "config.json" in result.output
