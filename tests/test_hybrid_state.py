"""Hybrid models' state pool (docs/hybrid-state-semantics.md, rules H1-H8): the layout vLLM derives
from the config, the blocks a request holds, and the running batch the state caps."""
from __future__ import annotations

import json

import numpy as np
import pytest

from cost_models.hardware import load_hardware
from cost_models.hybrid_layout import hybrid_layout, kv_block_bytes
from cost_models.memory import (activation_peak_bytes, non_torch_bytes, num_gpu_blocks,
                                weights_bytes_per_rank)
from cost_models.model_spec import PRESETS, load_model
from cost_models.state_layers import StateLayers
from simulator.core.request import Request
from simulator.kv.hybrid_pool import HybridKVCache
from simulator.runner import prepare, simulate
from simulator.scenario import ScenarioError, validate_scenario
from simulator.policies.base import SchedulerError
from tests.test_properties import Case, build_scheduler, check_requests, check_step_log, run_case

QWEN3_NEXT = PRESETS["qwen3-next-80b-a3b"]


def test_qwen3_next_layout_by_hand_matches_vllms_log():
    # Rule H1: state = conv (8192 / tp) x 3 + (32 / tp) x 128 x 128 elements, bf16. TP 1:
    # 24,576 + 524,288 = 548,864 elements = 1,097,728 B. Rule H2: one token of one attention layer
    # is 2 x 2 KV heads x 256 x 2 B = 2,048 B; 16 x cdiv(1,097,728, 16 x 2,048) = 16 x 34 = 544
    # tokens (vLLM logs 544 for Qwen3-Next), page 544 x 2,048 = 1,114,112 B, padded by 1.49 %.
    # Rule H3: 12 attention and 36 DeltaNet layers, group size 12: 1 + 3 groups.
    one = hybrid_layout(QWEN3_NEXT, 1, 16)
    assert (one.state_bytes, one.block_size, one.page_bytes) == (1_097_728, 544, 1_114_112)
    assert round(100 * one.state_padding, 2) == 1.49
    assert (one.group_size, one.num_attention_groups, one.num_state_groups) == (12, 1, 3)
    # TP 2: the KV heads (2 / 2 = 1) and the state both halve: 544 tokens again, half the page.
    two = hybrid_layout(QWEN3_NEXT, 2, 16)
    assert (two.state_bytes, two.block_size, two.page_bytes) == (548_864, 544, 557_056)
    # TP 4: one KV head per rank (replicated) while the state halves again: 272 tokens.
    assert hybrid_layout(QWEN3_NEXT, 4, 16).block_size == 272
    # A larger block size than the state needs is kept, and the state padded to it (rule H2.3-4).
    assert hybrid_layout(QWEN3_NEXT, 2, 1024).block_size == 1024


def test_kv_memory_is_split_into_blocks_of_a_page_per_group_tensor():
    # Rule H3.2: num_blocks = available // page // group_size; the attention layers alone no
    # longer set the block's bytes (12 layers x 544 tokens x 1,024 B = 6,684,672 B = one page
    # in each of the 12 tensors).
    h200 = load_hardware("h200")
    assert kv_block_bytes(QWEN3_NEXT, 2, 16) == 557_056 * 12 == 544 * QWEN3_NEXT.kv_bytes_per_token(2)
    requested = int(np.ceil(h200.memory_bytes * 0.9))
    available = (requested - weights_bytes_per_rank(QWEN3_NEXT, 2)
                 - activation_peak_bytes(QWEN3_NEXT, 8192, 1024, 2) - non_torch_bytes(2))
    assert num_gpu_blocks(QWEN3_NEXT, h200, 2, 0.9, 16, 8192, 1024) == available // 557_056 // 12
    # A model without state layers keeps block_size x kv_bytes_per_token.
    llama = PRESETS["llama-3.1-8b"]
    assert kv_block_bytes(llama, 1, 16) == 16 * llama.kv_bytes_per_token(1)


def test_a_request_holds_its_state_blocks_exactly_while_it_holds_blocks():
    # Rules H4, H5: blocks(T) = A x cdiv(T, 4) + S; here A = 2, S = 3.
    kv = HybridKVCache(21, 4, num_attention_groups=2, num_state_groups=3)
    request = Request(0, 0.0, 5, 3)
    assert kv.blocks_for(0) == 0 and kv.blocks_for(1) == 5 and kv.blocks_for(5) == 7
    assert kv.allocate(request, 5) and kv.num_blocks_of(request) == 7 and kv.token_slots_of(request) == 8
    assert kv.num_state_slots_used == 1
    request.num_computed_tokens = 5
    assert kv.allocate(request, 4) and kv.num_blocks_of(request) == 9   # 9 slots: a third block each
    kv.free(request)
    assert kv.num_state_slots_used == 0 and kv.num_free_blocks == kv.num_total_blocks == 20


