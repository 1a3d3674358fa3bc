"""The scenario's ``metrics.goodput`` block: a run imports it only when its scenario sets one
(simulator/scenario.py names the class with ``LazyClass``)."""
from __future__ import annotations

from dataclasses import dataclass

from cost_models.options import PositiveFloat, options_config


@options_config
@dataclass(frozen=True)
class GoodputSLOs:
    ttft_ms: PositiveFloat | None = None
    tpot_ms: PositiveFloat | None = None
    e2el_ms: PositiveFloat | None = None

    def as_dict(self) -> dict[str, float]:
        return {k.removesuffix("_ms"): v for k, v in vars(self).items() if v is not None}
