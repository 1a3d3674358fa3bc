"""Hardware catalog: presets, aliases, inline specs, and agreement with the datasheet table."""
import csv
import re
from pathlib import Path

import pytest

from cost_models.hardware import GiB, HardwareSpec, hardware_aliases, list_hardware, load_hardware

REFERENCE = Path(__file__).resolve().parents[1] / ".." / "shared" / "reference"
PRESETS = ["a100-40gb", "a100-80gb", "h100-sxm", "h200", "l40s", "l4", "rtx-4090", "rtx-pro-6000",
           "gb10", "b200", "mi300x"]
# preset -> its row in ../shared/reference/gpu-specs.csv
SPEC_ROWS = {"a100-40gb": "A100-SXM4-40GB", "a100-80gb": "A100-SXM4-80GB", "h100-sxm": "H100-SXM5-80GB",
             "h200": "H200-SXM-141GB", "l40s": "L40S", "l4": "L4", "rtx-4090": "RTX-4090",
             "rtx-pro-6000": "RTX-PRO-6000-Blackwell-Server", "gb10": "GB10-DGX-Spark",
             "b200": "B200-HGX", "mi300x": "MI300X"}


def test_catalog_holds_exactly_the_listed_presets():
    assert [h.name for h in list_hardware()] == PRESETS


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_is_usable(name):
    hw = load_hardware(name)
    assert hw.memory_bytes > 0 and hw.memory_bandwidth_Bps > 0 and hw.bf16_flops > 0
    assert hw.interconnect_bandwidth_Bps > 0 and hw.source


def test_h100_figures_are_the_datasheet_ones():
    hw = load_hardware("h100-sxm")
    assert hw == HardwareSpec(name="h100-sxm", memory_bytes=80 * GiB, memory_bandwidth_Bps=3350e9,
                              bf16_flops=989e12, fp8_flops=1979e12,
                              interconnect_bandwidth_Bps=900e9, source=hw.source, link="nvlink", sm_count=132,
                              l2_bytes=50 * 2**20)


def test_sm_counts_are_the_sourced_ones_and_none_where_unsourced():
    expected = {"a100-40gb": 108, "a100-80gb": 108, "h100-sxm": 132, "h200": 132, "l40s": 142, "l4": 58,
                "rtx-4090": 128, "rtx-pro-6000": 188, "gb10": 48, "b200": None, "mi300x": 304}
    assert {n: load_hardware(n).sm_count for n in expected} == expected
    assert all("SMs:" in load_hardware(n).source for n in expected)


def test_l2_sizes_are_the_sourced_ones_and_none_where_unsourced():
    expected = {"a100-40gb": 40, "a100-80gb": 40, "h100-sxm": 50, "h200": 50, "l40s": 96, "l4": 48,
                "rtx-4090": 72, "rtx-pro-6000": 128, "gb10": None, "b200": None, "mi300x": None}
    sizes = {n: load_hardware(n).l2_bytes for n in expected}
    assert sizes == {n: mib and mib * 2**20 for n, mib in expected.items()}
    assert all("L2:" in load_hardware(n).source for n, mib in expected.items() if mib)
    inline = {"memory_gib": 8, "memory_bandwidth_GBps": 100, "bf16_tflops": 10}
    assert load_hardware({**inline, "l2_mib": 4}).l2_bytes == 4 * 2**20 and load_hardware(inline).l2_bytes is None


def test_inline_sm_count_is_optional_and_checked():
    base = {"memory_gib": 8, "memory_bandwidth_GBps": 100, "bf16_tflops": 10}
    assert load_hardware(base).sm_count is None
    assert load_hardware({**base, "sm_count": 40}).sm_count == 40
    with pytest.raises(ValueError, match="hardware.sm_count: 1.5 is not a positive integer"):
        load_hardware({**base, "sm_count": 1.5})
    with pytest.raises(ValueError, match="hardware.l2_mib: 'big' is not a positive number"):
        load_hardware({**base, "l2_mib": "big"})


def test_interconnect_figures_per_family():
    expected_GBps = {"a100-40gb": 600, "a100-80gb": 600, "h100-sxm": 900, "h200": 900, "b200": 1800,
                     "mi300x": 896, "l40s": 64, "l4": 64, "rtx-4090": 64, "rtx-pro-6000": 128}
    for name, gbps in expected_GBps.items():
        assert load_hardware(name).interconnect_bandwidth_Bps == gbps * 1e9, name
    # NVLink (or Infinity Fabric) on the SXM/OAM parts; PCIe where the part has no GPU link.
    links = {n: "nvlink" if gbps > 128 else "pcie" for n, gbps in expected_GBps.items()}
    assert {n: load_hardware(n).link for n in links} == links and load_hardware("gb10").link == "network"


def test_ampere_has_no_fp8():
    assert load_hardware("a100-80gb").fp8_flops is None


