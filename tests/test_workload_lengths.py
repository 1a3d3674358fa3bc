"""Length distributions, vLLM's random dataset (scheduler-semantics.md section 7, dataset rules 1-4),
and the packaged ShareGPT table."""
import csv
import math
from pathlib import Path

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError

from simulator.scenario import ScenarioError, json_schema, validate_scenario
from simulator.workload import (EmpiricalLength, FixedLength, InfArrivals, LengthSpec, LognormalLength,
                                RangeRatios, SharegptLength, SharegptLengths, UniformLength,
                                VllmRandomLengths, WorkloadSpec, derive_sharegpt)
from simulator.workload.generate import generate_seeded_workload
from simulator.workload.sharegpt import COLUMNS, TABLE_PATH


def test_fixed_length_repeats_the_value_and_draws_nothing():
    rng = np.random.default_rng(0)
    lengths = FixedLength(7).sample(4, rng)
    assert lengths.dtype == np.int64
    np.testing.assert_array_equal(lengths, [7, 7, 7, 7])
    assert rng.random() == np.random.default_rng(0).random()


def test_uniform_length_covers_both_ends_inclusive():
    lengths = UniformLength(3, 5).sample(10_000, np.random.default_rng(0))
    assert set(lengths.tolist()) == {3, 4, 5}


def test_lognormal_length_has_the_requested_median():
    lengths = LognormalLength(200, 0.8).sample(100_000, np.random.default_rng(0))
    # s.e. of a sample median of a lognormal: sqrt(pi/2) * sigma * median / sqrt(n)
    assert abs(np.median(lengths) - 200) < 4 * math.sqrt(math.pi / 2) * 0.8 * 200 / math.sqrt(100_000) + 1


def test_lognormal_length_is_clipped_to_min_and_max():
    lengths = LognormalLength(100, 2.0, min=10, max=500).sample(10_000, np.random.default_rng(0))
    assert lengths.min() == 10 and lengths.max() == 500


def test_lognormal_length_with_zero_sigma_is_the_rounded_median():
    assert LognormalLength(100.4, 0.0).sample(2, np.random.default_rng(0)).tolist() == [100, 100]
    assert LognormalLength(100.6, 0.0).sample(1, np.random.default_rng(0)).tolist() == [101]


def test_empirical_length_resamples_the_values_of_a_text_file(tmp_path):
    path = tmp_path / "lengths.txt"
    path.write_text("# prompt lengths\n10\n\n20\n30.0\n")
    lengths = EmpiricalLength(str(path)).sample(3000, np.random.default_rng(0))
    assert set(lengths.tolist()) == {10, 20, 30}
    counts = np.bincount(lengths)[[10, 20, 30]]
    assert np.all(np.abs(counts - 1000) < 4 * math.sqrt(3000 * (1 / 3) * (2 / 3)))


def test_empirical_length_reads_a_csv_column(tmp_path):
    path = tmp_path / "lengths.csv"
    path.write_text("id,prompt_len\n0,5\n1,6\n")
    lengths = EmpiricalLength(str(path), "prompt_len").sample(100, np.random.default_rng(0))
    assert set(lengths.tolist()) == {5, 6}


def test_empirical_length_errors_name_the_file_line_and_column(tmp_path):
    with pytest.raises(ValueError, match=r"EmpiricalLength\.path.*nope\.txt"):
        EmpiricalLength(str(tmp_path / "nope.txt")).sample(1, np.random.default_rng(0))
    csv_path = tmp_path / "l.csv"
    csv_path.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match=r"EmpiricalLength\.column.*'c'.*\['a', 'b'\]"):
        EmpiricalLength(str(csv_path), "c").sample(1, np.random.default_rng(0))
    bad = tmp_path / "bad.txt"
    bad.write_text("5\n-3\n")
    with pytest.raises(ValueError, match=r"bad\.txt:2.*'-3'.*>= 1"):
        EmpiricalLength(str(bad)).sample(1, np.random.default_rng(0))
    bad.write_text("5\nabc\n")  # a new file version is re-read, not served from the cache
    with pytest.raises(ValueError, match=r"bad\.txt:2.*'abc'"):
        EmpiricalLength(str(bad)).sample(1, np.random.default_rng(0))