def _scenario(**engine) -> dict:
    return {"name": "hybrid", "seed": 1, "model": "qwen3-next-80b-a3b", "hardware": "h200",
            "cost_model": {"kind": "roofline"},
            "engine": {"tensor_parallel_size": 2, "max_model_len": 4096, **engine},
            "workload": {"arrival": {"kind": "inf"}, "num_requests": 300,
                         "lengths": {"kind": "vllm_random", "input_len": 256, "output_len": 128,
                                     "range_ratio": 0.0}},
            "schedulers": [{"preset": "vllm_v1", "max_num_seqs": 256}]}


@pytest.mark.parametrize("fast_path", [True, False])
def test_running_batch_is_capped_by_state_slots_as_computed_by_hand(fast_path):
    # Rule H7: 401 blocks, 400 usable; a request of 256 + 128 tokens never passes the 544-token
    # block, so it holds 1 attention block + 3 state blocks: floor(400 / 4) = 100 run at once,
    # though the 400 blocks would hold 256 seats' KV (max_num_seqs) as plain attention.
    prepared = prepare(validate_scenario(_scenario(num_gpu_blocks=401)))
    run = prepared.runs[0]
    assert run.context.block_size == 544 and not run.options.enable_prefix_caching   # rule H6
    out = simulate(prepared, run, fast_path=fast_path)
    steps = out.steps.to_columns()
    assert steps["num_running"].max() == 100
    full = steps["num_running"] == 100
    assert np.all(steps["kv_usage"][full] == 1.0)   # the pool, not the seats, stops admission
    assert np.any(full & (steps["num_waiting"] > 0))
    assert np.array_equal(steps["num_state_slots"], steps["num_running"])   # one slot each (H4)
    assert out.summary["completed"] == 300 and out.summary["num_preemptions"] == 0
    assert out.summary["block_size"] == 544
    assert out.summary["kv_cache_groups"] == {"attention": 1, "state": 3, "layers_per_group": 12}


def test_state_blocks_count_in_the_startup_check_of_one_max_model_len_request():
    # Rule H5: 4096 tokens need cdiv(4096, 544) = 8 attention blocks and 3 state blocks: a memory
    # of 10 blocks is refused, whatever num_gpu_blocks says.
    scheduler = build_scheduler({"preset": "vllm_v1", "enable_prefix_caching": False,
                                 "hybrid": (1, 3)}, 20, 544, 4096)
    scheduler.check_pool_holds_max_model_len(11, "test memory")
    with pytest.raises(SchedulerError, match="need 11 KV blocks.*to at most 3808 "):   # (10 - 3) x 544
        scheduler.check_pool_holds_max_model_len(10, "test memory")


def test_hand_worked_steps_two_requests_fill_the_pool_the_third_waits():
    # Block size 4, 1 attention group, 2 state groups, 7 usable blocks. Each request (prompt 2,
    # 2 outputs: at most 3 tokens of KV) holds 1 + 2 = 3 blocks: two run (6 blocks), the third
    # waits for a finish (rule H7: floor(7 / 3) = 2). t=0: 0 and 1 prefill; t=1: both decode and
    # finish at t=2, freeing their states; t=2: 2 prefills, t=3 it decodes, finishing at t=4.
    case = Case({"preset": "vllm_v1", "enable_prefix_caching": False, "max_num_seqs": 4,
                 "max_num_batched_tokens": 16, "hybrid": (1, 2)}, 4, 16, 8, 1.0, None,
                ((0.0, 2, 2, 0), (0.0, 2, 2, 0), (0.0, 2, 2, 0)))
    scheduler, probe, requests, steps = run_case(case)
    check_requests(case, requests, probe, check_gaps=True)
    check_step_log(scheduler, probe, requests, steps)
    assert steps["num_running"].tolist() == [2, 0, 1, 0]
    assert steps["kv_usage"].tolist() == [1 - 1 / 7, 0.0, 1 - 4 / 7, 0.0]
    assert [r.finish_s for r in requests] == [2.0, 2.0, 4.0]


def test_hf_config_of_qwen3_next_gives_the_preset(tmp_path):
    config = {"model_type": "qwen3_next", "num_hidden_layers": 48, "hidden_size": 2048,
              "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
              "intermediate_size": 5120, "vocab_size": 151936, "max_position_embeddings": 262144,
              "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
              "full_attention_interval": 4, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
              "linear_value_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
              "torch_dtype": "bfloat16"}
    path = tmp_path / "Qwen3-Next-80B-A3B-Instruct" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    loaded = load_model(str(path))
    assert loaded.state_layers == QWEN3_NEXT.state_layers
    assert loaded.num_attention_layers == 12 and loaded.kv_bytes_per_token(1) == QWEN3_NEXT.kv_bytes_per_token(1)


