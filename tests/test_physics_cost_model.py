"""The physics cost model (cost_models/physics.py): hand-worked terms, non-negative fits shared
across models, leave-one-model-out error on the shared H200 timings, and where a file is valid."""
from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from cost_models.batch_shape import BatchShape, prefill_pairs_at_tile, work_counts_at_tile
from cost_models.factory import make_cost_model
from cost_models.hardware import HardwareSpec, load_hardware
from cost_models.launches import HARNESS_LAUNCHES, HARNESS_QUERY_TILE, VLLM_LAUNCHES, VLLM_QUERY_TILE
from cost_models.model_spec import ModelSpec, load_model
from cost_models.physics import TERMS, PhysicsCostModel
from cost_models.physics_work import elementwise_elements_per_token, physics_work
from cost_models.physics_file import load_physics
from cost_models.profiles import PROFILES_DIR

REFERENCE = Path(__file__).resolve().parents[1] / ".." / "shared" / "reference"
H200_STEPS = REFERENCE / "h200" / "steps.csv"
TINY = ModelSpec("tiny", num_layers=2, hidden_size=8, num_attention_heads=2, num_kv_heads=1,
                 intermediate_size=16, vocab_size=10, max_model_len=100)
# Unit peaks: every feature is then a plain FLOP or byte count.
UNIT_GPU = HardwareSpec("unit", memory_bytes=1, memory_bandwidth_Bps=1.0, bf16_flops=1.0, fp8_flops=None,
                        interconnect_bandwidth_Bps=1.0, source="test")
# One prefill chunk of 2 tokens on 3 cached, one decode at context 5.
MIXED = BatchShape.of([2, 1], [3, 5])


def test_features_of_a_tiny_model_by_hand():
    # head_dim 4: q 8, kv 4. Groups (params): QKV 8*16=128, O 64, gate_up 256, down 128; per group
    # 2 layers x 2 FLOPs = 4p FLOPs per token and 2 layers x 2 bytes = 4p bytes, so the GEMMs give
    # 4 x 576 x max(tokens, gemm_balance) = 2304 x 3 (gemm_tile_tokens 1: no rounding).
    # Activations: 14*8 + (2*8 + 2*4) + 6*16 = 232 elements x 2 bytes x 2 layers per token.
    # Pairs: 2 x (3 + 3/2) = 9, x 4 x 8 x 2 FLOPs. KV: 32 bytes per token (K and V, 1 head of 4,
    # 2 layers, 2 bytes): the decode's 6 tokens once, the prefill's 3 cached tokens once for each
    # of the 2 query heads (192 + 192). Launches: 22 + 8 x 2 norms = 38 a layer, 5 more for the second attention
    # group of a mixed step: 2 x 43. lm_head: max(2*8*10 x 2 rows, 8*10*2 bytes). Logits: 2 x 10 x
    # 4 bytes a row. The decode's 5 + 1 pairs in a step that prefills, x 64 FLOPs a pair. The unit
    # GPU has no SM count or L2, so mixed_decode_waves and mixed_decode_rereads are not computed
    # (0). A dense model has no MoE blocks: moe_experts is 0.
    features = physics_work(TINY, UNIT_GPU).features(MIXED.work_counts, 1.0)
    assert features.tolist() == [1.0, 6912.0, 2784.0, 576.0, 192.0, 192.0, 86.0, 4.0, 320.0, 160.0, 384.0, 0.0,
                                 0.0, 0.0, 86.0]


def test_a_prefill_reads_the_cached_kv_once_per_query_head():
    # TINY at TP 2: one query head and one (replicated) KV head a rank, so the read is one head's;
    # a 32-head model with 8 KV heads reads each KV head 4 times, at any TP that splits both.
    index = TERMS.index("prefill_kv_read")
    assert physics_work(TINY, UNIT_GPU, 2).features(MIXED.work_counts, 1.0)[index] == 96.0
    gqa = dataclasses.replace(TINY, num_attention_heads=8, num_kv_heads=2, hidden_size=32)
    assert physics_work(gqa, UNIT_GPU).features(MIXED.work_counts, 1.0)[index] == 3 * 4 * 64.0
    assert physics_work(gqa, UNIT_GPU, 2).features(MIXED.work_counts, 1.0)[index] == 3 * 4 * 32.0


