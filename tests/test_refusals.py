"""Every field of the scenario schema, given a wrong value, is refused in one line that names the
field, the value and what is allowed (issue 22, point 4).

The fields come from the JSON Schema itself (``servesim schema``) and from each scheduler preset's
options schema, so a field added later is tested without editing this file. Each field is set,
one at a time, inside a valid scenario: for the discriminated blocks (arrival kinds, length
kinds) inside a valid scenario of each kind that needs no file.
"""
from __future__ import annotations

import copy
import re

import pytest

from simulator.policies.registry import get_preset, preset_names
from simulator.runner import prepare
from simulator.scenario import ScenarioError, json_schema, validate_scenario
from simulator.scenario.model import _options_adapter

BASE = {
    "name": "refusals", "model": "llama-2-7b", "hardware": "a100-80gb",
    "cost_model": {"kind": "unit"},
    "engine": {"block_size": 16, "num_gpu_blocks": 1000, "max_model_len": 256},
    "workload": {"arrival": {"kind": "poisson", "rate": 2.0},
                 "prompt_len": {"kind": "fixed", "value": 16},
                 "output_len": {"kind": "uniform", "low": 1, "high": 8}, "num_requests": 4,
                 "priority": {"kind": "choice", "values": [0, 1], "weights": [1, 3]}},
    "schedulers": [{"preset": "vllm_v1"}],
    "metrics": {"percentiles": [50, 99], "goodput": {"ttft_ms": 100}},
}
# One valid block of every kind that needs no file, each swapped into BASE in turn.
VARIANTS = {
    ("workload", "arrival"): [{"kind": "gamma", "rate": 2.0, "burstiness": 0.5},
                              {"kind": "constant", "rate": 2.0}, {"kind": "inf"}],
    ("workload", "prompt_len"): [{"kind": "uniform", "low": 1, "high": 8},
                                 {"kind": "lognormal", "median": 8, "sigma": 0.5, "max": 64},
                                 {"kind": "sharegpt", "max": 1000}],
    ("workload", "lengths"): [{"kind": "vllm_random", "input_len": 16}, {"kind": "sharegpt"}],
    ("workload", "sessions"): [{"num_turns": {"kind": "fixed", "value": 2}, "think_time_s": 1.0}],
    ("engine", "speculative"): [{"method": "ngram", "num_speculative_tokens": 2,
                                 "mean_acceptance_length": 2.0}],
}
# Words that say what is allowed, in pydantic's messages and ours.
ALLOWED = re.compile(r"must|allowed|one of|should|expected|valid|greater|less|at (most|least)"
                     r"|required|give|a (positive|non-negative)|is not a|only|between|range")


def _bases() -> list[dict]:
    bases = [BASE]
    for (block, key), variants in VARIANTS.items():
        for variant in variants:
            raw = copy.deepcopy(BASE)
            raw[block][key] = variant
            if key == "lengths":   # a joint kind replaces the per-field ones
                del raw[block]["prompt_len"], raw[block]["output_len"]
            bases.append(raw)
    return bases


def _resolve(schema: dict, node: dict) -> dict:
    while "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    branches = [b for b in node.get("anyOf", ()) if b.get("type") != "null"]
    return _resolve(schema, branches[0]) if len(branches) == 1 else node


def _wrong_values(leaf: dict) -> list:
    """Values no field of this schema accepts: the wrong type, and just past each bound."""
    kind = leaf.get("type")
    if kind == "integer":
        values = ["many", 1.5]
    elif kind == "number":
        values = ["fast"]
    elif kind == "boolean":
        values = ["maybe"]
    elif kind == "string":
        values = ["no-such-value"] if "enum" in leaf else [[1, 2]]
        values += ["bad name!"] if "pattern" in leaf else []
    elif kind in ("array", "object"):
        values = [5]
    else:
        return []
    if "minimum" in leaf:
        values.append(leaf["minimum"] - 1)
    if "exclusiveMinimum" in leaf:
        values.append(leaf["exclusiveMinimum"])
    if "maximum" in leaf and leaf["maximum"] < 2**62:
        values.append(leaf["maximum"] * 2 + 1)
    return values


