"""vLLM's GPU-dependent scheduler defaults (semantics §8, trap 11)."""
from __future__ import annotations

from cost_models.hardware import HardwareSpec

GiB = 1024 ** 3


def is_large_gpu(hardware: HardwareSpec) -> bool:
    """vLLM [ARGS]: >= 70 GiB of device memory and not an A100 gets the larger defaults."""
    return hardware.memory_bytes >= 70 * GiB and "a100" not in hardware.name.lower()


def default_max_num_batched_tokens(hardware: HardwareSpec, entrypoint: str = "serve") -> int:
    if is_large_gpu(hardware):
        return 8192 if entrypoint == "serve" else 16384
    return 2048 if entrypoint == "serve" else 8192


def default_max_num_seqs(hardware: HardwareSpec) -> int:
    return 1024 if is_large_gpu(hardware) else 256