def test_a_prefill_attention_kernel_computes_whole_query_tiles():
    # Tile 1 is the causal count: 2 x (3 + 3/2) = 9 pairs for MIXED's chunk, as work_counts has it.
    assert prefill_pairs_at_tile([2, 1], [3, 5], 1) == MIXED.work_counts[3] == 9.0
    # 64-row tiles: the 2-token chunk is one tile whose 64 rows see its 3 + 2 keys (the decode is
    # not a prefill); 130 tokens are 3 tiles seeing 64, 128 and 130 keys: 64 x 322.
    assert prefill_pairs_at_tile([2, 1], [3, 5], 64) == 64 * 5
    assert prefill_pairs_at_tile([130], [0], 64) == 64 * (64 + 128 + 130)
    assert work_counts_at_tile(MIXED, 64) == (*MIXED.work_counts[:3], 320.0, *MIXED.work_counts[4:])
    # The closed form against the tiles enumerated: a tile of `tile` rows whose last row is query
    # `last` attends over ctx + last + 1 keys (tile 1: each query over its causal keys).
    rng = np.random.default_rng(5)
    for _ in range(20):
        n, c, tile = int(rng.integers(2, 300)), int(rng.integers(0, 2000)), int(rng.choice([1, 16, 64, 128]))
        enumerated = sum(tile * (c + min(t0 + tile, n)) for t0 in range(0, n, tile))
        assert prefill_pairs_at_tile([n, 1], [c, 7], tile) == enumerated
        assert tile > 1 or BatchShape.of([n, 1], [c, 7]).work_counts[3] == enumerated
    with pytest.raises(ValueError, match=r"attention_query_tile: 0 is not"):
        PhysicsCostModel(TINY, UNIT_GPU, dict.fromkeys(TERMS, 0.0), 1.0, attention_query_tile=0)
    # A file's tile is checked as given, not coerced: "64" is refused naming the field.
    data = {**_shipped("physics-rtx-pro-6000-kernels"), "attention_query_tile": "64"}
    with pytest.raises(ValueError, match=r"attention_query_tile: '64' is not"):
        load_physics(data, load_model("llama-3.1-8b"), load_hardware("rtx-pro-6000"), 1)


def test_fused_kernels_count_only_their_own_traffic():
    # vLLM's kernels (one launch a norm): two fused add + RMSNorms 4 x 8 each, RoPE on q and k
    # 2 x (8 + 4), SiLU-and-mul 3 x 16: 136 elements, x 2 bytes x 2 layers x 3 tokens = 1632 (the
    # harness's coarser count above: 2784). QK-norm rewrites q and k once more: 160 -> 1920; at
    # TP 2 the per-rank q, k and MLP halve, the hidden state does not: 64 + 24 / 2 + 48 / 2 = 100.
    index = TERMS.index("activation_traffic")
    assert physics_work(TINY, UNIT_GPU, launches=VLLM_LAUNCHES).features(MIXED.work_counts, 1.0)[index] == 1632.0
    qk = dataclasses.replace(TINY, qk_norm=True)
    assert physics_work(qk, UNIT_GPU, launches=VLLM_LAUNCHES).features(MIXED.work_counts, 1.0)[index] == 1920.0
    assert elementwise_elements_per_token(TINY, 2, VLLM_LAUNCHES) == 100.0
    assert elementwise_elements_per_token(TINY, 1, HARNESS_LAUNCHES) == 232.0


TINY_MOE = dataclasses.replace(TINY, name="tiny-moe", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=4)
EXPERTS = TERMS.index("moe_experts")


@pytest.mark.parametrize("tokens, gemm, moe", [
    # Per layer the router has 8 x 4 = 32 params, an expert 3 x 8 x 4 = 96; over 2 layers at 2 FLOPs
    # and 2 bytes a param: router 128 FLOPs a token and 128 bytes, an expert 384 FLOPs a pass and
    # 384 bytes. Distinct experts 4 (1 - (1 - 2/4)^T). gemm_balance 8; gemm is QKV and O alone
    # (4 x 192 params x max(T, 8)): the MLP is the MoE block.
    (1, 6144.0, 1024.0 + 6144.0),          # router max(128, 1024); experts max(384 x 2, 8 x 384 x 2)
    (8, 6144.0, 1024.0 + 12240.0),         # router max(1024, 1024); experts max(6144, 8 x 384 x 3.984375)
    (4096, 3145728.0, 524288.0 + 3145728.0),   # router 128 x 4096; experts 384 x 2 x 4096 > 8 x 384 x 4
])
def test_moe_experts_by_hand(tokens, gemm, moe):
    work = physics_work(TINY_MOE, UNIT_GPU)
    counts = BatchShape.of([tokens], [0]).work_counts
    features = work.features(counts, 8.0)
    assert (features[1], features[EXPERTS]) == (gemm, moe)
    assert work.feature_columns(np.array([counts], float), 8.0).tolist() == [features.tolist()]