def test_presets_missing_bf16_in_the_datasheet_table_say_low_confidence():
    for name, bf16_tflops in (("rtx-pro-6000", 503.8), ("gb10", 125)):
        hw = load_hardware(name)
        assert hw.bf16_flops == bf16_tflops * 1e12
        assert "confidence low" in hw.source


@pytest.mark.parametrize("alias, canonical", [
    ("h100", "h100-sxm"), ("H100-SXM", "h100-sxm"), ("h200-sxm", "h200"), ("A100", "a100-80gb"),
    ("rtx_pro_6000", "rtx-pro-6000"), ("dgx-spark", "gb10"), (" MI300X ", "mi300x")])
def test_aliases_and_case_resolve_to_the_preset(alias, canonical):
    assert load_hardware(alias).name == canonical
    assert hardware_aliases()["h100"] == "h100-sxm"


def test_unknown_name_raises_one_line_listing_presets():
    with pytest.raises(ValueError) as exc:
        load_hardware("xyz")
    assert str(exc.value) == f"hardware: 'xyz' is not a preset ({', '.join(PRESETS)}) or an inline spec"


def test_inline_spec_converts_units():
    hw = load_hardware({"memory_gib": 24, "memory_bandwidth_GBps": 1000, "bf16_tflops": 100,
                        "interconnect_GBps": 50, "name": "mygpu"})
    assert (hw.name, hw.memory_bytes, hw.memory_bandwidth_Bps, hw.bf16_flops, hw.fp8_flops,
            hw.interconnect_bandwidth_Bps) == ("mygpu", 24 * GiB, 1e12, 1e14, None, 50e9)


def test_inline_spec_defaults_to_pcie_gen4_and_a_generic_name():
    hw = load_hardware({"memory_gib": 24, "memory_bandwidth_GBps": 1000, "bf16_tflops": 100})
    assert (hw.name, hw.interconnect_bandwidth_Bps) == ("custom", 64e9)


def test_inline_memory_is_read_in_the_unit_its_field_names():
    """Issue 22: ``memory_gb`` was read as GiB; GB is 10**9 bytes, GiB 2**30."""
    rest = {"memory_bandwidth_GBps": 1000, "bf16_tflops": 100}
    assert load_hardware({"memory_gb": 80, **rest}).memory_bytes == 80 * 10**9
    assert load_hardware({"memory_gib": 80, **rest}).memory_bytes == 80 * 2**30


@pytest.mark.parametrize("spec, field", [
    ({"memory_bandwidth_GBps": 1, "bf16_tflops": 1}, "hardware.memory_gib"),
    ({"memory_gb": 1, "memory_gib": 1, "memory_bandwidth_GBps": 1, "bf16_tflops": 1}, "hardware.memory_gib"),
    ({"memory_gb": 1, "memory_bandwidth_GBps": 1, "bf16_tflops": 1, "hbm": 3}, "hardware.hbm"),
    ({"memory_gb": -1, "memory_bandwidth_GBps": 1, "bf16_tflops": 1}, "hardware.memory_gb"),
    ({"memory_gb": 1, "memory_bandwidth_GBps": "fast", "bf16_tflops": 1}, "hardware.memory_bandwidth_GBps"),
])
def test_bad_inline_spec_names_the_field(spec, field):
    with pytest.raises(ValueError, match=re.escape(field + ":")):
        load_hardware(spec)


def test_catalog_agrees_with_the_datasheet_table():
    path = REFERENCE / "gpu-specs.csv"
    if not path.exists():
        pytest.skip(f"reference table {path} is absent")
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    rows = {r["gpu"]: r for r in csv.DictReader(lines)}
    for name, gpu in SPEC_ROWS.items():
        hw, row = load_hardware(name), rows[gpu]
        assert hw.memory_bytes == float(row["memory_gb"].split()[0]) * GiB, name
        assert hw.memory_bandwidth_Bps == float(row["hbm_bw_GBps"]) * 1e9, name
        if row["bf16_dense_tflops"]:
            assert hw.bf16_flops == float(row["bf16_dense_tflops"]) * 1e12, name
        if row["fp8_dense_tflops"]:
            assert hw.fp8_flops == float(row["fp8_dense_tflops"]) * 1e12, name


def test_an_inline_spec_names_its_link_or_sits_on_pcie():
    base = {"memory_gib": 24, "memory_bandwidth_GBps": 1000, "bf16_tflops": 100}
    assert load_hardware(base).link == "pcie"
    assert load_hardware({**base, "link": "nvlink", "interconnect_GBps": 900}).link == "nvlink"
    with pytest.raises(ValueError, match=r"^hardware.link: 'infiniband' is not a link kind \(nvlink, pcie, network\)$"):
        load_hardware({**base, "link": "infiniband"})
