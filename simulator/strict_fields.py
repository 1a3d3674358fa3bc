"""Scenario fields built without pydantic: the quick path of `servesim run`.

Importing pydantic and building its validators is a third of a run's start-up, yet a valid file
needs none of it. ``build(hint, value)`` walks the type hints pydantic reads (dataclasses, unions,
``Literal``, tuples, lists, dicts, ``Annotated`` with ``Constraint``, ``LazyClass`` or
``TaggedUnion``, whose classes it imports only as a value names them) and builds the value when the
input is plainly valid: exact YAML types (an int for an int, an int or a finite float for a float),
every constraint met, no unknown key, the dataclass's own checks passed. It accepts a subset of
what pydantic accepts and builds the same values (tests/test_scenario_validation.py checks both on
every shipped scenario and on generated ones). Anything else raises ``Unsure`` and the caller asks
pydantic, which either accepts the input after all or words the one-line error.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import re
import types
import typing
from typing import Annotated, Any, Literal, Union

from cost_models.options import Constraint, LazyClass, TaggedUnion

# Larger ints are left to pydantic: their float conversion is its business.
_EXACT_FLOAT_INT = 2 ** 53


class Unsure(Exception):
    """The input is not plainly valid: let pydantic decide."""


def build(hint: Any, value: Any) -> Any:
    """``value`` (parsed YAML) validated and converted as type ``hint``, or ``Unsure``."""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        return _annotated(hint, value)
    if origin in (Union, types.UnionType):
        return _union(typing.get_args(hint), value)
    if origin is Literal:
        return _literal(typing.get_args(hint), value)
    if origin in (tuple, list, dict):
        return _container(origin, typing.get_args(hint), value)
    if dataclasses.is_dataclass(hint):
        return _dataclass(hint, value)
    return _scalar(hint, value)


def _scalar(hint: Any, value: Any) -> Any:
    if hint is Any:
        return value
    if hint in (None, types.NoneType) and value is None:
        return None
    if hint in (int, bool, str) and type(value) is hint:
        return value
    if hint is float and type(value) in (int, float) and _plain_number(value):
        return float(value)
    raise Unsure


def _plain_number(value: int | float) -> bool:
    return math.isfinite(value) if type(value) is float else abs(value) <= _EXACT_FLOAT_INT


def _annotated(hint: Any, value: Any) -> Any:
    inner, *metadata = typing.get_args(hint)
    if len(metadata) == 1 and isinstance(metadata[0], LazyClass):
        return build(metadata[0].resolve(), value)
    if len(metadata) == 1 and isinstance(metadata[0], TaggedUnion):
        return _tagged(metadata[0], value)
    constraints = [m for m in metadata if isinstance(m, Constraint)]
    if len(constraints) != len(metadata):
        raise Unsure  # metadata only pydantic understands
    built = build(inner, value)
    for c in constraints:
        _check(c, built)
    return built


def _check(c: Constraint, value: Any) -> None:
    """The bounds, pattern and length of one ``Constraint`` (``strict``: the types are exact anyway;
    ``allow_inf_nan``: floats are finite here)."""
    ok = ((c.gt is None or value > c.gt) and (c.ge is None or value >= c.ge)
          and (c.lt is None or value < c.lt) and (c.le is None or value <= c.le)
          and (c.min_length is None or len(value) >= c.min_length)
          and (c.pattern is None or re.fullmatch(c.pattern, value) is not None))
    if not ok:
        raise Unsure


def _tagged(union: TaggedUnion, value: Any) -> Any:
    """A discriminated union: the member the input's tag names (only its module is imported)."""
    if type(value) is not dict or type(value.get(union.tag_field)) is not str:
        raise Unsure
    member = union.member(value[union.tag_field])
    if member is None:
        raise Unsure
    return _dataclass(member, value)


def _union(members: tuple, value: Any) -> Any:
    """Exactly one member must accept: then pydantic's smart union picks that one too."""
    accepted = []
    for member in members:
        try:
            accepted.append(build(member, value))
        except Unsure:
            continue
    if len(accepted) != 1:
        raise Unsure
    return accepted[0]


def _literal(choices: tuple, value: Any) -> Any:
    if any(type(value) is type(c) and value == c for c in choices):
        return value
    raise Unsure


def _container(origin: type, args: tuple, value: Any) -> Any:
    if origin is dict:
        if type(value) is not dict or any(type(k) is not str for k in value):
            raise Unsure
        return {k: build(args[1], v) for k, v in value.items()}
    if type(value) not in (list, tuple) or origin is list and type(value) is not list:
        raise Unsure
    if origin is tuple and (len(args) != 2 or args[1] is not Ellipsis):
        raise Unsure  # fixed-length tuples: none in the options
    return origin(build(args[0], v) for v in value)


def _dataclass(cls: type, value: Any) -> Any:
    if type(value) is not dict:
        raise Unsure
    hints, required = _init_fields(cls)
    if not value.keys() <= hints.keys() or not required <= value.keys():
        raise Unsure
    kwargs = {name: build(hints[name], v) for name, v in value.items()}
    try:
        return cls(**kwargs)
    except (ValueError, TypeError, AssertionError):
        raise Unsure from None  # its own check failed: pydantic words the message


@functools.lru_cache(maxsize=None)
def _init_fields(cls: type) -> tuple[dict[str, Any], frozenset[str]]:
    """The type hint of each ``__init__`` field, and the names without a default."""
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception:  # noqa: BLE001 - e.g. a plugin's name only a TYPE_CHECKING block imports
        raise Unsure from None
    fields = [f for f in dataclasses.fields(cls) if f.init]
    required = frozenset(f.name for f in fields if f.default is dataclasses.MISSING
                         and f.default_factory is dataclasses.MISSING)
    return {f.name: hints[f.name] for f in fields}, required
