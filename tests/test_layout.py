"""Imports run one way (docs/architecture.md): commands -> analyses and plots -> runner ->
scenario files and results -> engine -> fast paths -> policies -> KV cache -> requests; a
package imports only its own layer and those below it."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Each package's layer: an import from a higher layer is a wrong-way dependency.
LAYERS = {
    "cost_models": 0, "simulator.core": 1, "simulator.kv": 2, "simulator.policies": 3,
    "simulator.fastpath": 4, "simulator.engine": 5, "simulator.workload": 6, "simulator.results": 6,
    "simulator.scenario": 7, "simulator.runner": 8, "simulator.plots": 9, "simulator.sweep": 9,
    "simulator.validate": 9, "simulator.commands": 10, "simulator.api": 10, "simulator.cli": 11,
    "calibration": 9,
    "simulator.report": 9,
}


def layer_of(module: str) -> int | None:
    matches = [name for name in LAYERS if module == name or module.startswith(name + ".")]
    return LAYERS[max(matches, key=len)] if matches else None


def imports_of(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return names


def test_every_import_runs_downwards():
    wrong = []
    for package in ("simulator", "cost_models", "calibration"):
        for path in sorted((ROOT / package).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            own = layer_of(module)
            if own is None:
                continue
            for imported in imports_of(path):
                theirs = layer_of(imported)
                if theirs is not None and theirs > own:
                    wrong.append(f"{module} -> {imported}")
    assert not wrong, "\n".join(wrong)


def test_no_module_is_left_at_the_root_but_the_entries():
    roots = sorted(p.name for p in (ROOT / "simulator").glob("*.py"))
    assert roots == ["__init__.py", "api.py", "cli.py"]   # the entries: Python, CLI