LLAMA_8B = ModelSpec("llama-like", num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                     intermediate_size=14336, vocab_size=128256, max_model_len=32768)
SM188 = HardwareSpec("sm188", memory_bytes=1, memory_bandwidth_Bps=1.0, bf16_flops=1.0, fp8_flops=None,
                     interconnect_bandwidth_Bps=1.0, source="test", sm_count=188, l2_bytes=128 * 2**20)
WAVES = TERMS.index("mixed_decode_waves")


def _mixed_with_decodes(num_decodes: int, context: int) -> BatchShape:
    return BatchShape.of([16] + [1] * num_decodes, [0] + [context] * num_decodes)


@pytest.mark.parametrize("num_decodes, tp, waves", [(1, 1, 1), (4, 1, 1), (8, 1, 2), (64, 1, 11), (64, 2, 6)])
def test_mixed_decode_waves_by_hand(num_decodes, tp, waves):
    # A 16-token chunk with decodes at 16,384 context: each (decode, query head) is one CTA walking
    # 16,385 keys (its context and its new key); 32 query heads per rank (16 at tp 2) over 188 SMs:
    # 1 x 32 = 32 and 4 x 32 = 128 CTAs fit one wave, 8 x 32 = 256 need 2, 64 x 32 = 2048 need
    # ceil(10.9) = 11, 64 x 16 = 1024 need ceil(5.4) = 6. Feature: 32 layers x waves x 16,385.
    work = physics_work(LLAMA_8B, SM188, tp)
    counts = _mixed_with_decodes(num_decodes, 16384).work_counts
    assert work.features(counts, 1.0)[WAVES] == 32 * waves * 16385
    # At 21.7 ns a key (the grid's one decode: 356 us a layer), 1 decode costs 32 x 355.6 us and
    # 64 decodes 11 times that; decode-only steps have no such cost (their own kernel splits the keys).
    coef = np.zeros(len(TERMS))
    coef[WAVES] = 21.7e-9
    assert coef @ work.features(counts, 1.0) == pytest.approx(32 * waves * 16385 * 21.7e-9, rel=1e-12)
    decode_only = BatchShape.of([1] * num_decodes, [16384] * num_decodes).work_counts
    assert work.features(decode_only, 1.0)[WAVES] == 0.0


def test_mixed_decode_waves_read_the_mean_decode_and_agree_on_columns():
    # Decodes at 100 and 300: (100 + 300 + 2) / 2 = 201 keys a CTA, 64 CTAs: one wave of 201, x 32 layers.
    work = physics_work(LLAMA_8B, SM188)
    counts = BatchShape.of([16, 1, 1], [0, 100, 300]).work_counts
    assert work.features(counts, 1.0)[WAVES] == 32 * 201
    rows = np.array([counts, _mixed_with_decodes(64, 16384).work_counts, MIXED.work_counts], float)
    columns = work.feature_columns(rows, 1.0)
    assert columns.tolist() == [work.features(tuple(r), 1.0).tolist() for r in rows.tolist()]


def test_mixed_decode_waves_refuse_a_gpu_without_an_sm_count_or_an_l2():
    coefficients = {t: 0.0 for t in TERMS} | {"mixed_decode_waves": 2e-8}
    with pytest.raises(ValueError, match="hardware.sm_count: unknown for 'unit'"):
        PhysicsCostModel(TINY, UNIT_GPU, coefficients, 1.0)
    with pytest.raises(ValueError, match="hardware.l2_mib: unknown for 'sm188'"):
        PhysicsCostModel(TINY, dataclasses.replace(SM188, l2_bytes=None), coefficients, 1.0)
    assert PhysicsCostModel(TINY, SM188, coefficients, 1.0).step_time_s(MIXED) > 0


def test_step_time_is_the_longer_of_host_and_device_plus_the_overhead():
    ones = dict.fromkeys(TERMS, 1.0) | {"mixed_decode_waves": 0.0}   # the unit GPU has no SM count
    device = PhysicsCostModel(TINY, UNIT_GPU, {**ones, "host_launch": 0.0}, 1.0)
    # The decode's walk (384) outlasts its KV traffic (192): only the longer counts.
    assert device.step_time_s(MIXED) == 1.0 + 6912 + 2784 + 576 + 192 + 86 + 4 + 320 + 160 + max(384, 192)
    host = PhysicsCostModel(TINY, UNIT_GPU, {**ones, "host_launch": 1000.0}, 1.0)
    assert host.step_time_s(MIXED) == 1.0 + 86 * 1000.0