@pytest.mark.parametrize("preset", ["sglang", "trtllm", "vllm_v0", "sarathi"])
def test_presets_without_a_state_pool_refuse_a_hybrid_model(preset):
    raw = _scenario(num_gpu_blocks=401)
    raw["schedulers"] = [{"preset": preset}]
    with pytest.raises(ScenarioError, match=rf"schedulers\.{preset}\.preset: '{preset}' does not model "
                                            r"the state pool of hybrid model qwen3-next-80b-a3b"):
        prepare(validate_scenario(raw))


def test_state_heads_not_divisible_by_tp_are_refused():
    state = StateLayers("mamba2", 2, conv_dim=96, conv_kernel=4, num_heads=6, head_k_dim=8,
                        head_v_dim=8, in_proj_size=128, out_proj_size=48)
    with pytest.raises(ValueError, match="tensor_parallel_size: 4 does not divide the 6 state heads"):
        state.check_tensor_parallel_size(4, "toy")


@pytest.mark.parametrize("file_format", ["csv", "parquet"])
def test_steps_file_has_the_state_slots_column_only_for_a_hybrid_model(tmp_path, file_format):
    from simulator.results.columns import STATE_SLOTS, STEP_COLUMNS
    from simulator.results.files import ResultFolder
    from simulator.results.load import load
    for model, name in (("qwen3-next-80b-a3b", "hybrid"), ("llama-3.1-8b", "plain")):
        raw = _scenario(num_gpu_blocks=401)
        raw.update(model=model, workload={**raw["workload"], "num_requests": 20})
        prepared = prepare(validate_scenario(raw))
        with ResultFolder(tmp_path / name, file_format) as files:
            out = simulate(prepared, prepared.runs[0], files=files)
            files.finish(out.summary)
        steps = load(tmp_path / name).steps
        extra = (STATE_SLOTS,) if name == "hybrid" else ()
        assert tuple(steps.columns) == STEP_COLUMNS + extra
    hybrid = load(tmp_path / "hybrid").steps
    assert (hybrid[STATE_SLOTS] == hybrid["num_running"]).all()   # one slot per running request


def test_roofline_prices_each_sequences_state_read_and_write_and_its_run_method_agrees():
    # Cost (docs/hybrid-state-semantics.md): at TP 2 a sequence's states are 36 layers x 548,864
    # B; a step reads and writes them once: 2 x 36 x 548,864 = 39,518,208 B per scheduled
    # sequence at the roofline's bandwidth efficiency for the H200 x its 4.8 TB/s. The recurrence's
    # FLOPs (36 x 6 x 16 x 128 x 128 per token at its compute efficiency x 989 TFLOP/s) are far
    # below that for decodes.
    from cost_models.batch_shape import BatchShape
    from cost_models.roofline import RooflineCostModel
    h200 = load_hardware("h200")
    model = RooflineCostModel(QWEN3_NEXT, h200, tensor_parallel_size=2)
    k = model._k
    assert k.state_rw_s_per_seq == 39_518_208 / (h200.memory_bandwidth_Bps * model.bandwidth_efficiency)
    assert k.scan_s_per_token == 36 * 6 * 16 * 128 * 128 / (h200.bf16_flops * model.compute_efficiency)
    assert k.state_s(100, 100) == 100 * k.state_rw_s_per_seq
    assert k.state_s(8192, 1) == 8192 * k.scan_s_per_token   # a long prefill chunk: compute-bound
    for rows in (1, 7, 100):
        times = model.decode_steps_time_s(rows, rows * 300, 310, 20)
        assert times == [model.step_time_s(BatchShape.of_decode_rows(rows, rows * 300 + i * rows, 310 + i))
                         for i in range(20)]


def test_shipped_scenario_runs_at_the_state_cap_of_its_memory():
    # scenarios/hybrid_state_pool.yaml: the memory's blocks (rule H3) over 4 blocks a request
    # (rule H7): floor((6,960 - 1) / 4) = 1,739 running, below its 2,048 seats.
    from simulator.scenario import load_scenario
    prepared = prepare(load_scenario("scenarios/hybrid_state_pool.yaml"))
    run = prepared.runs[0]
    blocks = num_gpu_blocks(QWEN3_NEXT, load_hardware("h200"), 2, 0.92, 16, 8192, 2048)
    assert run.num_gpu_blocks == blocks == 6960
    steps = simulate(prepared, run).steps.to_columns()
    assert steps["num_running"].max() == (blocks - 1) // 4 == 1739 < run.options.max_num_seqs
    assert steps["num_waiting"][steps["num_running"] == 1739].max() > 0


def test_profiled_cost_model_refuses_a_hybrid_model():
    raw = _scenario(num_gpu_blocks=401)
    raw["cost_model"] = {"kind": "profiled", "profile": "h200-llama-3.1-8b-cuda_graph"}
    with pytest.raises(ScenarioError, match="cost_model.kind: 'profiled' has no state-layer terms "
                                            "for hybrid model qwen3-next-80b-a3b"):
        prepare(validate_scenario(raw))
