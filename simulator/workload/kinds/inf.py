"""``kind: inf`` arrivals: vLLM's ``--request-rate inf``."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from cost_models.options import OPTIONS_CONFIG
from simulator.workload.arrivals import check_n


@dataclass(frozen=True)
class InfArrivals:
    """``--request-rate inf``: every request is released at t=0 (with ``max_concurrency`` C: C users)."""

    kind: Literal["inf"] = field(default="inf", kw_only=True)
    __pydantic_config__ = OPTIONS_CONFIG  # unknown keys are errors

    def arrival_times_s(self, n: int, rng: np.random.Generator) -> np.ndarray:
        check_n(n)
        return np.zeros(n)

    def arrival_times_until_s(self, duration_s: float, rng: np.random.Generator) -> np.ndarray:
        raise ValueError("duration_s: not allowed with arrival kind 'inf' (unbounded request count); "
                         "give num_requests instead")