def test_a_gemm_tile_rounds_the_tokens_the_gemms_compute():
    # 3 tokens on 128-row tiles compute as 128: 2304 x 128 (above the weight floor, 2304 x 1).
    tiled = physics_work(TINY, UNIT_GPU, gemm_tile_tokens=128).features(MIXED.work_counts, 1.0)
    assert tiled[1] == 2304.0 * 128


def test_a_negative_coefficient_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"coefficients\.gemm: -1"):
        PhysicsCostModel(TINY, UNIT_GPU, {**dict.fromkeys(TERMS, 1.0), "gemm": -1.0}, 1.0)


def test_the_run_method_gives_step_time_to_the_bit():
    model = PhysicsCostModel(load_model("llama-3.1-8b"), load_hardware("h200"), dict.fromkeys(TERMS, 1e-3), 1.7)
    times = model.decode_steps_time_s(7, 900, 200, 20)
    assert times == [model.step_time_s(BatchShape.of_decode_rows(7, 900 + 7 * i, 200 + i)) for i in range(20)]


def _shipped(name: str) -> dict:
    return json.loads((PROFILES_DIR / f"{name}.json").read_text())


@pytest.mark.parametrize("name", ["physics-h200-cuda_graph", "physics-h200-eager", "physics-rtx-pro-6000-kernels",
                                  "physics-rtx-4090-kernels", "physics-a100-kernels", "physics-h100-kernels"])
def test_shipped_physics_files_are_non_negative_and_say_what_they_were_fitted_on(name):
    data = _shipped(name)
    assert all(v >= 0 for v in data["coefficients"].values())
    fitted = data["fitted_on"]
    assert fitted["models"] and fitted["gpus"] and fitted["tensor_parallel_sizes"] and fitted["modes"]
    if len(fitted["models"]) == 1:   # the RTX 4090: one model profiled, nothing held out, and it says so
        assert data["leave_one_model_out"] == {} and "one model" in data["leave_one_model_out_note"]
    else:
        assert set(data["leave_one_model_out"]) == set(fitted["models"])
    # The harness's prefill attention tile on the H200, vLLM's on the kernel profiles.
    assert data["attention_query_tile"] == (HARNESS_QUERY_TILE if "h200" in name else VLLM_QUERY_TILE)


def test_an_unseen_larger_model_warns_once_naming_the_field():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = make_cost_model("physics", {"profile": "physics-h200-cuda_graph"}, load_model("llama-2-70b"),
                                load_hardware("h200"), 1)
        model.step_time_s(BatchShape.of([1], [10]))
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and "model.num_layers: 80" in messages[0]


def test_kind_physics_refuses_a_file_of_another_form():
    with pytest.raises(ValueError, match=r"cost_model\.profile: 'h200-llama-3.1-8b-eager' is a parametric file"):
        make_cost_model("physics", {"profile": "h200-llama-3.1-8b-eager"}, load_model("llama-3.1-8b"),
                        load_hardware("h200"), 1)


def _h200_lomo(mode: str) -> dict:
    if not H200_STEPS.is_file():
        pytest.skip(f"{H200_STEPS} absent: the shared H200 timings are not on this machine")
    from cost_models.fit.physics_fit import leave_one_model_out
    from cost_models.fit.physics_sources import from_step_timings
    samples = [from_step_timings(H200_STEPS, m, mode, "h200") for m in ("llama-3.1-8b", "qwen3-8b", "llama-2-7b")]
    return leave_one_model_out(samples, host_bound=mode == "eager")


def test_h200_cuda_graph_leave_one_model_out_per_family():
    # The acceptance's 5% for every model and family, the efficiencies held to the device's
    # measured ceilings (device.csv: 766 of 989 TFLOP/s, 4.18 of 4.8 TB/s). Free of them, the fit put
    # the GEMMs at the datasheet peak, the missing time in the activations and the per-step
    # overhead, and Qwen3-8B's decodes came out 6.3% off (cost_models/profiles/README.md).
    lomo = _h200_lomo("cuda_graph")
    for model, errs in lomo.items():
        for family in ("prefill", "decode", "mixed"):
            if family in errs:
                assert errs[family]["mape_pct"] <= 5.0, (model, family, errs[family])
    shipped = _shipped("physics-h200-cuda_graph")
    assert lomo == shipped["leave_one_model_out"]
    # The floors the file was fitted under are the reference's best runs over the H200 datasheet.
    ceilings = shipped["measured_ceilings"]["h200"]
    assert (ceilings["memory_bandwidth_GBps"], ceilings["bf16_tflops"]) == (4179.2, 766.14)
    assert (shipped["peak_fractions"]["bandwidth"], shipped["peak_fractions"]["flops"]) == (
        round(4179.2 / 4800, 4), round(766.14 / 989, 4))


