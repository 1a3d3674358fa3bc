"""The quick scenario check (simulator/strict_fields.py) against pydantic, which it stands in for.

`servesim run` builds a valid file without pydantic; pydantic is asked only when the quick check is
unsure. That is sound only if every input the quick check accepts is one pydantic accepts, built into
the same values (compared by ``repr``, so an int where pydantic gives a float shows). Checked on the
shipped scenarios, the bad-scenario files and hypothesis-mutated scenarios (deterministic).
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from simulator.scenario import (Scenario, ScenarioError, _options_adapter, _resolve_paths,
                                _scenario_model, validate_scenario)
from simulator.scenario_file import apply_overrides, read_raw_scenario
from simulator.policies.registry import get_preset, preset_names
from simulator.strict_fields import Unsure, build

ROOT = Path(__file__).resolve().parents[1]
GOOD_FILES = sorted([*ROOT.glob("scenarios/*.yaml"), *ROOT.glob("bench/*.yaml")])
BAD_FILES = sorted((ROOT / "tests" / "data" / "bad_scenarios").glob("*.yaml"))
REJECTED = "rejected"
PROPERTY = settings(derandomize=True, database=None, deadline=None, max_examples=300,
                    suppress_health_check=[HealthCheck.too_slow])


def raw_of(path: Path) -> dict:
    overrides = [line.removeprefix("# set: ") for line in path.read_bytes().decode("latin-1").splitlines()
                 if line.startswith("# set: ")]
    return _resolve_paths(read_raw_scenario(path, overrides), path.parent)


def quick(cls: type, raw: object) -> str | None:
    """The quick check's value (as repr), or None when it is unsure."""
    try:
        return repr(build(cls, raw))
    except Unsure:
        return None


def by_pydantic(cls: type, raw: object) -> str:
    """Pydantic's value (as repr, a Scenario model turned into the dataclass), or REJECTED."""
    try:
        if cls is Scenario:
            model = _scenario_model().model_validate(raw)
            return repr(Scenario(**{f.name: getattr(model, f.name) for f in dataclasses.fields(Scenario)}))
        return repr(_options_adapter(cls).validate_python(raw))
    except Exception:   # noqa: BLE001 - ValidationError, or what a dataclass check raised through it
        return REJECTED


def assert_quick_agrees(cls: type, raw: object) -> str | None:
    fast = quick(cls, raw)
    if fast is not None:
        assert fast == by_pydantic(cls, raw)
    return fast


@pytest.mark.parametrize("path", GOOD_FILES, ids=lambda p: p.stem)
def test_every_shipped_scenario_is_built_quickly_into_pydantics_values(path: Path):
    raw = raw_of(path)
    assert quick(Scenario, raw) is not None, "a shipped scenario should not need pydantic"
    assert quick(Scenario, raw) == by_pydantic(Scenario, raw)
    for entry in raw["schedulers"]:
        found = get_preset(entry["preset"])
        entry = {**found.defaults, **entry}
        assert quick(found.cls.Options, entry) == by_pydantic(found.cls.Options, entry) != REJECTED


@pytest.mark.parametrize("path", BAD_FILES, ids=lambda p: p.stem)
def test_bad_scenarios_are_rejected_quickly_whenever_pydantic_rejects(path: Path):
    try:
        raw = raw_of(path)
    except ScenarioError:
        return  # a YAML or --set mistake: no validation involved
    assert_quick_agrees(Scenario, raw)


def test_an_input_the_quick_check_is_unsure_of_is_left_to_pydantic():
    """Lax pydantic fields (priority values) coerce "3" to 3: the result is pydantic's."""
    raw = raw_of(ROOT / "scenarios" / "toy_unit.yaml")
    raw = apply_overrides(raw, ['workload.priority={kind: choice, values: ["3", 1]}'])
    assert quick(Scenario, raw) is None
    assert validate_scenario(raw).workload.priority.values == (3, 1)


def test_the_quick_check_builds_floats_from_ints_as_pydantic_does():
    raw = apply_overrides(raw_of(ROOT / "scenarios" / "static_vs_continuous.yaml"),
                          ["workload.arrival.rate=3"])
    assert build(Scenario, raw).workload.arrival.rate == 3.0
    assert isinstance(build(Scenario, raw).workload.arrival.rate, float)


# --- mutated scenarios ---------------------------------------------------------------------------

LEAVES = st.one_of(
    st.integers(-3, 5), st.integers(-2**60, 2**60), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, 0.5, 1.0, 1.5, 100.0, -0.0, 1e-9, 2**53 + 1, 2**53]),
    st.booleans(), st.none(), st.text(max_size=4),
    st.sampled_from(["fcfs", "priority", "poisson", "gamma", "constant", "inf", "fixed", "uniform",
                     "lognormal", "vllm_random", "choice", "trace", "roofline", "unit", "ft", "hf",
                     "serve", "llm", "least_loaded", "x.csv", "3", "a b", "ok-name"]),
    st.lists(st.integers(-1, 3), max_size=3), st.lists(st.floats(-1, 200), max_size=3),
    st.dictionaries(st.sampled_from(["kind", "rate", "value", "low", "high", "x"]),
                    st.integers(0, 9), max_size=3),
)


