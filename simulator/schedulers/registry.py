"""Scheduler presets: a name maps to a policy class and the option defaults of that preset.

A new policy is one module with a class decorated by ``@register_scheduler("name")`` and a line in
``BUILTIN_MODULES``. Out-of-tree policies are named ``package.module:Class`` in the scenario and
loaded on demand. A lookup imports only the module of the preset asked for (start-up time counts);
listing the presets imports them all.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

_PRESETS: dict[str, "Preset"] = {}
# Each built-in preset name and alias -> its module under simulator/schedulers/.
BUILTIN_MODULES = {"static": "static", "faster_transformer": "static", "orca": "orca",
                   "vllm_v0": "vllm_v0", "sarathi": "sarathi", "vllm_v1": "vllm_v1"}


@dataclass(frozen=True, eq=False)   # one per name: compared by identity (runner.PreparedRun)
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
    for module in sorted(set(BUILTIN_MODULES.values())):
        importlib.import_module(f"simulator.schedulers.{module}")


def preset_names() -> list[str]:
    _load_builtins()
    return sorted(_PRESETS)


def get_preset(name: str) -> Preset:
    """A registered preset, or an out-of-tree ``package.module:Class``."""
    if name not in _PRESETS and name in BUILTIN_MODULES:
        importlib.import_module(f"simulator.schedulers.{BUILTIN_MODULES[name]}")
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
