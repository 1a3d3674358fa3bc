"""Importers: vLLM iteration logs (raw and CSV), harness timings, Vidur and LLMServingSim folders."""
from pathlib import Path

import numpy as np
import pytest

from cost_models.importers import read_llmservingsim, read_step_timings, read_vidur, read_vllm_log

REFERENCE = Path(__file__).resolve().parents[1] / ".." / "shared" / "reference"
RAW = """INFO 11-29 21:43:58 [loggers.py:248] Iteration(0): 1 context requests, 6 context tokens, 0 generation requests, 0 generation tokens, iteration elapsed time: 41.52 ms, CPU KV cache usage: 0.1%
INFO 11-29 21:43:58 [core.py:1] something else
INFO 11-29 21:43:58 [loggers.py:248] Iteration(1): 2 context requests, 513 context tokens, 4 generation requests, 4 generation tokens, iteration elapsed time: 300.0 ms, CPU KV cache usage: 1.0%
INFO 11-29 21:43:58 [loggers.py:248] Iteration(2): 0 context requests, 0 context tokens, 2 generation requests, 130 generation tokens, iteration elapsed time: 900.0 ms, CPU KV cache usage: 1.0%
INFO 11-29 21:43:58 [loggers.py:248] Iteration(3): 0 context requests, 0 context tokens, 1 generation requests, 1 generation tokens, iteration elapsed time: 5.0 ms (dummy), CPU KV cache usage: 0.0%
"""
CSV = """iter,ctx_reqs,ctx_tokens,gen_reqs,gen_tokens,elapsed_ms,kv_usage_pct,log_time
0,1,6,0,0,41.52,0.1,11-29 21:43:58
1,2,513,4,4,300.0,1.0,11-29 21:43:58
2,0,0,2,130,900.0,1.0,11-29 21:43:58
"""


def test_raw_vllm_log_and_its_csv_give_the_same_steps_and_drop_recompute_and_dummy(tmp_path):
    (tmp_path / "serve.log").write_text(RAW)
    (tmp_path / "it.csv").write_text(CSV)
    raw, parsed = read_vllm_log(tmp_path / "serve.log"), read_vllm_log(tmp_path / "it.csv")
    assert raw.notes["steps_read"] == 4 and raw.notes["steps_dropped"] == 2
    assert parsed.notes["steps_dropped"] == 1
    assert list(raw.time_s) == list(parsed.time_s) == [0.04152, 0.3]
    mixed = raw.shapes[1]
    assert mixed.new_tokens.tolist() == [257, 256, 1, 1, 1, 1]  # 513 tokens split over 2 prefills
    # decode context: 1% of 131072 tokens less the 513 prefill tokens, over 4 decodes, less half a block
    assert mixed.context_tokens.tolist() == [0, 0] + [int((1310.72 - 513) / 4 - 64)] * 4


def test_vllm_log_without_iteration_lines_is_a_one_line_error(tmp_path):
    path = tmp_path / "serve.log"
    path.write_text("INFO nothing here\n")
    with pytest.raises(ValueError, match=f"{path}: no usable iteration lines"):
        read_vllm_log(path)


def test_harness_timings_merge_repetitions_into_their_median_per_shape(tmp_path):
    path = tmp_path / "timings.csv"
    path.write_text("model,kind,chunk,prefill_ctx,n_decode,decode_ctx,tokens,mode,rep,time_ms\n"
                    "m,decode,0,0,2,64,2,eager,0,1.0\nm,decode,0,0,2,64,2,eager,1,3.0\nm,decode,0,0,2,64,2,eager,2,2.5\n"
                    "m,mixed,16,0,2,64,18,eager,0,4.0\nm,decode,0,0,2,64,2,cuda_graph,0,0.5\n")
    timings = read_step_timings(tmp_path, mode="eager")
    assert timings.time_s.tolist() == [0.0025, 0.004]
    assert timings.families == ["decode", "mixed"]
    assert timings.shapes[1].new_tokens.tolist() == [16, 1, 1]
    with pytest.raises(ValueError, match="holds modes cuda_graph, eager; choose one"):
        read_step_timings(path)


def test_vidur_mlp_reads_one_table_set_per_tp_with_all_reduce_above_tp1():
    mlp = REFERENCE / "vidur-profiles/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv"
    network = REFERENCE / "vidur-profiles/network/h100_dgx/all_reduce.csv"
    if not mlp.is_file():
        pytest.skip(f"{mlp} absent: the Vidur reference profiles are not on this machine")
    tables = read_vidur(mlp, network)
    assert [t.tensor_parallel_size for t in tables] == [1, 2, 4, 8]
    assert tables[0].model == "llama-2-7b" and tables[0].hardware == "h100-sxm"
    assert tables[0].allreduce is None and tables[1].allreduce is not None
    tokens, seconds = tables[0].layer_ops["mlp_up_proj"]
    assert tokens[0] == 1 and tokens[-1] == 4096 and np.all(seconds > 0)


def test_llmservingsim_folder_reads_both_tp_degrees_and_counts_layernorm_twice():
    folder = REFERENCE / "llmservingsim/profiles/RTXPRO6000/meta-llama/Llama-3.1-8B/bf16"
    if not folder.is_dir():
        pytest.skip(f"{folder} absent: the LLMServingSim reference profiles are not on this machine")
    tp1, tp2 = read_llmservingsim(folder)
    assert (tp1.model, tp1.hardware, tp1.tensor_parallel_size, tp2.tensor_parallel_size) == \
        ("llama-3.1-8b", "rtx-pro-6000", 1, 2)
    assert set(tp1.model_ops) == {"embedding", "final_layernorm"}
    assert tp1.layer_ops["layernorm"][1][0] == pytest.approx(2 * 2.416e-6)  # 2.416 us, twice per layer
    assert len(tp1.attention[0]) == 19364
    # meta.yaml skew_fit.per_tp: alpha_default 0.0543 (tp 1), 0.0654 (tp 2); the RTX 4090 has no skew sweep
    assert tp1.notes["decode_skew"]["alpha_by_tp"] == {"1": 0.0543, "2": 0.0654}
    rtx4090 = REFERENCE / "llmservingsim/profiles/RTX4090/meta-llama/Llama-3.1-8B/bf16"
    assert "decode_skew" not in read_llmservingsim(rtx4090)[0].notes


def test_llmservingsim_moe_folder_reads_its_expert_table_and_fit_keeps_it():
    from cost_models.fit.run import FitRequest, run_fit
    folder = REFERENCE / "llmservingsim/profiles/RTXPRO6000/Qwen/Qwen3-30B-A3B-Instruct-2507/bf16"
    if not folder.is_dir():
        pytest.skip(f"{folder} absent: the LLMServingSim reference profiles are not on this machine")
    tp1, tp2 = read_llmservingsim(folder)
    tokens, activated, seconds = tp1.moe
    assert len(tokens) == 50 and (tokens[0], activated[0], seconds[0]) == (1, 8, pytest.approx(50.2297e-6))
    assert tp2.moe is None                      # moe.csv at tp 1 only
    outcome = run_fit(FitRequest(folder, model="qwen3-30b-a3b", step_overhead_s=0.0))
    assert list(outcome.data["tensor_parallel"]) == ["1"] and "tp 2: left out, no moe.csv" in outcome.report
    assert outcome.data["tensor_parallel"]["1"]["moe"]["top_k"] == 8
