"""Dotted field paths of a sweep: ``workload.arrival.rate``, ``schedulers.*.max_num_seqs``.

A path names a field of the scenario file the way ``--set`` does, plus two list forms for the
``schedulers`` list: ``schedulers[1].max_num_seqs`` (or ``schedulers.1.max_num_seqs``) sets one
entry, and ``schedulers.*.max_num_batched_tokens`` sets the field on every entry, so each
scheduler's curve moves along the same values. Missing mappings on the way are created (a sweep
may set a field the file leaves at its default); whether the field exists at all is then up to the
scenario's validation, which names any unknown key.
"""
from __future__ import annotations

import copy
import re
from typing import Any

ALL = "*"
_INDEX = re.compile(r"\[(\d+|\*)\]")
# Sweeping these would change what a run is, not a setting of it.
NOT_SWEEPABLE = ("name", "description", "sweep", "num_seeds")


def split_path(path: str) -> list[str]:
    """``schedulers[1].max_num_seqs`` -> ``['schedulers', '1', 'max_num_seqs']``."""
    parts = _INDEX.sub(r".\1", path).split(".")
    if not path or any(p == "" for p in parts):
        raise ValueError(f"{path!r} is not a dotted field path (like workload.arrival.rate or "
                         f"schedulers[0].max_num_seqs)")
    if parts[0] in NOT_SWEEPABLE:
        raise ValueError(f"{parts[0]!r} cannot be swept")
    return parts


def set_path(raw: dict, path: str, value: Any) -> dict:
    """A copy of ``raw`` with ``value`` at ``path``; ValueError (one line) if the path cannot hold it."""
    raw = copy.deepcopy(raw)
    parts = split_path(path)
    _set(raw, parts, copy.deepcopy(value), path)
    return raw


def _set(node: Any, parts: list[str], value: Any, path: str) -> None:
    head, rest = parts[0], parts[1:]
    if isinstance(node, list):
        for child_index in _indices(node, head, path):
            _assign(node, child_index, rest, value, path)
    elif isinstance(node, dict):
        if head == ALL:
            raise ValueError(f"'*' is only allowed on a list (like schedulers.*), in {path!r}")
        _assign(node, head, rest, value, path)
    else:
        raise ValueError(f"{head!r} is not inside a mapping or list, in {path!r}")


def _assign(node: Any, key: Any, rest: list[str], value: Any, path: str) -> None:
    if not rest:
        node[key] = value
        return
    if isinstance(node, dict) and node.get(key) is None:
        node[key] = {}
    _set(node[key], rest, value, path)


def _indices(node: list, head: str, path: str) -> list[int]:
    if head == ALL:
        return list(range(len(node)))
    if not head.isdigit():
        raise ValueError(f"{head!r} is not a list index (use [0], [1], ... or *), in {path!r}")
    if int(head) >= len(node):
        raise ValueError(f"index {head} is out of range (the list has {len(node)} "
                         f"{'entry' if len(node) == 1 else 'entries'}, from 0), in {path!r}")
    return [int(head)]
