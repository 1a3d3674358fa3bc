"""Reading a scenario file: its YAML text to a mapping, strictly (a key given twice is an error),
and ``--set`` overrides applied; validation is simulator/scenario/model.py's.
"""
from __future__ import annotations

import copy
import re
from pathlib import Path

import yaml

from simulator.scenario.errors import ScenarioError


class _DuplicateKey(yaml.constructor.ConstructorError):
    """A mapping key given twice."""


class _UniqueKeys:
    """Loader mixin that refuses a key given twice in one mapping: PyYAML would silently keep the
    last one, so a second ``engine:`` block would quietly replace the first."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue  # ``<<: *base``: merged keys may be overridden, as YAML defines
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, (str, int, float)):
                continue  # unhashable keys get PyYAML's own error
            if key in seen:
                raise _DuplicateKey(None, None, f"key {key!r} is given twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


class _StrictLoader(_UniqueKeys, yaml.SafeLoader):
    """The pure-Python parser: the reference, and the one whose errors users read."""


if yaml.__with_libyaml__:
    class _FastStrictLoader(_UniqueKeys, yaml.CSafeLoader):
        """libyaml's parser: reads a scenario faster, to the same values (tags are resolved
        and objects built by the same Python classes as the pure-Python loader's)."""
else:
    _FastStrictLoader = None

_MERGE_TAG = "tag:yaml.org,2002:merge"
# YAML 1.2 reads ``3e-5`` and ``1.0e12`` as numbers; PyYAML's YAML 1.1 rules want a dot and a
# signed exponent (``3.0e-5``, ``1.0e+12``) and would hand the field a string.
_EXPONENT_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9][0-9_]*(\.[0-9_]*)?)[eE][-+]?[0-9]+$")
for _loader in (_StrictLoader, _FastStrictLoader):
    if _loader is not None:
        _loader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT,
                                      list("-+.0123456789"))


def _load_yaml(text: str):
    """libyaml first; on any error the pure-Python parser reads the text again, so a mistake gets
    PyYAML's usual message (libyaml words syntax errors differently)."""
    if _FastStrictLoader is not None:
        try:
            return yaml.load(text, Loader=_FastStrictLoader)  # noqa: S506 - a SafeLoader's parts
        except yaml.YAMLError:
            pass
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass


MAX_DEPTH = 32   # a scenario nests about six deep; deeper YAML is a mistake, or an attack
MAX_FILE_BYTES = 1 << 20   # shipped scenarios are a few kB
# Values with every alias expanded, as validation walks them: a shipped scenario has a few
# hundred, and a "billion laughs" file of a few hundred bytes would have billions.
MAX_EXPANDED_VALUES = 100_000


def parse_yaml(text: str, where: str):
    """YAML text to Python, with one-line errors that say where (file and line)."""
    try:
        value = _load_yaml(text)
    except RecursionError:   # the pure-Python parser recurses once per nesting level
        raise ScenarioError(f"{where}: nested deeper than {MAX_DEPTH} levels; a scenario needs "
                            f"about six") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).split("\n")[0]
        if isinstance(exc, _DuplicateKey):
            raise ScenarioError(f"{where}:{line}: {problem}; give each key once") from None
        raise ScenarioError(f"{where}:{line} is not valid YAML ({problem})") from None
    if isinstance(value, (dict, list)):
        depth, num_values = _shape(value)
        if depth > MAX_DEPTH:
            raise ScenarioError(f"{where}: nested deeper than {MAX_DEPTH} levels; a scenario "
                                f"needs about six")
        if num_values > MAX_EXPANDED_VALUES:
            raise ScenarioError(f"{where}: {num_values} values once its aliases are expanded; a "
                                f"scenario has at most {MAX_EXPANDED_VALUES} (long tables belong "
                                f"in a trace file)")
    return value


def _shape(value) -> tuple[int, int]:
    """How deeply lists and mappings nest in ``value``, and how many values it holds with every
    alias expanded: each shared node is walked once, so a file of aliases of aliases costs its
    size, not its expansion. A structure that contains itself is endlessly deep."""
    shapes: dict[int, tuple[int, int]] = {}
    open_ids: set[int] = set()
    stack = [(value, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in shapes:
            continue
        items = list(node.values() if isinstance(node, dict) else node)
        children = [c for c in items if isinstance(c, (dict, list))]
        if children_done:
            open_ids.discard(id(node))
            depth = 1 + max((shapes[id(c)][0] for c in children), default=0)
            size = len(items) - len(children) + sum(shapes[id(c)][1] for c in children)
            shapes[id(node)] = (depth, 1 + size)
            if depth > MAX_DEPTH:
                return shapes[id(node)]
            continue
        if any(id(c) in open_ids for c in children) or id(node) in open_ids:
            return MAX_DEPTH + 1, 0   # an alias inside itself
        open_ids.add(id(node))
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in shapes)
    return shapes[id(value)]


def read_raw_scenario(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """The file's mapping with ``--set`` overrides applied, not yet validated (sweeps need it)."""
    path = Path(path)
    try:
        if path.exists() and not path.is_file():   # a FIFO or /dev/zero: blocks or never ends
            raise ScenarioError(f"{path}: not a regular file; give the path of a YAML file")
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ScenarioError(f"{path}: {path.stat().st_size} bytes; a scenario file is at most "
                                f"{MAX_FILE_BYTES} bytes (long tables belong in a trace file)")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(f"{path}: no such scenario file") from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    raw = parse_yaml(text, str(path))
    if not isinstance(raw, dict):
        got = "an empty file" if raw is None else f"a {type(raw).__name__}"
        raise ScenarioError(f"{path}: a scenario is a mapping of fields (name, model, workload, "
                            f"schedulers, ...), got {got}")
    return apply_overrides(raw, overrides)


def apply_overrides(raw: dict, overrides) -> dict:
    """``--set a.b.c=value``: the value is parsed as YAML (numbers, lists, null...)."""
    raw = copy.deepcopy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ScenarioError(f"--set: {item!r} must look like dotted.key=value")
        node = raw
        parts = _key_parts(key)
        for part in parts[:-1]:
            if isinstance(node, list) and part.isdigit():
                _check_index(key, part, node)
                node = node[int(part)]
                continue
            if not isinstance(node, dict):
                raise ScenarioError(f"--set: {key!r}: {part!r} is not inside a mapping")
            node = node.setdefault(part, {})
        last = parts[-1]
        value = parse_yaml(text, f"--set {key}") if text else None
        if isinstance(node, list) and last.isdigit():
            _check_index(key, last, node)
            node[int(last)] = value
        elif isinstance(node, dict):
            node[last] = value
        else:
            raise ScenarioError(f"--set: {key!r} does not name a field")
    return raw


def _key_parts(key: str) -> list[str]:
    """``schedulers[0].name`` (as sweep blocks write it) or ``schedulers.0.name``: the same parts."""
    return [p for p in re.split(r"\.|\[(\d+)\]", key) if p] if "[" in key else key.split(".")


def _check_index(key: str, part: str, node: list) -> None:
    if int(part) >= len(node):
        raise ScenarioError(f"--set: {key!r}: index {part} is out of range (the list has "
                            f"{len(node)} {'entry' if len(node) == 1 else 'entries'}, from 0)")
