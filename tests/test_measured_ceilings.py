"""A fit's efficiencies are held to what the device was measured to reach (cost_models/measured_ceilings.py,
cost_models/importers/device_ceilings.py): worked fractions, the best of a file's runs, and fits
(physics and roofline) that respect the ceilings exactly where they bind."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from cost_models.fit.physics_fit import PhysicsSamples, fit_physics
from cost_models.fit.physics_sources import KERNEL_SUM_TERMS
from cost_models.fit.roofline_fit import fit_roofline
from cost_models.hardware import load_hardware
from cost_models.importers.device_ceilings import read_device_ceilings
from cost_models.launches import HARNESS_LAUNCHES, VLLM_LAUNCHES
from cost_models.measured_ceilings import MeasuredCeilings, PeakFractions, peak_fractions
from cost_models.physics import EFFICIENCY_TERMS, FITTED_TERMS, PEAK_OF, coefficient_vector, step_time_of
from tests.test_physics_rereads import LLAMA_8B, QWEN_LIKE, _grid
from tests.test_roofline_fit import TRUTH, _measured

H200 = load_hardware("h200")   # 4800 GB/s, 989 TFLOP/s dense BF16 (hardware.csv)
DEVICE_CSV = "run,test,value\n1,copy_GBps,4179.2\n1,gemm_bf16_TFLOPs,761.45\n2,copy_GBps,4059.3\n" \
             "2,gemm_bf16_TFLOPs,766.14\n2,gemm_fp32_TFLOPs,60.0\n"


def test_the_fractions_are_the_best_run_over_the_datasheet(tmp_path):
    (tmp_path / "device.csv").write_text(DEVICE_CSV)
    ceilings = read_device_ceilings(tmp_path / "timings.csv")
    assert (ceilings.memory_bandwidth_Bps, ceilings.bf16_flops) == (4179.2e9, 766.14e12)   # each test's best run
    fractions = peak_fractions([(H200, ceilings)])
    assert (fractions.bandwidth, fractions.flops) == pytest.approx((4179.2 / 4800, 766.14 / 989), rel=1e-12)


def test_unmeasured_is_the_datasheet_and_gpus_sharing_a_fit_take_the_least():
    assert peak_fractions([(H200, None)]) == PeakFractions(1.0, 1.0)
    slow, fast = MeasuredCeilings(3600e9, None, "a"), MeasuredCeilings(4200e9, 700e12, "b")
    # One GPU's sources: its best; another GPU (unmeasured, so 1.0) cannot loosen the shared bound.
    other = dataclasses.replace(H200, name="other")
    assert peak_fractions([(H200, slow), (H200, fast), (other, None)]) == PeakFractions(4200 / 4800, 700 / 989)


def test_the_ceilings_lie_beside_the_timings_or_in_the_folder_above(tmp_path):
    (tmp_path / "model").mkdir()
    assert read_device_ceilings(tmp_path / "model" / "timings.csv") is None
    (tmp_path / "device.csv").write_text(DEVICE_CSV)
    assert read_device_ceilings(tmp_path / "model").file == str(tmp_path / "device.csv")
    (tmp_path / "model" / "device.csv").write_text("run,test,value\n1,copy_GBps,1000\n")
    beside = read_device_ceilings(tmp_path / "model" / "timings.csv")
    assert (beside.memory_bandwidth_Bps, beside.bf16_flops) == (1000e9, None)


def test_a_bad_value_is_one_line_naming_file_row_and_column(tmp_path):
    (tmp_path / "device.csv").write_text("run,test,value\n1,copy_GBps,fast\n")
    with pytest.raises(ValueError, match=r"device\.csv: row 2, column value: 'fast' is not a number"):
        read_device_ceilings(tmp_path)


TRUTH_COEFFICIENTS = dict.fromkeys(FITTED_TERMS, 0.0) | {
    "gemm": 1.3, "activation_traffic": 2.0, "prefill_attention": 1.4, "decode_kv_read": 1.2,
    "prefill_kv_read": 1.7, "layer_launch": 3e-6, "layer_seq": 2e-7, "lm_head": 1.3, "logits": 1.8,
    "mixed_decode_attention": 30.0, "mixed_decode_waves": 2e-8}


def _synthetic(ceilings: MeasuredCeilings | None) -> list[PhysicsSamples]:
    """Kernel sums of two models priced at TRUTH_COEFFICIENTS on an RTX PRO 6000, with ``ceilings``."""
    hardware, coef = load_hardware("rtx-pro-6000"), coefficient_vector(TRUTH_COEFFICIENTS)
    out = []
    for spec in (LLAMA_8B, QWEN_LIKE):
        probe = PhysicsSamples(spec, hardware, 1, _grid(), np.ones(len(_grid())), "synthetic",
                               measured=KERNEL_SUM_TERMS, launches=VLLM_LAUNCHES, ceilings=ceilings)
        out.append(dataclasses.replace(probe, time_s=step_time_of(coef, probe.features(1.0, 1).T)))
    return out


def _ceilings(bandwidth_fraction: float, flops_fraction: float) -> MeasuredCeilings:
    gpu = load_hardware("rtx-pro-6000")
    return MeasuredCeilings(bandwidth_fraction * gpu.memory_bandwidth_Bps, flops_fraction * gpu.bf16_flops, "test")


def test_ceilings_the_truth_respects_leave_the_fit_exact():
    # The truth's fastest streaming term is 1 / 1.2 of peak bandwidth, its fastest GEMM 1 / 1.3 of
    # peak FLOP/s: ceilings at exactly those bind nothing that the data does not. The balance's grid
    # now starts below 1 (0.923), so 1 is found by golden section (to ~2e-6), not as a grid point.
    fit = fit_physics(_synthetic(_ceilings(1 / 1.2, 1 / 1.3)))
    measured = [t for t in FITTED_TERMS if t in KERNEL_SUM_TERMS]
    assert {t: fit.coefficients[t] for t in measured} == pytest.approx(
        {t: TRUTH_COEFFICIENTS[t] for t in measured}, rel=1e-3)
    assert fit.gemm_balance == pytest.approx(1.0, abs=1e-5) and fit.loss < 1e-6


def test_a_ceiling_below_the_truth_binds_at_its_floor():
    # Measured at 0.7 of peak FLOP/s, no GEMM or attention may run faster: 1 / 0.7 = 1.4286 binds
    # gemm (1.3) and prefill_attention (1.4); 0.8 of the bandwidth, 1.25, binds the decode KV read
    # (1.2). The steps' time these cannot take goes to terms the floors leave free (the lm_head).
    fit = fit_physics(_synthetic(_ceilings(0.8, 0.7)))
    for term in ("gemm", "prefill_attention"):
        assert fit.coefficients[term] == pytest.approx(1 / 0.7, rel=1e-9), term
    assert fit.coefficients["decode_kv_read"] == pytest.approx(1 / 0.8, rel=1e-9)
    for term in EFFICIENCY_TERMS:
        if term in KERNEL_SUM_TERMS:
            floor = 1 / {"bandwidth": 0.8, "flops": 0.7}[PEAK_OF[term]]
            assert fit.coefficients[term] >= floor * (1 - 1e-12), term
    # gemm x balance, the weight read's inverse efficiency, is held at the bandwidth floor or above.
    assert fit.coefficients["gemm"] * fit.gemm_balance >= 1 / 0.8 * (1 - 1e-9)


def test_the_roofline_fit_keeps_its_efficiencies_under_the_ceilings():
    # Steps priced at 0.57 of peak FLOP/s and 0.88 of peak bandwidth; the device measured 0.80 of
    # the bandwidth: the search may not look above it, and lands on the ceiling.
    ceilings = MeasuredCeilings(0.80 * H200.memory_bandwidth_Bps, None, "test")
    samples = [dataclasses.replace(_measured(m, HARNESS_LAUNCHES, TRUTH, True), ceilings=ceilings)
               for m in ("llama-3.1-8b", "llama-2-7b")]
    fit = fit_roofline(samples)
    assert fit.bandwidth_efficiency == 0.80 and fit.compute_efficiency <= 1.0