def paths_in(node: object, prefix: tuple = ()) -> list[tuple]:
    """Every key path and list index path inside a parsed scenario (not the root)."""
    children = (node.items() if isinstance(node, dict)
                else enumerate(node) if isinstance(node, list) else ())
    found = []
    for key, child in children:
        found += [(*prefix, key), *paths_in(child, (*prefix, key))]
    return found


def mutate(raw: dict, data: st.DataObject) -> dict:
    """One to three edits: replace a value, delete a key or add one."""
    raw = _deep_copy(raw)
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths_in(raw)))
        *parent_path, last = path
        parent = raw
        for key in parent_path:
            parent = parent[key]
        action = data.draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if action == "delete" and isinstance(parent, dict):
            del parent[last]
        elif action == "add" and isinstance(parent, dict):
            parent[data.draw(st.sampled_from(["extra", "kind", "name", "max", "burstiness", "timing",
                                             "weights", "values", "column", "prefix_len"]))] = \
                data.draw(LEAVES)
        else:
            parent[last] = data.draw(LEAVES)
    return raw


def _deep_copy(node):
    if isinstance(node, dict):
        return {k: _deep_copy(v) for k, v in node.items()}
    return [_deep_copy(v) for v in node] if isinstance(node, list) else node


RICH_BASES = [raw_of(path) for path in GOOD_FILES] + [
    {"name": "rich", "model": "llama-3.1-8b", "workload": {
        "arrival": {"kind": "gamma", "rate": 2.5, "burstiness": 0.5, "timing": "older"},
        "lengths": {"kind": "vllm_random", "input_len": 100, "output_len": 20,
                    "range_ratio": {"input": 0.25, "output": 0.5}, "num_special_tokens": 1},
        "duration_s": 10, "max_concurrency": 4,
        "priority": {"kind": "choice", "values": [0, 1], "weights": [1, 3.5]}},
     "engine": {"num_gpu_blocks": 64, "router": "least_loaded", "num_replicas": 2},
     "metrics": {"percentiles": [50, 99.9], "goodput": {"ttft_ms": 100}, "record_itl_gaps": False},
     "schedulers": [{"preset": "static", "max_wait_s": 0, "variant": "hf"}],
     "sweep": {"seed": [1, 2]}, "num_seeds": 2},
    {"name": "lognormal", "model": "llama-3.1-8b", "hardware": {"memory_gb": 80},
     "workload": {"arrival": {"kind": "constant", "rate": 1},
                  "prompt_len": {"kind": "lognormal", "median": 100, "sigma": 0.5, "min": 2, "max": 900},
                  "output_len": {"kind": "uniform", "low": 1, "high": 5}, "num_requests": 3},
     "schedulers": [{"preset": "orca"}]},
]


@PROPERTY
@given(data=st.data())
def test_mutated_scenarios_quick_check_accepts_only_what_pydantic_builds_the_same(data):
    raw = mutate(data.draw(st.sampled_from(RICH_BASES)), data)
    fast = assert_quick_agrees(Scenario, raw)
    event("quick check accepted" if fast else "left to pydantic")  # --hypothesis-show-statistics


OPTION_VALUES = st.one_of(
    st.integers(0, 4096), st.booleans(), st.none(),
    st.sampled_from([0.0, 0.01, 0.5, "fcfs", "priority", "ft", "hf", "request", "max_model_len", "v1"]),
    LEAVES)


@PROPERTY
@given(preset=st.sampled_from(sorted(preset_names())), data=st.data())
def test_mutated_scheduler_options_quick_check_accepts_only_what_pydantic_builds_the_same(preset, data):
    found = get_preset(preset)
    keys = [f.name for f in dataclasses.fields(found.cls.Options) if f.name != "preset"] + ["unknown"]
    entry = data.draw(st.dictionaries(st.sampled_from(keys), OPTION_VALUES, max_size=3))
    fast = assert_quick_agrees(found.cls.Options, {**found.defaults, **entry, "preset": preset})
    event("quick check accepted" if fast else "left to pydantic")


def test_the_quick_check_refuses_what_it_cannot_vouch_for():
    """Non-finite floats and ints beyond 2**53 go to pydantic, whatever it decides."""
    path = ROOT / "scenarios" / "static_vs_continuous.yaml"
    assert quick(Scenario, raw_of(path)) is not None
    for value in (math.inf, math.nan, 2**53 + 1, True):
        raw = raw_of(path)
        raw["workload"]["arrival"]["rate"] = value
        assert quick(Scenario, raw) is None


def test_options_whose_hints_cannot_be_resolved_are_left_to_pydantic():
    @dataclasses.dataclass(frozen=True)
    class Options:
        limit: "NotDefinedAnywhere" = 1  # noqa: F821 - the point of the test

    with pytest.raises(Unsure):
        build(Options, {"limit": 2})
