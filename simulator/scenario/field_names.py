"""The fields a scenario allows at a place in the file, for refusals of an unknown one.

Pydantic says that a key is not allowed, not which keys are; this walks the option dataclasses
along the error's location (a union's member chosen by its ``kind``, as the validator does) to
list the valid names and suggest the nearest.
"""
from __future__ import annotations

import dataclasses
import difflib
import types
import typing


def allowed_fields(root: type, loc: tuple) -> tuple[str, ...]:
    """Field names of the dataclass that holds ``loc``'s last key; () where none is found."""
    node: typing.Any = root
    for item in loc[:-1]:
        node = _inside(node, item)
        if node is None:
            return ()
    return tuple(f.name for f in dataclasses.fields(node)) if _is_class(node) else ()


# vLLM knobs a user may well write that servesim does not model: what to say instead of a spelling hint.
NOT_MODELLED = {
    "data_parallel_size": ("data parallelism is engine.num_replicas engines behind engine.router "
                           "(one scheduler and KV pool each, as vLLM's data-parallel ranks)")}


def unknown_field_hint(root: type, loc: tuple) -> str:
    """'; did you mean 'x'? allowed here: a, b, c' (or ''), for the unknown key ``loc[-1]``."""
    allowed = allowed_fields(root, loc)
    if not allowed:
        return ""
    close = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.6)
    mean = f"; did you mean {close[0]!r}?" if close else ";"
    return f"{mean} allowed here: {', '.join(allowed)}"


def _is_class(node) -> bool:
    return isinstance(node, type) and dataclasses.is_dataclass(node)


def _inside(node, item):
    """What ``item`` of the location names inside ``node``: a field's type, a union's member, a
    sequence's element."""
    if _is_class(node):
        hint = typing.get_type_hints(node, include_extras=True).get(item) if isinstance(item, str) else None
        return _options(hint) if hint is not None else None
    if isinstance(node, tuple):   # union members: the location names the chosen one by its kind
        return next((m for m in node if _kind(m) == item), None)
    if isinstance(node, list) and isinstance(item, int):   # [element type]
        return node[0]
    return None


def _options(hint):
    """A dataclass, a tuple of union members, a one-item list for a sequence, or None."""
    while typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        members = [_options(a) for a in typing.get_args(hint) if a is not type(None)]
        members = [m for m in members if m is not None]
        if len(members) == 1:
            return members[0]
        flat = tuple(c for m in members for c in (m if isinstance(m, tuple) else (m,)) if _is_class(c))
        return flat or None
    if origin in (list, tuple):
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        element = _options(args[0]) if args else None
        return [element] if element is not None else None
    return hint if _is_class(hint) else None


def _kind(cls) -> str | None:
    field = next((f for f in dataclasses.fields(cls) if f.name == "kind"), None)
    return field.default if field is not None and isinstance(field.default, str) else None
