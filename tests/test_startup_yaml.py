"""Scenario YAML is parsed by libyaml when PyYAML has it (~10x faster than the pure-Python parser);
the pure-Python parser stays the reference: same values, and its wording of every mistake."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simulator.scenario import ScenarioError
from simulator.scenario.file import MAX_EXPANDED_VALUES, _FastStrictLoader, _StrictLoader, parse_yaml

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


@pytest.mark.parametrize("text, value", [
    ("rate: 3e-5", 3e-05), ("rate: 1E+3", 1000.0), ("rate: -2e2", -200.0), ("rate: 3.0e-5", 3e-05),
    ("rate: 1.0e12", 1e12), ("rate: .5e1", 5.0), ("rate: 2.e3", 2000.0),
    ("rate: 12", 12), ("rate: 1.5", 1.5), ("rate: x3e5", "x3e5"), ("rate: '3e-5'", "3e-5"),
    ("day: 2001-12-14", __import__("datetime").date(2001, 12, 14)),
])
def test_exponent_numbers_read_as_yaml_1_2_reads_them(text, value):
    # Issue 22: `3e-5` was handed to the schema as a string while `3.0e-5` was a number.
    key = text.split(":")[0]
    assert repr(parse_yaml(text, "f.yaml")[key]) == repr(value)
    if _FastStrictLoader is not None:
        assert repr(yaml.load(text, Loader=_FastStrictLoader)[key]) == repr(value)  # noqa: S506


def test_merge_keys_are_read_and_may_be_overridden():
    # Issue 22: a valid `<<: *base` was refused as an unknown tag.
    text = "a: &base {x: 1, y: 2}\nb: {<<: *base, y: 3}\n"
    assert parse_yaml(text, "f.yaml") == {"a": {"x": 1, "y": 2}, "b": {"x": 1, "y": 3}}
    with pytest.raises(ScenarioError, match="key 'y' is given twice"):
        parse_yaml("a: &base {x: 1}\nb: {<<: *base, y: 3, y: 4}\n", "f.yaml")


@pytest.mark.parametrize("text", [
    "extra: " + "[" * 10_000 + "]" * 10_000,     # the pure-Python parser's recursion limit
    "extra: " + "{a: " * 40 + "1" + "}" * 40,    # readable, but no scenario nests so deep
    "a: &a [1, *a]",                              # an alias inside itself
])
def test_deep_nesting_is_refused_in_one_line(text):
    # Issue 22: YAML nested 10,000 deep raised RecursionError.
    with pytest.raises(ScenarioError) as error:
        parse_yaml(text, "f.yaml")
    assert str(error.value) == "f.yaml: nested deeper than 32 levels; a scenario needs about six"


def _alias_levels(levels: int, fan_out: int) -> tuple[str, int]:
    """YAML of ``levels`` lists, each holding ``fan_out`` aliases of the one before, and how many
    values it holds with every alias expanded (a list counts itself and its items)."""
    lines = ["l0: &l0 [1, 2]"] + [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * fan_out)}]"
                                  for i in range(1, levels + 1)]
    sizes = [3]
    for _ in range(levels):
        sizes.append(1 + fan_out * sizes[-1])
    return "\n".join(lines), 1 + sum(sizes)


def test_shared_aliases_within_the_expansion_limit_are_read():
    text, num_values = _alias_levels(3, 9)
    assert num_values < MAX_EXPANDED_VALUES
    assert len(parse_yaml(text, "f.yaml")) == 4


def test_an_alias_bomb_is_refused_from_its_size_not_its_expansion():
    # Issue 22: YAML alias bombs ran for minutes. Nine levels of nine aliases name 9**9 lists;
    # the walk visits each shared object once, so the refusal is immediate.
    import time
    text, num_values = _alias_levels(9, 9)
    started_s = time.perf_counter()
    with pytest.raises(ScenarioError) as error:
        parse_yaml(text, "f.yaml")
    assert time.perf_counter() - started_s < 1.0
    assert str(error.value) == (f"f.yaml: {num_values} values once its aliases are expanded; a "
                                f"scenario has at most {MAX_EXPANDED_VALUES} (long tables belong "
                                f"in a trace file)")


def test_a_long_flat_list_is_refused():
    text = "extra: [" + ", ".join(["1"] * MAX_EXPANDED_VALUES) + "]"
    with pytest.raises(ScenarioError, match=f"{MAX_EXPANDED_VALUES + 2} values"):
        parse_yaml(text, "f.yaml")


def test_a_file_that_is_not_regular_or_too_large_is_refused_before_reading(tmp_path):
    import os

    from simulator.scenario.file import MAX_FILE_BYTES, read_raw_scenario
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)   # reading it would block until a writer came
    with pytest.raises(ScenarioError, match="fifo.yaml: not a regular file"):
        read_raw_scenario(fifo)
    big = tmp_path / "big.yaml"
    big.write_text("name: x\n#" + "x" * MAX_FILE_BYTES + "\n")
    with pytest.raises(ScenarioError, match=f"big.yaml: {MAX_FILE_BYTES + 10} bytes; a scenario "
                                            f"file is at most {MAX_FILE_BYTES} bytes"):
        read_raw_scenario(big)
