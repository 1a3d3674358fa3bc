"""The device's ceilings, measured before the grid: a device-to-device copy and a large square GEMM.

They bound what a fit may find (cost_models/measured_ceilings.py): no kernel in the grid's steps
streams faster than the copy or multiplies faster than the GEMM. Sizes are large enough to reach
the device's plateau (a 1 GiB copy, 8192^3 on a GPU), small enough on a CPU for a test to run.
Written as ``device.csv`` (run, test, value), the H200 reference's form, which
cost_models/importers/device_ceilings.py reads beside the timings.
"""
from __future__ import annotations

import statistics
from pathlib import Path

import torch

from calibration.output import write_csv_atomic
from calibration.timer import time_eager
from cost_models.measured_ceilings import COPY_TEST, DEVICE_COLUMNS, DEVICE_FILE, GEMM_TEST

COPY_BYTES = {"cuda": 1 << 30, "cpu": 256 << 20}   # a CPU copy well past its last-level cache
GEMM_SIZE = {"cuda": 8192, "cpu": 1024}


def measure_ceilings(device: torch.device, dtype: torch.dtype, dtype_name: str, warmup: int,
                     repeats: int) -> list[dict]:
    """device.csv's rows: the median over ``repeats`` of the copy's read plus written bytes per second
    and of the GEMM's FLOP/s."""
    copy_bytes, n = COPY_BYTES[device.type], GEMM_SIZE[device.type]
    copy_ms = _copy_ms(device, copy_bytes, warmup, repeats)
    gemm_ms = _gemm_ms(device, dtype, n, warmup, repeats)
    if device.type == "cuda":
        torch.cuda.empty_cache()   # the grid's KV pool is planned on the memory left free
    return [{"run": 1, "test": COPY_TEST, "value": _per_s(2 * copy_bytes, copy_ms, 1e9)},
            {"run": 1, "test": GEMM_TEST.format(dtype=dtype_name), "value": _per_s(2 * n ** 3, gemm_ms, 1e12)}]


def _copy_ms(device: torch.device, num_bytes: int, warmup: int, repeats: int) -> list[float]:
    src = torch.ones(num_bytes // 2, dtype=torch.float16, device=device)
    dst = torch.empty_like(src)
    return time_eager(lambda: dst.copy_(src), device, warmup, repeats)


def _gemm_ms(device: torch.device, dtype: torch.dtype, n: int, warmup: int, repeats: int) -> list[float]:
    a = torch.randn(n, n, dtype=dtype, device=device)
    b, out = torch.randn_like(a), torch.empty_like(a)
    return time_eager(lambda: torch.matmul(a, b, out=out), device, warmup, repeats)


def write_ceilings(out_dir: Path, rows: list[dict]) -> Path:
    path = Path(out_dir) / DEVICE_FILE
    write_csv_atomic(path, DEVICE_COLUMNS, rows)
    return path


def _per_s(amount: float, times_ms: list[float], unit: float) -> float:
    return float(f"{amount / (statistics.median(times_ms) / 1e3) / unit:.4g}")