@pytest.mark.parametrize("make, field", [
    (lambda: FixedLength(0), "FixedLength.value"),
    (lambda: UniformLength(5, 4), "UniformLength.high"),
    (lambda: UniformLength(0, 4), "UniformLength.low"),
    (lambda: LognormalLength(0, 1), "LognormalLength.median"),
    (lambda: LognormalLength(10, -1), "LognormalLength.sigma"),
    (lambda: LognormalLength(10, 1, min=0), "LognormalLength.min"),
    (lambda: LognormalLength(10, 1, min=5, max=4), "LognormalLength.max"),
    (lambda: EmpiricalLength(""), "EmpiricalLength.path"),
])
def test_bad_length_options_name_the_field(make, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        make()


# --- vllm_random (rules 1-4) ---

def test_vllm_random_bounds_follow_the_floor_ceil_formula():
    assert VllmRandomLengths(1024, 128, 0.5).input_bounds == (512, 1536)
    assert VllmRandomLengths(1024, 1, 0.5).output_bounds == (1, 2)       # floor(0.5)=0 -> 1; ceil(1.5)=2
    assert VllmRandomLengths(1024, 0, 0.5).output_bounds == (1, 1)       # max(1, .) on both ends
    assert VllmRandomLengths(1000, 100, 0.25).input_bounds == (750, 1250)
    # I' = 1024 - 1 = 1023: floor(767.25) = 767, ceil(1278.75) = 1279
    assert VllmRandomLengths(1024, 128, 0.25, num_special_tokens=1).input_bounds == (767, 1279)


def test_vllm_random_samples_hit_exactly_the_bounds():
    spec = VllmRandomLengths(1024, 1, 0.5)
    prompt, output, token_ids = spec.sample(20_000, np.random.default_rng(0))
    assert (prompt.min(), prompt.max()) == (512, 1536)
    assert (output.min(), output.max()) == (1, 2)
    assert token_ids is None and prompt.dtype == np.int64 and output.dtype == np.int64


def test_vllm_random_defaults_are_the_bench_defaults():
    prompt, output, _ = VllmRandomLengths().sample(3, np.random.default_rng(0))
    assert prompt.tolist() == [1024] * 3 and output.tolist() == [128] * 3


def test_vllm_random_per_dimension_ratio():
    spec = VllmRandomLengths(1024, 128, RangeRatios(input=0.5, output=0.0))
    assert spec.input_bounds == (512, 1536) and spec.output_bounds == (128, 128)
    prompt, output, _ = spec.sample(5000, np.random.default_rng(0))
    assert prompt.min() == 512 and prompt.max() == 1536 and set(output.tolist()) == {128}


def test_vllm_random_draws_inputs_then_outputs_like_vllm():
    # vLLM: rng = default_rng(seed); input_lens = rng.integers(lo, hi+1, N); output_lens = rng.integers(...)
    prompt, output, _ = VllmRandomLengths(100, 50, 0.5).sample(64, np.random.default_rng(7))
    reference = np.random.default_rng(7)
    np.testing.assert_array_equal(prompt, reference.integers(50, 151, size=64))
    np.testing.assert_array_equal(output, reference.integers(25, 76, size=64))


def test_vllm_random_adds_special_and_prefix_tokens_back_to_the_prompt():
    spec = VllmRandomLengths(256, 128, num_special_tokens=1, prefix_len=16)
    prompt, _, _ = spec.sample(2, np.random.default_rng(0))
    assert prompt.tolist() == [16 + 255 + 1] * 2  # the engine computes BOS and the shared prefix too


def test_vllm_random_token_ids_share_the_prefix_and_match_the_prompt_length():
    spec = VllmRandomLengths(64, 8, 0.5, num_special_tokens=1, prefix_len=4, vocab_size=50)
    prompt, _, token_ids = spec.sample(20, np.random.default_rng(0))
    assert [len(ids) for ids in token_ids] == prompt.tolist()
    assert len({ids[:5] for ids in token_ids}) == 1 and token_ids[0][0] == 0   # BOS stand-in + shared prefix
    for i, ids in enumerate(token_ids):
        inner = np.asarray(ids[5:])
        assert np.all(np.diff(inner) % 50 == 1) and all(0 <= t < 50 for t in ids)


@pytest.mark.parametrize("ratio, field", [
    (1.0, "VllmRandomLengths.range_ratio"),
    (-0.1, "VllmRandomLengths.range_ratio"),
])
def test_vllm_random_range_ratio_must_be_in_zero_one(ratio, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.") + r".*\[0, 1\)"):
        VllmRandomLengths(range_ratio=ratio)


def test_vllm_random_per_dimension_ratio_errors_name_the_dimension():
    with pytest.raises(ValueError, match=r"range_ratio\.output"):
        RangeRatios(input=0.1, output=1.0)


def test_vllm_random_prompt_that_could_be_empty_is_an_error():
    with pytest.raises(ValueError, match=r"VllmRandomLengths\.input_len"):
        VllmRandomLengths(input_len=1, num_special_tokens=1)
    assert VllmRandomLengths(input_len=1, num_special_tokens=1, prefix_len=2).input_bounds == (0, 0)


def test_config_layer_validates_lengths_and_ratio_dicts():
    adapter = TypeAdapter(LengthSpec)
    assert adapter.validate_python({"kind": "uniform", "low": 1, "high": 9}) == UniformLength(1, 9)
    assert adapter.validate_python({"kind": "lognormal", "median": 200, "sigma": 0.8, "max": 2048}) \
        == LognormalLength(200.0, 0.8, max=2048)
    with pytest.raises(ValidationError):
        adapter.validate_python({"kind": "vllm_random"})  # joint lengths go in WorkloadSpec.lengths
    joint = TypeAdapter(VllmRandomLengths).validate_python(
        {"input_len": 512, "range_ratio": {"input": 0.5, "output": 0.1}})
    assert joint.range_ratio == RangeRatios(0.5, 0.1) and joint.ratios == (0.5, 0.1)
    with pytest.raises(ValidationError, match="range_ratio"):
        TypeAdapter(VllmRandomLengths).validate_python({"range_ratio": 1.5})


# --- sharegpt: the packaged ShareGPT table (simulator/workload/data/README.md) ---

SHAREGPT_SOURCE = (Path(__file__).resolve().parents[1] / ".." / "shared" / "reference" / "llmservingsim"
                   / "workloads" / "sharegpt-llama-3.1-8b-300-sps10.jsonl")


def _table() -> tuple[np.ndarray, np.ndarray]:
    """The committed table read with the standard library, independently of the code under test."""
    with open(TABLE_PATH, newline="") as f:
        rows = np.array([(int(r["prompt_len"]), int(r["output_len"])) for r in csv.DictReader(f)])
    return rows[:, 0], rows[:, 1]


def _pairs(prompt, output) -> set:
    return set(zip(prompt.tolist(), output.tolist()))


def test_sharegpt_table_is_the_documented_one():
    prompt, output = _table()
    assert len(prompt) == 300 and prompt.sum() == 257239 and output.sum() == 195753
    assert (prompt.min(), prompt.max(), output.min(), output.max()) == (262, 3998, 512, 1021)
    assert list(zip(prompt, output)) == sorted(zip(prompt, output))


@pytest.mark.parametrize("column", ["prompt_len", "output_len"])
def test_sharegpt_draws_only_the_table_values_and_converges_to_its_mean(column):
    table, n = _table()[COLUMNS.index(column)], 20_000
    drawn = SharegptLength(column).sample(n, np.random.default_rng(0))
    assert drawn.dtype == np.int64 and drawn.size == n
    assert set(drawn.tolist()) == set(table.tolist())   # a row is missed with probability e^-66
    assert abs(drawn.mean() - table.mean()) < 4 * table.std() / math.sqrt(n)


def test_sharegpt_draws_with_the_empirical_rule_and_the_seed():
    def draw(seed):
        return SharegptLength("output_len").sample(500, np.random.default_rng(seed))
    empirical = EmpiricalLength(str(TABLE_PATH), "output_len").sample(500, np.random.default_rng(3))
    np.testing.assert_array_equal(draw(3), empirical)
    np.testing.assert_array_equal(draw(3), draw(3))
    assert not np.array_equal(draw(3), draw(4))


def test_sharegpt_max_drops_longer_rows_instead_of_clipping():
    prompt, _ = _table()
    drawn = SharegptLength("prompt_len", max=1000).sample(20_000, np.random.default_rng(0))
    assert set(drawn.tolist()) == {p for p in prompt.tolist() if p <= 1000}
    assert set(SharegptLength("prompt_len", max=262).sample(50, np.random.default_rng(0))) == {262}


def test_sharegpt_joint_lengths_draw_whole_rows():
    prompt, output = _table()
    drawn_prompt, drawn_output, token_ids = SharegptLengths().sample(20_000, np.random.default_rng(1))
    assert token_ids is None and drawn_prompt.dtype == drawn_output.dtype == np.int64
    assert _pairs(drawn_prompt, drawn_output) == _pairs(prompt, output)
    # one row index per request: the prompts are the per-field kind's draws from the same seed
    per_field = SharegptLength("prompt_len").sample(20_000, np.random.default_rng(1))
    np.testing.assert_array_equal(drawn_prompt, per_field)
    short = SharegptLengths(max_prompt_len=1000, max_output_len=600).rows()
    assert len(short) == 97 and short[:, 0].max() <= 1000 and short[:, 1].max() <= 600


def test_sharegpt_kind_in_a_scenario_draws_its_own_field_and_the_pairs():
    prompt, output = _table()
    raw = _scenario(prompt_len={"kind": "sharegpt"}, output_len={"kind": "sharegpt", "max": 700})
    workload = validate_scenario(raw).workload
    assert workload.prompt_len == SharegptLength("prompt_len")
    assert workload.output_len == SharegptLength("output_len", max=700)
    trace = generate_seeded_workload(workload, 0)
    assert set(trace.num_prompt_tokens.tolist()) <= set(prompt.tolist())
    assert set(trace.max_output_tokens.tolist()) <= {o for o in output.tolist() if o <= 700}
    joint = validate_scenario(_scenario(lengths={"kind": "sharegpt"})).workload
    trace = generate_seeded_workload(joint, 5)
    assert _pairs(trace.num_prompt_tokens, trace.max_output_tokens) <= _pairs(prompt, output)
    again = generate_seeded_workload(joint, 5)
    np.testing.assert_array_equal(trace.max_output_tokens, again.max_output_tokens)


def test_the_json_schema_lists_the_sharegpt_kinds():
    defs = json_schema()["$defs"]

    def kinds(field):
        node = defs["WorkloadSpec"]["properties"][field]
        return set(next(b for b in node["anyOf"] if b.get("type") != "null")["discriminator"]["mapping"])
    assert kinds("prompt_len") == kinds("output_len") == {"fixed", "uniform", "lognormal", "empirical",
                                                          "sharegpt"}
    assert kinds("lengths") == {"vllm_random", "sharegpt"}
    assert set(defs["SharegptLength"]["properties"]) == {"kind", "column", "max"}
    assert set(defs["SharegptLengths"]["properties"]) == {"kind", "max_prompt_len", "max_output_len"}


UNKNOWN = "unknown field (not allowed here; check the spelling); allowed here:"


@pytest.mark.parametrize("workload, message", [
    (dict(prompt_len={"kind": "sharegpt", "max": 100}), "workload.prompt_len.max: 100 is not allowed; "
     "must be >= 262, the shortest prompt_len in the ShareGPT table"),
    (dict(output_len={"kind": "sharegpt", "max": 0}),
     "workload.output_len.max: 0 is not allowed: Input should be greater than 0"),
    (dict(output_len={"kind": "sharegpt", "scale": 2}),
     f"workload.output_len.scale: {UNKNOWN} kind, column, max"),
    (dict(lengths={"kind": "sharegpt", "max_output_len": 511}), "workload.lengths.max_output_len: 511 is "
     "not allowed; must be >= 512, the shortest output_len in the ShareGPT table"),
    (dict(lengths={"kind": "sharegpt", "max_prompt_len": 300, "max_output_len": 513}),
     "workload.lengths.max_prompt_len/max_output_len: (300, 513) is not allowed; together they leave no "
     "row of the ShareGPT table: raise one of them"),
    (dict(lengths={"kind": "sharegpt", "max": 700}),
     f"workload.lengths.max: {UNKNOWN} kind, max_prompt_len, max_output_len"),
])
def test_a_bad_sharegpt_option_is_one_line_naming_the_field(workload, message):
    with pytest.raises(ScenarioError) as error:
        validate_scenario(_scenario(**workload))
    assert str(error.value) == message


def test_sharegpt_options_built_in_code_name_the_field():
    with pytest.raises(ValueError, match=r"^SharegptLength\.max: 100 is not allowed; must be >= 262"):
        SharegptLength("prompt_len", max=100)
    with pytest.raises(ValueError, match=r"^SharegptLength\.column: None is not allowed"):
        SharegptLength().sample(1, np.random.default_rng(0))   # a workload sets the column
    with pytest.raises(ValueError, match=r"^WorkloadSpec\.output_len\.max: 511 is not allowed"):
        WorkloadSpec(InfArrivals(), SharegptLength(), SharegptLength(max=511), num_requests=1)
    with pytest.raises(ValueError, match=r"^SharegptLengths\.max_prompt_len: 0 is not allowed"):
        SharegptLengths(max_prompt_len=0)


def test_the_committed_sharegpt_table_is_derived_from_the_shared_workload(tmp_path):
    if not SHAREGPT_SOURCE.exists():
        pytest.skip(f"reference workload not found at {SHAREGPT_SOURCE} (../shared/reference is absent)")
    assert derive_sharegpt.main([str(SHAREGPT_SOURCE), "-o", str(tmp_path / "table.csv")]) == 0
    assert (tmp_path / "table.csv").read_bytes() == TABLE_PATH.read_bytes()


def _scenario(**workload) -> dict:
    fixed = {} if "lengths" in workload else {"prompt_len": {"kind": "fixed", "value": 16},
                                              "output_len": {"kind": "fixed", "value": 8}}
    return {"name": "sharegpt", "model": "llama-3.1-8b", "cost_model": {"kind": "unit"},
            "workload": {"arrival": {"kind": "inf"}, "num_requests": 50, **fixed, **workload},
            "schedulers": [{"preset": "vllm_v1"}]}