def test_h200_eager_leave_one_model_out_is_what_the_shipped_file_reports():
    # Eager steps are host-bound and noisy (llama-2-7b decodes of one shape vary 30-52 ms): the
    # acceptance's 8% is not reached; the file reports what is (cost_models/profiles/README.md).
    assert _h200_lomo("eager") == _shipped("physics-h200-eager")["leave_one_model_out"]


def test_an_unseen_model_is_priced_from_its_config():
    if not H200_STEPS.is_file():
        pytest.skip(f"{H200_STEPS} absent: the shared H200 timings are not on this machine")
    from cost_models.fit.physics_fit import fit_physics, predict
    from cost_models.fit.physics_sources import from_step_timings
    llamas = [from_step_timings(H200_STEPS, m, "cuda_graph", "h200") for m in ("llama-3.1-8b", "llama-2-7b")]
    qwen = from_step_timings(H200_STEPS, "qwen3-8b", "cuda_graph", "h200")
    fit = fit_physics(llamas)
    assert all(v >= 0 for v in fit.coefficients.values())
    # Qwen3-8B's 36 layers and QK-norm launches make it ~20% slower at batch 1 than Llama-3.1-8B.
    error = np.abs(predict(fit, qwen) / qwen.time_s - 1)
    assert float(np.mean(error)) < 0.075   # 6.9% (the launch/overhead tie above)


def test_the_experts_are_priced_at_gemms_coefficient():
    coefficients = dict.fromkeys(TERMS, 0.0) | {"gemm": 2.0, "moe_experts": 2.0}
    model = PhysicsCostModel(TINY_MOE, UNIT_GPU, coefficients, 8.0)
    shape = BatchShape.of([8], [0])
    assert model.step_time_s(shape) == 2.0 * (6144.0 + 1024.0 + 12240.0)   # test_moe_experts_by_hand, 8 tokens
    with pytest.raises(ValueError, match=r"coefficients\.moe_experts: 3\.0; it is priced at gemm's"):
        PhysicsCostModel(TINY_MOE, UNIT_GPU, coefficients | {"moe_experts": 3.0}, 8.0)


LSS_MOE = REFERENCE / "llmservingsim" / "profiles" / "RTXPRO6000" / "Qwen" / "Qwen3-30B-A3B-Instruct-2507" / "bf16"


def test_kernel_sums_of_an_moe_profile_add_its_moe_block_where_it_was_timed():
    if not LSS_MOE.is_dir():
        pytest.skip(f"{LSS_MOE} absent: the shared LLMServingSim profiles are not on this machine")
    from cost_models.fit.physics_sources import from_llmservingsim
    from cost_models.fit.table_fit import fit_tables
    from cost_models.importers import read_llmservingsim
    samples = from_llmservingsim(LSS_MOE)
    # moe.csv is tp 1 only: tp 2 sums would miss the experts; its lm_head and sampler are rows of their own.
    assert [(s.tensor_parallel_size, s.part) for s in samples] == [(1, "step"), (1, "lm_head and sampler")]
    tp1 = samples[0]
    tables = read_llmservingsim(LSS_MOE)[0]
    fit = fit_tables(tables, holdout_every=0, routing=(128, 8))
    one = [i for i, s in enumerate(tp1.shapes) if s.num_tokens == 1 and s.work_counts[1] == 16][0]
    attention = tables.attention[4][(tables.attention[2] == 1) & (tables.attention[3] == 16)
                                    & (tables.attention[0] == 0)][0]
    # One decode at context 16: 48 layers x (dense ops + attention + the MoE block at 1 token, 8 experts).
    expected = 48 * (fit.layer(1) + attention + fit.moe.time_at(1, 8.0)) + fit.whole_model(1) + fit.sequence(1)
    assert tp1.time_s[one] == pytest.approx(expected, rel=1e-12)
    assert fit.moe.time_at(1, 8.0) == pytest.approx(50.2297e-6, rel=1e-9)   # moe.csv: 1 token, 8 experts
