"""Number formats (cost_models/precision.py): bytes per weight and KV element in memory and in the
roofline's terms, the FP8 peak, and HuggingFace quantization_config read or refused in one line."""
import json

import pytest

from cost_models.batch_shape import BatchShape
from cost_models.hardware import load_hardware
from cost_models.memory import num_gpu_blocks, weights_bytes_per_rank
from cost_models.model_spec import PRESETS, load_model
from cost_models.precision import quantization_from_hf_config
from cost_models.roofline import RooflineCostModel
from simulator.runner import prepare
from simulator.scenario import ScenarioError, validate_scenario

LLAMA_70B = PRESETS["llama-3.1-70b"]
H200 = load_hardware("h200")


def test_fp8_halves_the_linear_weights_and_keeps_embeddings_in_bf16():
    fp8 = LLAMA_70B.with_precision(quantization="fp8")
    linear = LLAMA_70B.num_layers * LLAMA_70B.linear_params_per_layer
    assert weights_bytes_per_rank(LLAMA_70B, 1) - weights_bytes_per_rank(fp8, 1) == linear * (2 - 1)
    assert fp8.weight_bytes == LLAMA_70B.weight_bytes - linear


def test_a_70b_fp8_model_fits_one_h200_that_bf16_does_not():
    args = dict(hardware=H200, tensor_parallel_size=1, gpu_memory_utilization=0.9, block_size=16,
                max_num_batched_tokens=8192, max_num_seqs=256)
    with pytest.raises(ValueError, match="weights per GPU"):
        num_gpu_blocks(LLAMA_70B, **args)
    assert num_gpu_blocks(LLAMA_70B.with_precision(quantization="fp8"), **args) > 1000


def test_fp8_kv_cache_doubles_the_blocks_against_bf16_on_the_same_gpu():
    model = PRESETS["llama-3.1-8b"]
    args = dict(hardware=H200, tensor_parallel_size=1, gpu_memory_utilization=0.9, block_size=16,
                max_num_batched_tokens=8192, max_num_seqs=256)
    bf16, fp8 = num_gpu_blocks(model, **args), num_gpu_blocks(model.with_precision(kv_cache_dtype="fp8"), **args)
    assert model.with_precision(kv_cache_dtype="fp8").kv_bytes_per_token() * 2 == model.kv_bytes_per_token()
    assert fp8 in (2 * bf16, 2 * bf16 + 1)   # floor(M / (b/2)) is 2 floor(M / b) or one more


def test_int4_weight_bytes_include_the_group_scales():
    int4 = LLAMA_70B.with_precision(quantization="int4")
    linear = LLAMA_70B.num_layers * LLAMA_70B.linear_params_per_layer
    assert int4.weight_dtype_bytes == 0.5 + 2 / 128
    assert weights_bytes_per_rank(int4, 1) == pytest.approx(
        linear * (0.5 + 2 / 128) + (LLAMA_70B.num_params - linear) * 2, abs=1)


def test_roofline_decode_reads_half_the_weights_and_prefill_runs_at_the_fp8_peak():
    bf16 = RooflineCostModel(LLAMA_70B, H200, 2, step_overhead_s=0.0)
    fp8 = RooflineCostModel(LLAMA_70B.with_precision(quantization="fp8"), H200, 2, step_overhead_s=0.0)
    assert fp8._k.dense_weight_s == pytest.approx(bf16._k.dense_weight_s / 2, rel=1e-12)
    assert fp8._k.linear_s_per_token == pytest.approx(bf16._k.linear_s_per_token * 989 / 1979, rel=1e-12)
    assert fp8._k.lm_head_weight_s == bf16._k.lm_head_weight_s        # lm_head stays bf16
    shape = BatchShape.of([1] * 8, [1000] * 8)
    assert fp8.step_time_s(shape) < bf16.step_time_s(shape)


def test_fp8_on_ampere_is_weight_only():
    a100 = load_hardware("a100-80gb")
    bf16 = RooflineCostModel(LLAMA_70B, a100, 4)
    fp8 = RooflineCostModel(LLAMA_70B.with_precision(quantization="fp8"), a100, 4)
    assert fp8._k.linear_s_per_token == bf16._k.linear_s_per_token


@pytest.mark.parametrize("config, expected", [
    (None, "none"), ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "fp8"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128}, "int4"), ({"quant_method": "gptq", "bits": 8}, "int8"),
    ({"quant_method": "compressed-tensors",
      "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"}}}}, "fp8"),
    ({"quant_method": "compressed-tensors",
      "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int"}}}}, "int4"),
])
def test_hf_quantization_config_is_read(config, expected):
    assert quantization_from_hf_config(config) == expected


def _config(tmp_path, quantization_config):
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
           "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000,
           "max_position_embeddings": 512, "torch_dtype": "bfloat16",
           "quantization_config": quantization_config}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def test_a_config_with_fp8_quantization_is_run_as_fp8(tmp_path):
    assert load_model(_config(tmp_path, {"quant_method": "fp8"})).quantization == "fp8"


def test_an_unknown_quantization_method_is_a_one_line_error(tmp_path):
    with pytest.raises(ValueError) as err:
        load_model(_config(tmp_path, {"quant_method": "bitsandbytes", "load_in_4bit": True}))
    message = str(err.value)
    assert "\n" not in message and "quant_method" in message and "'bitsandbytes'" in message
    assert "allowed: fp8" in message


def _scenario(**engine):
    return validate_scenario({
        "name": "fp8", "model": "llama-3.1-70b", "hardware": "h200",
        "engine": {"max_model_len": 4096, **engine},
        "workload": {"arrival": {"kind": "poisson", "rate": 1.0}, "prompt_len": {"kind": "fixed", "value": 16},
                     "output_len": {"kind": "fixed", "value": 4}, "num_requests": 2},
        "schedulers": [{"preset": "vllm_v1"}]})


def test_a_scenario_sets_quantization_and_kv_cache_dtype():
    with pytest.raises(ScenarioError, match="weights per GPU"):
        prepare(_scenario())
    fp8 = prepare(_scenario(quantization="fp8"))
    both = prepare(_scenario(quantization="fp8", kv_cache_dtype="fp8"))
    assert fp8.model.weight_dtype_bytes == 1 and both.model.kv_dtype_bytes == 1
    assert both.runs[0].num_gpu_blocks in (2 * fp8.runs[0].num_gpu_blocks, 2 * fp8.runs[0].num_gpu_blocks + 1)


def test_an_unknown_quantization_in_a_scenario_is_a_one_line_error():
    with pytest.raises(ScenarioError) as err:
        _scenario(quantization="awq-8")
    assert "\n" not in str(err.value) and "engine.quantization" in str(err.value)


def test_a_kernel_table_refuses_another_number_format():
    raw = {"name": "p", "model": "qwen3-32b", "hardware": "rtx-pro-6000",
           "cost_model": {"kind": "profiled", "profile": "rtx-pro-6000-qwen3-32b"},
           "engine": {"max_model_len": 4096, "kv_cache_dtype": "fp8"},
           "workload": {"arrival": {"kind": "poisson", "rate": 1.0}, "prompt_len": {"kind": "fixed", "value": 16},
                        "output_len": {"kind": "fixed", "value": 4}, "num_requests": 2},
           "schedulers": [{"preset": "vllm_v1"}]}
    with pytest.raises(ScenarioError, match="engine.kv_cache_dtype: 'fp8' but cost model"):
        prepare(validate_scenario(raw))
