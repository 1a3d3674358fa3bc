"""The roofline's default efficiencies and overheads, read from cost_models/catalog/roofline_defaults.json.

The file is fitted, not guessed: ``python -m cost_models.build_profiles --roofline`` fits the
roofline's own form to each GPU's measured steps in ../shared/reference (cost_models/fit/roofline_fit.py)
and records, per GPU, the values, their sources and their errors; a GPU nobody measured takes the
median over the GPUs that were (``other_gpus``).
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

DEFAULTS_PATH = Path(__file__).resolve().parent / "catalog" / "roofline_defaults.json"
DEFAULTED = ("compute_efficiency", "bandwidth_efficiency", "step_overhead_s", "launch_s", "decode_skew")


@lru_cache(maxsize=1)
def _table() -> dict:
    return json.loads(DEFAULTS_PATH.read_text())


def reload_defaults() -> None:
    """Read roofline_defaults.json afresh at the next call (the build has just rewritten it)."""
    _table.cache_clear()


def roofline_defaults(hardware: str) -> dict[str, float]:
    """The DEFAULTED values for ``hardware``: its own fit, or the median over the fitted GPUs."""
    table = _table()
    entry = table["gpus"].get(hardware) or table["other_gpus"]
    return {name: float(entry[name]) for name in DEFAULTED}

