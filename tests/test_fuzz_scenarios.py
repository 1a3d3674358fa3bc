"""Mutated shipped scenarios: each gives a result or a one-line error, never a traceback, a hang or
a leftover file (issue 22).

Every shipped scenario is shrunk to a few requests, then mutated many times by a seeded generator:
a field set to a value of the wrong kind or range, a field removed, an unknown field added. Each
mutant runs through the CLI as a user's file would.
"""
from __future__ import annotations

import copy
import signal
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from simulator.cli import EXIT_USER_ERROR, main

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted(p for p in (ROOT / "scenarios").glob("*.yaml") if not p.name.startswith("sweep"))
MUTANTS_PER_SCENARIO = 100
CASE_TIMEOUT_S = 20
LONG_RUN_FIELDS = ("num_requests", "duration_s", "input_len", "output_len", "value", "high", "max",
                   "median")
BAD_VALUES = (-1, 0, 1, 2, 10 ** 6, 10 ** 9, 10 ** 12, -1e300, 1e300, 1e-300, 1e-9, 1e9, 2 ** 63,
              -(2 ** 63) - 1, 0.5, float("nan"), True, None, "", "x" * 300, "3e-5", [], [1, [2, [3]]],
              {}, {"kind": "nope"}, "../../etc")


def shrunk(path: Path) -> dict:
    raw = yaml.safe_load(path.read_text())
    workload = raw.get("workload", {})
    if "num_requests" in workload:
        workload["num_requests"] = min(workload["num_requests"], 12)
    if "duration_s" in workload:
        workload["duration_s"] = min(workload["duration_s"], 5.0)
    raw.pop("sweep", None)
    raw.pop("num_seeds", None)
    return raw


def leaves(node, path=()):
    """Every (path, value) of the mapping, lists included."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        yield path + (key,), value
        yield from leaves(value, path + (key,))


def mutate(raw: dict, rng: np.random.Generator) -> tuple[dict, str]:
    raw = copy.deepcopy(raw)
    paths = [p for p, _ in leaves(raw)]
    path = paths[rng.integers(len(paths))]
    parent = raw
    for key in path[:-1]:
        parent = parent[key]
    how = rng.integers(10)
    if how == 0 and isinstance(parent, dict):
        del parent[path[-1]]
        return raw, f"del {path}"
    if how == 1 and isinstance(parent, dict):
        parent["zz_unknown"] = 1
        return raw, f"add {path[:-1]}.zz_unknown"
    value = BAD_VALUES[rng.integers(len(BAD_VALUES))]
    if path[-1] in LONG_RUN_FIELDS and isinstance(value, (int, float)) and value > 1000:
        value = 1000   # a million requests is a valid run, just not a quick one
    parent[path[-1]] = value
    return raw, f"set {path} = {value!r}"


def cases():
    rng = np.random.default_rng(22)
    for path in SCENARIOS:
        base = shrunk(path)
        for i in range(MUTANTS_PER_SCENARIO):
            mutant, what = mutate(base, rng)
            yield pytest.param(mutant, id=f"{path.stem}-{i}"), what


CASES = list(cases())


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout


@pytest.mark.parametrize("mutant, what", [(c.values[0], w) for c, w in CASES],
                         ids=[c.id for c, _ in CASES])
def test_a_mutated_scenario_runs_or_is_refused_in_one_line(tmp_path, mutant, what):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(mutant))
    out = tmp_path / "out"
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_TIMEOUT_S)
    try:
        result = CliRunner().invoke(main, ["run", str(scenario), "--no-plots", "-o", str(out)])
    except _Timeout:
        pytest.fail(f"{what}: no answer within {CASE_TIMEOUT_S} s")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert result.exit_code in (0, EXIT_USER_ERROR), (
        f"{what}: exit {result.exit_code}: {result.exception!r}\n{yaml.safe_dump(mutant)}")
    if result.exit_code == EXIT_USER_ERROR:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), f"{what}: {result.stderr}"
        assert not out.exists() or not any(out.iterdir()), f"{what}: refused, yet wrote {list(out.iterdir())}"
    left = [p.name for p in tmp_path.rglob("*") if ".tmp" in p.name or ".old-" in p.name]
    assert not left, f"{what}: left {left}"
