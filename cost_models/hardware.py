"""Accelerators: datasheet figures from ``catalog/hardware.csv`` or an inline spec.

The catalog is a compact table derived from ``../shared/reference/gpu-specs.csv`` (vendor datasheet
figures, dense, without 2:4 sparsity) plus interconnect figures; every row names its sources and
how firmly they are known in its ``source`` text.

Memory is given in the unit its field names. The catalog's ``memory_gib`` is binary: the "80 GB"
of an H100 datasheet is 80 GiB of HBM (``torch.cuda.mem_get_info`` reports 79.2 GiB), so reading it
as decimal GB would leave vLLM's KV cache 7% short. An inline spec says ``memory_gib`` (2**30 bytes)
or ``memory_gb`` (10**9 bytes, as the name says), exactly one of them.
"""
from __future__ import annotations

import csv
import functools
import math
from dataclasses import dataclass
from pathlib import Path

from cost_models.interconnect import check_link

GiB = 2**30
_GB_PER_S = 1e9
_TFLOPS = 1e12
_BYTES_PER_MEMORY_UNIT = {"memory_gib": GiB, "memory_gb": 10**9}
_INLINE_REQUIRED = ("memory_bandwidth_GBps", "bf16_tflops")
_INLINE_OPTIONAL = ("interconnect_GBps", "link", "fp8_tflops", "name", "sm_count", "l2_mib")
# An inline spec without an interconnect figure is taken to sit on PCIe Gen4 x16, the weakest link
# any listed part has, so a tensor-parallel estimate errs towards slow rather than fast.
_DEFAULT_INTERCONNECT_GBPS = 64.0
_DEFAULT_LINK = "pcie"
CATALOG_CSV = Path(__file__).resolve().parent / "catalog" / "hardware.csv"


@dataclass(frozen=True)
class HardwareSpec:
    """One accelerator's datasheet figures, in bytes and FLOP/s."""

    name: str
    memory_bytes: int
    memory_bandwidth_Bps: float
    bf16_flops: float                 # dense peak, FLOP/s
    fp8_flops: float | None           # dense peak, FLOP/s; None where the part has no FP8 path
    interconnect_bandwidth_Bps: float  # per GPU, as datasheets quote it (NVLink totals, PCIe x16)
    source: str
    link: str = _DEFAULT_LINK         # nvlink | pcie | network: the all-reduce's latencies (interconnect.py)
    sm_count: int | None = None       # streaming multiprocessors (AMD: compute units); None where unsourced
    l2_bytes: int | None = None       # the last-level on-chip cache (L2); None where unsourced


@functools.cache
def _catalog() -> tuple[tuple[HardwareSpec, ...], dict[str, str]]:
    """The presets in file order, and every accepted name (canonical and alias) -> canonical."""
    text = CATALOG_CSV.read_text(encoding="utf-8")
    specs, names = [], {}
    for row in csv.DictReader(text.splitlines()):
        spec = HardwareSpec(
            name=row["name"],
            memory_bytes=int(float(row["memory_gib"]) * GiB),
            memory_bandwidth_Bps=float(row["memory_bandwidth_GBps"]) * _GB_PER_S,
            bf16_flops=float(row["bf16_tflops"]) * _TFLOPS,
            fp8_flops=float(row["fp8_tflops"]) * _TFLOPS if row["fp8_tflops"] else None,
            interconnect_bandwidth_Bps=float(row["interconnect_GBps"]) * _GB_PER_S,
            source=row["source"], link=check_link(row["link"], f"hardware.csv {row['name']} link"),
            sm_count=int(row["sm_count"]) if row["sm_count"] else None,
            l2_bytes=int(float(row["l2_mib"]) * 2**20) if row["l2_mib"] else None)
        specs.append(spec)
        for alias in [spec.name, *filter(None, row["aliases"].split(";"))]:
            names[_normalise(alias)] = spec.name
    return tuple(specs), names


def _normalise(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def list_hardware() -> list[HardwareSpec]:
    """Every preset, in catalog order (for ``servesim hardware``)."""
    return list(_catalog()[0])


def hardware_aliases() -> dict[str, str]:
    """Accepted name -> preset name (a preset's own name maps to itself)."""
    return dict(_catalog()[1])


def load_hardware(name_or_spec: str | dict) -> HardwareSpec:
    """A preset name (case-insensitive, aliases accepted) or an inline spec dict.

    Inline: ``{memory_gib | memory_gb, memory_bandwidth_GBps, bf16_tflops, interconnect_GBps?,
    link?, fp8_tflops?, name?, sm_count?, l2_mib?}`` (link: nvlink, pcie or network; default pcie,
    as the bandwidth; sm_count and l2_mib: none unless given, never guessed).
    """
    if isinstance(name_or_spec, dict):
        return _from_inline(name_or_spec)
    if isinstance(name_or_spec, str):
        specs, names = _catalog()
        canonical = names.get(_normalise(name_or_spec))
        if canonical is not None:
            return next(s for s in specs if s.name == canonical)
    presets = ", ".join(s.name for s in _catalog()[0])
    raise ValueError(f"hardware: {name_or_spec!r} is not a preset ({presets}) or an inline spec")


def _from_inline(spec: dict) -> HardwareSpec:
    allowed = (*_BYTES_PER_MEMORY_UNIT, *_INLINE_REQUIRED, *_INLINE_OPTIONAL)
    unknown = sorted(set(spec) - set(allowed))
    if unknown:
        raise ValueError(f"hardware.{unknown[0]}: unknown key in an inline spec "
                         f"(allowed: {', '.join(allowed)})")
    for key in _INLINE_REQUIRED:
        if key not in spec:
            raise ValueError(f"hardware.{key}: required in an inline spec")
    values = {k: _positive(k, spec[k]) for k in (*_INLINE_REQUIRED, "interconnect_GBps", "fp8_tflops", "l2_mib")
              if spec.get(k) is not None}
    name = spec.get("name", "custom")
    if not isinstance(name, str) or not name:
        raise ValueError(f"hardware.name: {name!r} is not a non-empty string")
    fp8 = values.get("fp8_tflops")
    link = spec.get("link", _DEFAULT_LINK)
    check_link(link)
    return HardwareSpec(
        name=name,
        memory_bytes=_inline_memory_bytes(spec),
        memory_bandwidth_Bps=values["memory_bandwidth_GBps"] * _GB_PER_S,
        bf16_flops=values["bf16_tflops"] * _TFLOPS,
        fp8_flops=fp8 * _TFLOPS if fp8 is not None else None,
        interconnect_bandwidth_Bps=values.get("interconnect_GBps", _DEFAULT_INTERCONNECT_GBPS) * _GB_PER_S,
        source="inline spec from the scenario file", link=link, sm_count=_sm_count(spec.get("sm_count")),
        l2_bytes=int(values["l2_mib"] * 2**20) if "l2_mib" in values else None)


def _sm_count(value) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"hardware.sm_count: {value!r} is not a positive integer")
    return value


def _inline_memory_bytes(spec: dict) -> int:
    """Bytes of the one memory field an inline spec gives, in the unit its name says."""
    given = [key for key in _BYTES_PER_MEMORY_UNIT if key in spec]
    if len(given) != 1:
        what = "both given" if given else "required"
        raise ValueError(f"hardware.memory_gib: {what}; give memory_gib (2**30 bytes) "
                         f"or memory_gb (10**9 bytes), exactly one")
    return int(_positive(given[0], spec[given[0]]) * _BYTES_PER_MEMORY_UNIT[given[0]])


def _positive(key: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        raise ValueError(f"hardware.{key}: {value!r} is not a positive number")
    return float(value)
