"""Number formats: bytes per weight and per KV element, and which tensor-core peak the GEMMs run at.

vLLM's names: ``--dtype`` (the activations and unquantized weights), ``--quantization`` (the
decoder layers' linear weights) and ``--kv-cache-dtype``. What a quantization method changes, as
vLLM's linear methods do it:

- ``fp8``: weights in FP8 (E4M3) with per-tensor or per-channel scales (negligible bytes); on GPUs
  with FP8 tensor cores the activations are quantized per step too and the GEMMs run at the FP8
  peak (``Fp8LinearMethod``, W8A8); elsewhere (Ampere) the weights are read as FP8 and the GEMM
  runs in 16 bits (Marlin, weight-only).
- ``int8``: weight-only INT8 (W8A16, GPTQ/compressed-tensors 8-bit): a byte a weight, 16-bit GEMMs.
- ``int4``: weight-only INT4 (W4A16: GPTQ, AWQ): half a byte a weight plus one 16-bit scale per
  group of 128 weights (their default group size), 16-bit GEMMs.

Embeddings, lm_head, norms and MoE routers keep the activation dtype (vLLM builds them without
the quantization config). An FP8 KV cache stores one byte an element; attention still computes
in 16 bits (the cache is dequantized on read), so only its bytes change.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cost_models.hardware import HardwareSpec

INT4_GROUP_SIZE = 128       # GPTQ's and AWQ's default: one fp16 scale per 128 weights
SCALE_BYTES = 2
# Bytes per weight of each quantization; None: no quantization, the activation dtype's width.
WEIGHT_BYTES = {"none": None, "fp8": 1, "int8": 1, "int4": 0.5 + SCALE_BYTES / INT4_GROUP_SIZE}
QUANTIZATIONS = tuple(WEIGHT_BYTES)
# vLLM --kv-cache-dtype values; None: "auto", the activation dtype's width.
KV_CACHE_BYTES = {"auto": None, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
KV_CACHE_DTYPES = tuple(KV_CACHE_BYTES)
# vLLM --dtype values; None: "auto", the config's torch_dtype.
DTYPE_BYTES = {"auto": None, "bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}
DTYPES = tuple(DTYPE_BYTES)


def check_choice(where: str, value, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{where}: {value!r} is not modelled; allowed: {', '.join(allowed)}")
    return value


def weight_bytes_per_param(quantization: str, dtype_bytes: int) -> float:
    """Bytes of one quantized linear weight (``dtype_bytes`` where unquantized)."""
    width = WEIGHT_BYTES[check_choice("quantization", quantization, QUANTIZATIONS)]
    return dtype_bytes if width is None else width


def kv_bytes_per_element(kv_cache_dtype: str, dtype_bytes: int) -> int:
    """Bytes of one K or V element in the cache (``dtype_bytes`` for ``auto``)."""
    width = KV_CACHE_BYTES[check_choice("engine.kv_cache_dtype", kv_cache_dtype, KV_CACHE_DTYPES)]
    return dtype_bytes if width is None else width


def linear_peak_flops(hardware: HardwareSpec, quantization: str) -> float:
    """The dense peak the linear layers' GEMMs run at: FP8 where the weights are FP8 and the GPU
    has FP8 tensor cores (W8A8), else the 16-bit peak (weight-only formats dequantize to 16 bits)."""
    if quantization == "fp8" and hardware.fp8_flops is not None:
        return hardware.fp8_flops
    return hardware.bf16_flops


# HuggingFace quantization_config quant_method values whose weight format is fixed by the method.
_FIXED_METHODS = {"fp8": "fp8", "fbgemm_fp8": "fp8", "modelopt": "fp8"}
_BITS_METHODS = ("gptq", "awq")          # the format is the config's ``bits``
_BITS = {4: "int4", 8: "int8"}


def quantization_from_hf_config(config: dict | None) -> str:
    """The weight format a config.json's ``quantization_config`` names ("none" without one).

    A method or bit width servesim does not model is a one-line error, never 16-bit weights.
    """
    if not config:
        return "none"
    method = config.get("quant_method") if isinstance(config, dict) else None
    where = "model: config.json quantization_config"
    if method in _FIXED_METHODS:
        return _FIXED_METHODS[method]
    if method in _BITS_METHODS:
        return _bits(config.get("bits"), f"{where}.bits")
    if method == "compressed-tensors":
        return _compressed_tensors(config, where)
    allowed = ", ".join([*_FIXED_METHODS, *_BITS_METHODS, "compressed-tensors"])
    raise ValueError(f"{where}.quant_method: {method!r} is not modelled; allowed: {allowed}")


def _bits(bits, where: str) -> str:
    if bits not in _BITS:
        raise ValueError(f"{where}: {bits!r} is not modelled; allowed: {', '.join(map(str, _BITS))}")
    return _BITS[bits]


def _compressed_tensors(config: dict, where: str) -> str:
    """compressed-tensors: the weights' num_bits and type of its (first) config group."""
    groups = config.get("config_groups") or {}
    weights = next(iter(groups.values()), {}).get("weights") if isinstance(groups, dict) and groups else None
    if not isinstance(weights, dict):
        raise ValueError(f"{where}.config_groups: no weights scheme to read the format from")
    if weights.get("type") == "float":
        if weights.get("num_bits") != 8:
            raise ValueError(f"{where}.config_groups.weights.num_bits: {weights.get('num_bits')!r} "
                             f"float is not modelled; allowed: 8")
        return "fp8"
    return _bits(weights.get("num_bits"), f"{where}.config_groups.weights.num_bits")
