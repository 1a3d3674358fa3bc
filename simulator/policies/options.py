"""Options every preset shares, with vLLM's names. Presets subclass these frozen dataclasses."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cost_models.options import (Bool, Fraction, NonNegativeFloat, NonNegativeInt,  # noqa: F401
                                 PositiveInt, options_config)


@options_config
@dataclass(frozen=True)
class SchedulerOptions:
    """What a scenario's ``schedulers:`` entry sets for every preset."""

    preset: str = ""                     # filled from the scenario; the registry key
    name: str | None = None              # label in tables and the result folder (default: preset)
    max_num_seqs: PositiveInt | None = None          # None: the preset's / vLLM's default
    max_num_batched_tokens: PositiveInt | None = None
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"

    @property
    def label(self) -> str:
        return self.name or self.preset
