"""Scenario validation (pydantic, scenario/model.py): every shipped scenario is valid,
values are converted as the options say, and any input, however mangled, gives a Scenario or one
``ScenarioError`` line, never another exception. Mutated scenarios come from hypothesis
(deterministic).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.scenario import Scenario, ScenarioError, validate_scenario
from simulator.scenario.model import _resolve_paths
from simulator.scenario.file import apply_overrides, read_raw_scenario
from simulator.policies.registry import get_preset, preset_names

ROOT = Path(__file__).resolve().parents[1]
GOOD_FILES = sorted([*ROOT.glob("scenarios/*.yaml"), *ROOT.glob("bench/*.yaml")])
PROPERTY = settings(derandomize=True, database=None, deadline=None, max_examples=300,
                    suppress_health_check=[HealthCheck.too_slow])


def raw_of(path: Path) -> dict:
    overrides = [line.removeprefix("# set: ") for line in path.read_bytes().decode("latin-1").splitlines()
                 if line.startswith("# set: ")]
    return _resolve_paths(read_raw_scenario(path, overrides), path.parent)


def outcome(raw: object) -> Scenario | None:
    """The validated scenario (its scheduler options too), or None after a one-line error."""
    try:
        return validate_scenario(raw)
    except ScenarioError as exc:
        assert str(exc) and "\n" not in str(exc)
        return None


@pytest.mark.parametrize("path", GOOD_FILES, ids=lambda p: p.stem)
def test_every_shipped_scenario_and_its_schedulers_are_valid(path: Path):
    scenario = validate_scenario(raw_of(path))
    assert isinstance(scenario, Scenario)
    assert len(scenario.scheduler_options()) == len(scenario.schedulers)


def test_lax_fields_coerce_as_pydantic_does():
    """Priority values are lax integers: "3" is 3."""
    raw = raw_of(ROOT / "scenarios" / "toy_unit.yaml")
    raw = apply_overrides(raw, ['workload.priority={kind: choice, values: ["3", 1]}'])
    assert validate_scenario(raw).workload.priority.values == (3, 1)


def test_an_int_for_a_float_field_becomes_a_float():
    raw = apply_overrides(raw_of(ROOT / "scenarios" / "static_vs_continuous.yaml"),
                          ["workload.arrival.rate=3"])
    rate = validate_scenario(raw).workload.arrival.rate
    assert rate == 3.0 and isinstance(rate, float)


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
def test_a_mutated_scenario_gives_a_scenario_or_one_error_line(data):
    outcome(mutate(data.draw(st.sampled_from(RICH_BASES)), data))


OPTION_VALUES = st.one_of(
    st.integers(0, 4096), st.booleans(), st.none(),
    st.sampled_from([0.0, 0.01, 0.5, "fcfs", "priority", "ft", "hf", "request", "max_model_len", "v1"]),
    LEAVES)


@PROPERTY
@given(preset=st.sampled_from(sorted(preset_names())), data=st.data())
def test_mutated_scheduler_options_give_options_or_one_error_line(preset, data):
    found = get_preset(preset)
    keys = [f.name for f in dataclasses.fields(found.cls.Options) if f.name != "preset"] + ["unknown"]
    entry = data.draw(st.dictionaries(st.sampled_from(keys), OPTION_VALUES, max_size=3))
    raw = raw_of(ROOT / "scenarios" / "toy_unit.yaml")
    raw["schedulers"] = [{**entry, "preset": preset}]
    outcome(raw)


@pytest.mark.parametrize("override, expected", [
    # Issue 22: 130 of 618 refusals said "unknown field" without naming the valid ones.
    ("engin.x=1", "engin: unknown field (not allowed here; check the spelling); did you mean "
                  "'engine'? allowed here: name, description, seed, model, hardware, cost_model, "
                  "engine, workload, schedulers, metrics, disaggregation, sweep, num_seeds"),
    ("workload.arrival.rat=3", "workload.arrival.rat: unknown field (not allowed here; check the "
                               "spelling); did you mean 'rate'? allowed here: kind, rate, timing"),
    ("workload.prompt_len.valu=3", "did you mean 'value'? allowed here: kind, value"),
    ("metrics.goodput.ttft=3", "did you mean 'ttft_ms'? allowed here: ttft_ms, tpot_ms, e2el_ms"),
    ("engine.zzzz=3", "engine.zzzz: unknown field (not allowed here; check the spelling); allowed "
                      "here: tensor_parallel_size,"),
    # A vLLM knob servesim does not model is refused as such, not as a misspelling.
    ("engine.data_parallel_size=2", "engine.data_parallel_size: data parallelism is engine.num_replicas "
                                    "engines behind engine.router (one scheduler and KV pool each, as "
                                    "vLLM's data-parallel ranks)"),
])
def test_an_unknown_field_lists_the_valid_ones_and_the_nearest(override, expected):
    raw = apply_overrides({"name": "t", "model": "llama-2-7b", "hardware": "a100-80gb",
                           "cost_model": {"kind": "unit"},
                           "workload": {"arrival": {"kind": "poisson", "rate": 1.0},
                                        "prompt_len": {"kind": "fixed", "value": 4},
                                        "output_len": {"kind": "fixed", "value": 2},
                                        "num_requests": 2},
                           "schedulers": [{"preset": "vllm_v1"}]}, [override])
    with pytest.raises(ScenarioError) as error:
        validate_scenario(raw)
    assert expected in str(error.value)


def test_an_unknown_scheduler_option_lists_the_presets_options():
    raw = {"name": "t", "model": "llama-2-7b", "hardware": "a100-80gb", "cost_model": {"kind": "unit"},
           "workload": {"arrival": {"kind": "inf"}, "prompt_len": {"kind": "fixed", "value": 4},
                        "output_len": {"kind": "fixed", "value": 2}, "num_requests": 2},
           "schedulers": [{"preset": "orca", "max_num_seq": 4}]}
    with pytest.raises(ScenarioError) as error:
        validate_scenario(raw)
    assert str(error.value).startswith("schedulers[0].max_num_seq: unknown field (not allowed here; "
                                       "check the spelling); did you mean 'max_num_seqs'? allowed "
                                       "here: preset, name, max_num_seqs,")


def test_set_accepts_the_sweep_blocks_index_syntax():
    # Issue 22: `--set schedulers[0].x` was taken as a top-level key "schedulers[0]".
    raw = {"schedulers": [{"preset": "vllm_v1"}, {"preset": "orca"}]}
    assert apply_overrides(raw, ["schedulers[1].max_num_seqs=8"]) == \
        apply_overrides(raw, ["schedulers.1.max_num_seqs=8"]) == \
        {"schedulers": [{"preset": "vllm_v1"}, {"preset": "orca", "max_num_seqs": 8}]}
    with pytest.raises(ScenarioError, match=r"'schedulers\[2\].name': index 2 is out of range"):
        apply_overrides(raw, ["schedulers[2].name=x"])


# -- the JSON Schema's enumerations (scenario/schema_enums.py) ------------------------------------
def test_the_schema_enumerates_the_catalogs():
    from cost_models.factory import COST_MODEL_BUILDERS
    from cost_models.hardware import hardware_aliases
    from cost_models.model_spec import PRESETS
    from cost_models.profiles import profile_names
    from simulator.scenario import json_schema
    schema = json_schema()
    props, defs = schema["properties"], schema["$defs"]
    assert props["model"]["anyOf"][0]["enum"] == sorted(PRESETS)
    assert props["hardware"]["anyOf"][0]["enum"] == sorted(hardware_aliases())
    assert "h100-sxm" in props["hardware"]["anyOf"][0]["enum"] and "a100" in props["hardware"]["anyOf"][0]["enum"]
    kinds = props["cost_model"]["discriminator"]["mapping"]
    assert list(kinds) == list(COST_MODEL_BUILDERS) == ["unit", "roofline", "profiled", "physics"]
    for kind, ref in kinds.items():
        branch = defs[ref.rsplit("/", 1)[-1]]["properties"]
        assert list(branch) == ["kind", *COST_MODEL_BUILDERS[kind].options]
    assert defs["CostModel_profiled"]["properties"]["profile"]["enum"] == profile_names()
    assert defs["CostModel_physics"]["properties"]["profile"]["enum"] == [
        n for n in profile_names() if n.startswith("physics-")] != []
    assert props["schedulers"]["items"]["properties"]["preset"]["anyOf"][0]["enum"] == preset_names()


@pytest.mark.parametrize("field, value, valid", [
    ("model", "qwen3-8b", True), ("model", "configs/my-model/config.json", True),
    ("model", ["llama-2-7b"], False),
    ("hardware", "a100", True), ("hardware", "H100 SXM", True),   # the run normalises names
    ("hardware", "h100-sxn", False), ("hardware", {"memory_gb": 80, "memory_bandwidth_GBps": 2000,
                                                   "bf16_tflops": 300}, True),
    ("cost_model", {"kind": "roofline", "compute_efficiency": 0.5}, True),
    ("cost_model", {"kind": "roofine"}, False),
    ("cost_model", {"kind": "unit", "compute_efficiency": 0.5}, False),   # not a unit option
    ("cost_model", {"kind": "profiled", "profile": "no-such-profile"}, False),
    ("schedulers", [{"preset": "vllm_v1"}, {"kind": "orca"}, {"preset": "pkg.mod:Policy"}], True),
    ("schedulers", [{"preset": "vllm_v2"}], False), ("schedulers", [{"max_num_seqs": 4}], False),
])
def test_the_schema_refuses_only_what_the_run_refuses(field, value, valid):
    jsonschema = pytest.importorskip("jsonschema", reason="the dev extra installs jsonschema")
    from simulator.scenario import json_schema
    raw = {**raw_of(ROOT / "scenarios" / "toy_unit.yaml"), field: value}
    errors = list(jsonschema.Draft202012Validator(json_schema()).iter_errors(raw))
    assert (not errors) == valid, [e.message for e in errors]


def test_every_shipped_scenario_is_valid_under_the_schema():
    jsonschema = pytest.importorskip("jsonschema", reason="the dev extra installs jsonschema")
    from simulator.scenario import json_schema
    validator = jsonschema.Draft202012Validator(json_schema())
    for path in GOOD_FILES:
        assert [e.message for e in validator.iter_errors(raw_of(path))] == [], path.name
