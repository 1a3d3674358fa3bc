"""What a GPU was measured to reach: its copy bandwidth and BF16 GEMM rate, as fractions of its datasheet.

A fitted efficiency is a fraction of the datasheet peak (cost_models/hardware.py), and no kernel
beats what the device itself reaches: a device-to-device copy bounds every streaming kernel, a large
square BF16 GEMM every matrix multiply. Without a measurement the bound is the datasheet (1.0). The
measurements travel with the timings they were taken beside (``device.csv``: the H200 reference's,
and the calibration harness's, calibration/ceilings.py), and a fit holds its efficiencies to them
(cost_models/fit/physics_fit.py, cost_models/fit/roofline_fit.py): a fit left free of them can put
a term above what the device reaches and move the missing time into other terms (the H200 case:
cost_models/profiles/README.md, "Physics files").
"""
from __future__ import annotations

from dataclasses import dataclass

from cost_models.hardware import HardwareSpec

BANDWIDTH, FLOPS = "bandwidth", "flops"
# device.csv, as the harness writes it and the importer reads it: rows of (run, test, value).
DEVICE_FILE, DEVICE_COLUMNS = "device.csv", ("run", "test", "value")
COPY_TEST = "copy_GBps"            # a device-to-device copy's read plus written bytes per second
GEMM_TEST = "gemm_{dtype}_TFLOPs"  # a large square GEMM in that dtype; bf16 bounds the fit


@dataclass(frozen=True)
class MeasuredCeilings:
    """One device's best measured rates (None: not measured) over the runs of one file."""
    memory_bandwidth_Bps: float | None
    bf16_flops: float | None
    file: str

    def to_json(self) -> dict:
        return {"memory_bandwidth_GBps": _rounded(self.memory_bandwidth_Bps, 1e9),
                "bf16_tflops": _rounded(self.bf16_flops, 1e12), "file": self.file, "of_runs": "the best"}


@dataclass(frozen=True)
class PeakFractions:
    """The most of each datasheet peak a fitted efficiency may reach: 1.0 unmeasured."""
    bandwidth: float = 1.0
    flops: float = 1.0

    def of(self, peak: str) -> float:
        return {BANDWIDTH: self.bandwidth, FLOPS: self.flops}[peak]

    def to_json(self) -> dict:
        return {BANDWIDTH: round(self.bandwidth, 4), FLOPS: round(self.flops, 4)}


def peak_fractions(measured: list[tuple[HardwareSpec, MeasuredCeilings | None]]) -> PeakFractions:
    """The fractions every (GPU, its measured ceilings) pair allows: per GPU the best measurement
    over its sources, over GPUs the least (one shared coefficient must hold on each of them)."""
    best: dict[str, list] = {}   # GPU name -> [its spec, best bandwidth, best FLOP/s] (0: unmeasured)
    for hardware, ceilings in measured:
        entry = best.setdefault(hardware.name, [hardware, 0.0, 0.0])
        if ceilings is not None:
            entry[1] = max(entry[1], ceilings.memory_bandwidth_Bps or 0.0)
            entry[2] = max(entry[2], ceilings.bf16_flops or 0.0)
    bandwidth = [b / h.memory_bandwidth_Bps if b else 1.0 for h, b, _ in best.values()]
    flops = [f / h.bf16_flops if f else 1.0 for h, _, f in best.values()]
    return PeakFractions(min(bandwidth, default=1.0), min(flops, default=1.0))


def _rounded(value: float | None, unit: float) -> float | None:
    return None if value is None else float(f"{value / unit:.6g}")
