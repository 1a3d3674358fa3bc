"""simulator/metrics/quantiles.py: numpy's median and linear percentile without loading numpy.ma,
the same floats bit for bit (hypothesis, deterministic)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.metrics.quantiles import median, percentile

PROPERTY = settings(derandomize=True, database=None, deadline=None, max_examples=400)
VALUES = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.floats(0, 10, width=64), st.sampled_from([0.0, -0.0, 1.0, 0.1, 1e-300, 5e-324]),
    st.floats(allow_nan=True, allow_infinity=True))
PERCENTS = st.one_of(st.sampled_from([0.0, 50.0, 90.0, 95.0, 99.0, 99.9, 100.0, 1e-9, 33.3]),
                     st.floats(0, 100), st.integers(0, 100))


def same_bits(ours, numpy_value) -> bool:
    return np.float64(ours).tobytes() == np.float64(numpy_value).tobytes()


@PROPERTY
@given(values=st.lists(VALUES, min_size=1, max_size=60), p=PERCENTS)
def test_percentile_and_median_are_numpys_bit_for_bit(values, p):
    array = np.array(values, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        expected_percentile, expected_median = np.percentile(array, p), np.median(array)
        ours_percentile, ours_median = percentile(array, p), median(array)
    assert same_bits(ours_percentile, expected_percentile), (ours_percentile, expected_percentile)
    assert same_bits(ours_median, expected_median), (ours_median, expected_median)


@PROPERTY
@given(values=st.lists(st.integers(-10**6, 10**6), min_size=1, max_size=30), p=PERCENTS)
def test_integer_inputs_give_numpys_floats(values, p):
    assert same_bits(percentile(np.array(values), p), np.percentile(np.array(values), p))
    assert same_bits(median(np.array(values)), np.median(np.array(values)))


def test_the_empty_metric_zero_gives_zero_as_numpy():
    """summary.py passes the scalar 0 for an empty metric (vLLM's ``values or 0``)."""
    assert same_bits(percentile(0, 99.0), np.percentile(0, 99.0))
    assert same_bits(median(0), np.median(0))


def test_quantiles_do_not_load_numpys_masked_arrays():
    code = ("import sys, numpy as np; from simulator.metrics.quantiles import median, percentile; "
            "x = np.random.default_rng(0).random(1001); median(x); percentile(x, 99.0); "
            "print('numpy.ma' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
