"""Scenario YAML is parsed by libyaml when PyYAML has it (~10x faster than the pure-Python parser);
the pure-Python parser stays the reference: same values, and its wording of every mistake."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simulator.scenario import ScenarioError
from simulator.scenario.file import _FastStrictLoader, _StrictLoader, parse_yaml

ROOT = Path(__file__).resolve().parents[1]
needs_libyaml = pytest.mark.skipif(_FastStrictLoader is None, reason="PyYAML built without libyaml")


def shipped_yaml_texts() -> list[tuple[str, str]]:
    texts = []
    for path in sorted(ROOT.glob("scenarios/*.yaml")) + sorted(ROOT.glob("bench/*.yaml")) \
            + sorted(ROOT.glob("tests/data/**/*.yaml")):
        try:
            texts.append((path.name, path.read_text(encoding="utf-8")))
        except UnicodeDecodeError:
            continue  # a deliberately broken file: read_raw_scenario refuses it before parsing
    return texts


@needs_libyaml
@pytest.mark.parametrize("name, text", shipped_yaml_texts())
def test_libyaml_gives_the_pure_python_parsers_values(name, text):
    try:
        expected = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError:
        pytest.skip(f"{name} is invalid on purpose (see the error tests below)")
    fast = yaml.load(text, Loader=_FastStrictLoader)  # noqa: S506
    assert repr(fast) == repr(expected)   # repr: 1 and 1.0, or True and 1, would compare equal


@needs_libyaml
@pytest.mark.parametrize("text, libyaml_problem, message", [
    ("a: b: c", "mapping values are not allowed in this context",
     "f.yaml: line 1 is not valid YAML (mapping values are not allowed here)"),
    ("a: [1, 2", "did not find expected ',' or ']'",
     "f.yaml: line 1 is not valid YAML (expected ',' or ']', but got '<stream end>')"),
    ("x:\n\t- 1", "found character that cannot start any token",
     "f.yaml: line 2 is not valid YAML (found character '\\t' that cannot start any token)"),
])
def test_a_syntax_error_keeps_the_pure_python_wording(text, libyaml_problem, message):
    with pytest.raises(yaml.YAMLError) as raised:   # precondition: libyaml words it differently
        yaml.load(text, Loader=_FastStrictLoader)  # noqa: S506
    assert raised.value.problem == libyaml_problem
    with pytest.raises(ScenarioError) as error:
        parse_yaml(text, "f.yaml")
    assert str(error.value) == message


def test_a_key_given_twice_is_refused_by_either_parser():
    with pytest.raises(ScenarioError) as error:
        parse_yaml("a: 1\nb: {c: 2, c: 3}\n", "f.yaml")
    assert str(error.value) == "f.yaml: line 2: key 'c' is given twice; give each key once"
