"""Typed fields for the options dataclasses that scenario files fill in.

Strict on purpose: a YAML string "3" or a boolean is not a count, and a typo should fail before
the run rather than be coerced. Every options dataclass gets ``extra='forbid'`` through
``options_config`` so an unknown key is an error.
"""
from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field

Int = Annotated[int, Field(strict=True)]
PositiveInt = Annotated[int, Field(strict=True, gt=0)]
NonNegativeInt = Annotated[int, Field(strict=True, ge=0)]
Float = Annotated[float, Field(strict=True)]
PositiveFloat = Annotated[float, Field(strict=True, gt=0)]
NonNegativeFloat = Annotated[float, Field(strict=True, ge=0)]
Fraction = Annotated[float, Field(strict=True, ge=0.0, lt=1.0)]
UnitInterval = Annotated[float, Field(strict=True, gt=0.0, le=1.0)]
Bool = Annotated[bool, Field(strict=True)]

OPTIONS_CONFIG = ConfigDict(extra="forbid")


def options_config(cls):
    """Class decorator: reject unknown keys when pydantic validates this dataclass."""
    cls.__pydantic_config__ = OPTIONS_CONFIG
    return cls
