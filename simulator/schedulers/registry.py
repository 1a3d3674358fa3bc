"""Scheduler presets: a name maps to a policy class and the option defaults of that preset.

A new policy is one module with a class decorated by ``@register_scheduler("name")``. Out-of-tree
policies are named ``package.module:Class`` in the scenario and loaded on demand.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

_PRESETS: dict[str, "Preset"] = {}
_BUILTIN_MODULES = ("static", "orca", "vllm_v0", "sarathi", "vllm_v1")


@dataclass(frozen=True)
class Preset:
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
    for module in _BUILTIN_MODULES:
        importlib.import_module(f"simulator.schedulers.{module}")


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
    raise ValueError(f"schedulers.preset: {name!r} is not one of {', '.join(sorted(_PRESETS))} "
                     f"or package.module:Class")
