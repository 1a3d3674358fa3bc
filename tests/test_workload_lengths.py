"""Length distributions, and vLLM's random dataset (scheduler-semantics.md section 7, dataset rules 1-4)."""
import math

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError

from simulator.workload import (EmpiricalLength, FixedLength, LengthSpec, LognormalLength, RangeRatios,
                                UniformLength, VllmRandomLengths)


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
