"""Scheduler presets: a name maps to a policy class and the option defaults of that preset.

A new policy is one module in this package with a class decorated by
``@register_scheduler("name")``: the first lookup imports every module here, so the decorator
is all it takes. Out-of-tree policies are named ``package.module:Class`` in the scenario and
loaded on demand.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any

_PRESETS: dict[str, "Preset"] = {}
_loaded = False


@dataclass(frozen=True, eq=False)   # one per name
class Preset:
    """A registered name: its policy class, the option defaults it sets, and one line about it."""

    name: str
    cls: type
    defaults: dict[str, Any] = field(default_factory=dict)
    description: str = ""


def register_scheduler(name: str, *, aliases: tuple[str, ...] = (), defaults: dict | None = None,
                       description: str = ""):
    def deco(cls):
        for key in (name, *aliases):
            _PRESETS[key] = Preset(name, cls, dict(defaults or {}), description or (cls.__doc__ or ""))
        return cls
    return deco


def _load_builtins() -> None:
    global _loaded
    if not _loaded:
        package = importlib.import_module("simulator.policies")
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"simulator.policies.{module.name}")
        _loaded = True


def preset_names() -> list[str]:
    _load_builtins()
    return sorted(_PRESETS)


def get_preset(name: str) -> Preset:
    """A registered preset, or an out-of-tree ``package.module:Class``."""
    _load_builtins()
    if name in _PRESETS:
        return _PRESETS[name]
    if ":" in name:
        module_name, _, class_name = name.partition(":")
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"schedulers.preset: cannot load {name!r} ({exc})") from None
        return Preset(name, cls)
    raise ValueError(f"schedulers.preset: {name!r} is not one of {', '.join(preset_names())} "
                     f"or package.module:Class")
