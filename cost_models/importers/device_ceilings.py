"""``device.csv``: a GPU's measured ceilings, written beside its step timings, or in the folder above
them (one capture of several models on one device: calibration/gpu_capture.sh).

Columns ``run, test, value`` (the names in cost_models/measured_ceilings.py); the tests read are
``copy_GBps`` (a device-to-device copy, read plus written bytes per second) and ``gemm_bf16_TFLOPs``
(a large square BF16 matrix multiply). Other tests are kept out (a CPU run's fp32 GEMM measures no
BF16 peak). The best run of each counts: a slower run measured a busier device, not a lower ceiling.
"""
from __future__ import annotations

from pathlib import Path

from cost_models.importers.forms import number, read_csv_columns
from cost_models.measured_ceilings import COPY_TEST, DEVICE_COLUMNS, DEVICE_FILE, GEMM_TEST, MeasuredCeilings

BF16_GEMM_TEST = GEMM_TEST.format(dtype="bf16")


def device_file(timings_path: Path) -> Path | None:
    """The device.csv beside ``timings_path`` (a file or its folder), else in the folder above."""
    timings_path = Path(timings_path)
    folder = timings_path if timings_path.is_dir() else timings_path.parent
    return next((p for p in (folder / DEVICE_FILE, folder.parent / DEVICE_FILE) if p.is_file()), None)


def read_device_ceilings(timings_path: Path) -> MeasuredCeilings | None:
    """The ceilings in device_file(timings_path); None where there is none."""
    path = device_file(timings_path)
    if path is None:
        return None
    best: dict[str, float] = {}
    for i, row in enumerate(read_csv_columns(path, DEVICE_COLUMNS)):
        if row["test"] in (COPY_TEST, BF16_GEMM_TEST):
            value = number(path, i, "value", row["value"], allow_zero=False)
            best[row["test"]] = max(best.get(row["test"], 0.0), value)
    if not best:
        return None
    copy, gemm = best.get(COPY_TEST), best.get(BF16_GEMM_TEST)
    return MeasuredCeilings(copy * 1e9 if copy else None, gemm * 1e12 if gemm else None,
                            str(path))
