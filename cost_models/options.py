"""Typed fields for the options dataclasses that scenario files fill in.

Strict on purpose: a YAML string "3" or a boolean is not a count, and a typo should fail before
the run rather than be coerced. Every options dataclass gets ``extra='forbid'`` through
``options_config`` so an unknown key is an error.

The constraints are ``Constraint`` metadata, which pydantic reads as the ``Field`` of the same
arguments when simulator/scenario/model.py validates a scenario or prints its JSON Schema.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Annotated, Any


@dataclass(frozen=True)
class Constraint:
    """The arguments of pydantic's ``Field`` that options use; ``None`` means not set."""

    strict: bool | None = None
    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None
    allow_inf_nan: bool | None = None
    pattern: str | None = None
    min_length: int | None = None
    discriminator: str | None = None   # on a Union of options classes: the field naming the member
    description: str | None = None     # the JSON Schema's: why the bounds are what they are

    def field_arguments(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        """Pydantic's hook for unknown metadata: validate as ``Annotated[source, Field(...)]``."""
        from pydantic import Field
        return handler(Annotated[source, Field(**self.field_arguments())])


INT64_MAX = 2 ** 63 - 1   # counts live in int64 arrays: a larger one would overflow, not run
_INT64_WHY = "at most 2**63 - 1: counts are kept in int64 columns"
PositiveInt = Annotated[int, Constraint(strict=True, gt=0, le=INT64_MAX, description=_INT64_WHY)]
NonNegativeInt = Annotated[int, Constraint(strict=True, ge=0, le=INT64_MAX, description=_INT64_WHY)]
PositiveFloat = Annotated[float, Constraint(strict=True, gt=0)]
NonNegativeFloat = Annotated[float, Constraint(strict=True, ge=0)]
Fraction = Annotated[float, Constraint(strict=True, ge=0.0, lt=1.0)]
UnitInterval = Annotated[float, Constraint(strict=True, gt=0.0, le=1.0)]
Bool = Annotated[bool, Constraint(strict=True)]


# pydantic's ConfigDict is a TypedDict: a plain dict is the same configuration.
OPTIONS_CONFIG = {"extra": "forbid"}


def options_config(cls):
    """Class decorator: reject unknown keys when pydantic validates this dataclass."""
    cls.__pydantic_config__ = OPTIONS_CONFIG
    return cls
