"""What one calibration run does. Importable without torch (the CLI parses options before it)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from calibration.grid import StepShape

DEVICES = ("cuda", "cpu")
DTYPES = ("bf16", "fp16", "fp32")
CUDA_GRAPH_MODES = ("off", "decode", "all")
NORMS = ("fused", "unfused")


@dataclass(frozen=True)
class CalibrationOptions:
    model: str                               # preset name or path to a HuggingFace config.json
    out_dir: Path
    device: str = "cpu"
    dtype: str | None = None                 # None: bf16 on cuda, fp32 on cpu
    tp: int = 1                              # >1: time one rank's shard, without the all-reduce
    quick: bool = False
    cuda_graph: str = "off"                  # off | decode (decode shapes) | all (every shape)
    repeats: int = 5
    warmup: int = 2
    time_budget_s: float | None = None       # stop starting new shapes once this is spent
    # None: free device memory less a reserve on cuda, 1 GiB on cpu
    kv_budget_bytes: int | None = None
    seed: int = 0
    grid: tuple[StepShape, ...] | None = None   # None: the quick or full grid
    # fused: torch's rms_norm; unfused: the textbook fp32 upcast/pow/mean/rsqrt/mul chain (as in
    # HF transformers' LlamaRMSNorm): more, smaller kernels per layer, like plain-PyTorch engines.
    norm: str = "fused"

    def __post_init__(self) -> None:
        _one_of("device", self.device, DEVICES)
        if self.dtype is not None:
            _one_of("dtype", self.dtype, DTYPES)
        _one_of("cuda_graph", self.cuda_graph, CUDA_GRAPH_MODES)
        _one_of("norm", self.norm, NORMS)
        if self.cuda_graph != "off" and self.device != "cuda":
            raise ValueError(f"cuda_graph: {self.cuda_graph!r} needs device 'cuda', "
                             f"not {self.device!r}; use 'off'")
        _at_least("tp", self.tp, 1)
        _at_least("repeats", self.repeats, 1)
        _at_least("warmup", self.warmup, 0)
        if self.time_budget_s is not None and not self.time_budget_s > 0:
            raise ValueError(f"time_budget_s: {self.time_budget_s} must be > 0 (or unset)")
        if self.kv_budget_bytes is not None:
            _at_least("kv_budget_bytes", self.kv_budget_bytes, 1)
        if self.grid is not None and not self.grid:
            raise ValueError("grid: () is empty; give at least one StepShape or leave it unset")

    @property
    def resolved_dtype(self) -> str:
        return self.dtype or ("bf16" if self.device == "cuda" else "fp32")


def _one_of(field: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{field}: {value!r} is not one of {', '.join(allowed)}")


def _at_least(field: str, value: int, low: int) -> None:
    if not isinstance(value, int) or value < low:
        raise ValueError(f"{field}: {value!r} must be an integer >= {low}")
