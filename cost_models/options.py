"""Typed fields for the options dataclasses that scenario files fill in.

Strict on purpose: a YAML string "3" or a boolean is not a count, and a typo should fail before
the run rather than be coerced. Every options dataclass gets ``extra='forbid'`` through
``options_config`` so an unknown key is an error.

The constraints are ``Constraint`` metadata, which pydantic reads as the ``Field`` of the same
arguments when simulator/scenario.py validates a scenario or prints its JSON Schema.

A field whose type is an options class only some scenarios use names it instead of importing it
(``LazyClass``, ``TaggedUnion``): creating a dataclass costs about a millisecond of start-up, so a
run creates only the classes its scenario names.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, fields
from typing import Annotated, Any, Union


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

    def field_arguments(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        """Pydantic's hook for unknown metadata: validate as ``Annotated[source, Field(...)]``."""
        from pydantic import Field
        return handler(Annotated[source, Field(**self.field_arguments())])


Int = Annotated[int, Constraint(strict=True)]
PositiveInt = Annotated[int, Constraint(strict=True, gt=0)]
NonNegativeInt = Annotated[int, Constraint(strict=True, ge=0)]
Float = Annotated[float, Constraint(strict=True)]
PositiveFloat = Annotated[float, Constraint(strict=True, gt=0)]
NonNegativeFloat = Annotated[float, Constraint(strict=True, ge=0)]
Fraction = Annotated[float, Constraint(strict=True, ge=0.0, lt=1.0)]
UnitInterval = Annotated[float, Constraint(strict=True, gt=0.0, le=1.0)]
Bool = Annotated[bool, Constraint(strict=True)]


def import_class(path: str) -> type:
    """The class ``package.module:Class`` names (its module imported now, if not yet)."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


class LazyClass:
    """Metadata for ``Annotated[object, LazyClass("package.module:Class")]``: a field of that
    options class, imported when a value for it is built (or pydantic is asked)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __repr__(self) -> str:
        return f"LazyClass({self.path!r})"

    def resolve(self) -> type:
        return import_class(self.path)

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        return handler(self.resolve())


class TaggedUnion:
    """Metadata for ``Annotated[object, TaggedUnion("kind", {tag: "package.module:Class", ...})]``:
    a union told apart by its ``tag_field``, whose members are imported by tag, on use. Pydantic,
    when asked, validates the whole union as ``Field(discriminator=tag_field)``."""

    def __init__(self, tag_field: str, members: dict[str, str]) -> None:
        self.tag_field = tag_field
        self.members = dict(members)

    def __repr__(self) -> str:
        return f"TaggedUnion({self.tag_field!r}, {self.members!r})"

    def member(self, tag: str) -> type | None:
        """The class of ``tag``, or None when no member has that tag."""
        path = self.members.get(tag)
        return None if path is None else import_class(path)

    def holds(self, value: Any) -> bool:
        """``value`` is an instance of the member its own tag names."""
        tag = getattr(value, self.tag_field, None)
        member = self.member(tag) if isinstance(tag, str) else None
        return member is not None and isinstance(value, member)

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic import Field
        classes = tuple(import_class(path) for path in self.members.values())
        return handler(Annotated[Union[classes], Field(discriminator=self.tag_field)])


# pydantic's ConfigDict is a TypedDict: a plain dict is the same configuration.
OPTIONS_CONFIG = {"extra": "forbid"}


def options_config(cls):
    """Class decorator: reject unknown keys when pydantic validates this dataclass."""
    cls.__pydantic_config__ = OPTIONS_CONFIG
    return cls