def _fields(schema: dict, node: dict, raw, path: tuple):
    """(path, leaf schema) of every field under ``node``, in the scenario ``raw``."""
    for name, prop in _resolve(schema, node).get("properties", {}).items():
        target = _resolve(schema, prop)
        value = raw.get(name) if isinstance(raw, dict) else None
        if "properties" in target:
            if value is None and target.get("required"):
                continue   # a block with required fields: tested where VARIANTS gives one
            yield from _fields(schema, target, value or {}, (*path, name))
        elif "oneOf" in target:
            kind = value.get("kind") if isinstance(value, dict) else None
            ref = target["discriminator"]["mapping"].get(kind)
            if ref is not None:
                yield from _fields(schema, {"$ref": ref}, value, (*path, name))
        else:
            yield (*path, name), target


def _scenario_cases():
    schema, seen = json_schema(), set()
    for raw in _bases():
        for path, leaf in _fields(schema, schema, raw, ()):
            for wrong in _wrong_values(leaf):
                key = (".".join(path), repr(wrong), repr(raw["workload"]))
                if key not in seen:
                    seen.add(key)
                    yield pytest.param(raw, path, wrong, id=f"{'.'.join(path)}={wrong!r}")


def _scheduler_cases():
    for preset in preset_names():
        options_schema = _options_adapter(get_preset(preset).cls.Options).json_schema()
        options_schema.setdefault("$defs", {})
        for name, prop in options_schema["properties"].items():
            if name in ("label", "preset"):
                continue
            for wrong in _wrong_values(_resolve(options_schema, prop)):
                yield pytest.param(preset, name, wrong, id=f"{preset}.{name}={wrong!r}")


def _set(raw: dict, path: tuple, value) -> dict:
    raw = copy.deepcopy(raw)
    node = raw
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value
    return raw


def _assert_one_line_naming(message: str, field: str, value) -> None:
    assert "\n" not in message, message
    assert message.startswith(field), f"{message!r} does not start with {field!r}"
    shown = {repr(value), str(value), f"{value:g}" if isinstance(value, float) else str(value)}
    assert any(s in message for s in shown) or isinstance(value, list) and "list" in message, \
        f"{message!r} does not show the value {value!r}"
    assert ALLOWED.search(message), f"{message!r} does not say what is allowed"


@pytest.mark.parametrize("raw, path, wrong", list(_scenario_cases()))
def test_a_wrong_value_of_each_scenario_field_is_refused_in_one_line(raw, path, wrong):
    with pytest.raises(ScenarioError) as error:
        validate_scenario(_set(raw, path, wrong))
    _assert_one_line_naming(str(error.value), ".".join(path), wrong)


@pytest.mark.parametrize("preset, name, wrong", list(_scheduler_cases()))
def test_a_wrong_value_of_each_scheduler_option_is_refused_in_one_line(preset, name, wrong):
    raw = copy.deepcopy(BASE)
    raw["schedulers"] = [{"preset": preset, name: wrong}]
    with pytest.raises(ScenarioError) as error:
        validate_scenario(raw)
    _assert_one_line_naming(str(error.value), f"schedulers[0].{name}", wrong)


# Kinds that read a file: its step_overhead_s is the option a value can get wrong.
FILE_KINDS = {"profiled": "vidur-a100-llama-2-7b", "physics": "physics-h200-cuda_graph"}


def _cost_model_cases():
    from cost_models.factory import COST_MODEL_BUILDERS
    for kind, entry in COST_MODEL_BUILDERS.items():
        for name in entry.options if kind not in FILE_KINDS else ("step_overhead_s",):
            for wrong in ("fast", -1.0):
                yield pytest.param(kind, name, wrong, id=f"{kind}.{name}={wrong!r}")


@pytest.mark.parametrize("kind, name, wrong", list(_cost_model_cases()))
def test_a_wrong_value_of_each_cost_model_option_is_refused_in_one_line(kind, name, wrong):
    # Cost-model options are checked when the model is built (prepare), against its kind's own.
    raw = copy.deepcopy(BASE)
    raw["cost_model"] = {"kind": kind, name: wrong}
    if kind in FILE_KINDS:
        raw["cost_model"]["profile"] = FILE_KINDS[kind]
    with pytest.raises(ScenarioError) as error:
        prepare(validate_scenario(raw))
    _assert_one_line_naming(str(error.value), f"cost_model.{name}", wrong)


def test_the_cases_cover_every_block_of_the_schema():
    fields = {param.values[1][:2] for param in _scenario_cases()}
    assert {("engine", "num_gpu_blocks"), ("workload", "arrival"), ("workload", "prompt_len"),
            ("metrics", "goodput"), ("seed",), ("num_seeds",)} <= fields
    assert sum(1 for _ in _scheduler_cases()) > 50
