"""Arrival processes against scheduler-semantics.md section 7 "Arrivals" (vLLM bench serve)."""
import dataclasses
import math

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError

from simulator.workload import (ArrivalSpec, ConstantArrivals, GammaArrivals, InfArrivals,
                                PoissonArrivals)

N = 200_000


def raw_gaps(arrivals, n=N, seed=0):
    """Raw gaps through the public API: under "older" timing the time differences are the gaps."""
    older = dataclasses.replace(arrivals, timing="older")
    return np.diff(older.arrival_times_s(n + 1, np.random.default_rng(seed)))


def cv_standard_error(burstiness, n):
    """Delta-method s.e. of the sample CV of Gamma(b) gaps: CV * sqrt((1/2 + 1/(2b)) / n)."""
    return math.sqrt((0.5 + 0.5 / burstiness) / n) / math.sqrt(burstiness)


def test_poisson_gaps_have_mean_one_over_rate_and_cv_one():
    rate = 5.0
    gaps = raw_gaps(PoissonArrivals(rate))
    assert abs(gaps.mean() - 1 / rate) < 4 * (1 / rate) / math.sqrt(N)  # exponential sd = mean
    assert abs(gaps.std() / gaps.mean() - 1.0) < 4 * cv_standard_error(1.0, N)


@pytest.mark.parametrize("burstiness", [0.25, 4.0])
def test_gamma_gaps_have_cv_one_over_sqrt_burstiness(burstiness):
    rate = 2.0
    gaps = raw_gaps(GammaArrivals(rate, burstiness))
    mean_se = (1 / rate) / math.sqrt(burstiness) / math.sqrt(N)
    assert abs(gaps.mean() - 1 / rate) < 4 * mean_se
    cv = gaps.std() / gaps.mean()
    assert abs(cv - 1 / math.sqrt(burstiness)) < 4 * cv_standard_error(burstiness, N)


def test_poisson_draws_the_same_numbers_as_gamma_with_burstiness_one():
    # vLLM draws Poisson gaps as Gamma(shape=1); so do we, so the two spellings are one workload.
    poisson = PoissonArrivals(3.0).arrival_times_s(1000, np.random.default_rng(1))
    gamma = GammaArrivals(3.0, 1.0).arrival_times_s(1000, np.random.default_rng(1))
    assert poisson.tobytes() == gamma.tobytes()


def test_newer_timing_rescales_so_the_last_arrival_is_exactly_n_over_rate():
    times = PoissonArrivals(3.0).arrival_times_s(1000, np.random.default_rng(0))
    assert times[-1] == 1000 / 3.0
    assert times[0] > 0.0  # (newer) the first request also waits its gap
    assert times.dtype == np.float64 and np.all(np.diff(times) >= 0)


def test_newer_times_are_the_cumulative_gaps_scaled_by_one_factor():
    gaps = np.random.default_rng(0).gamma(0.5, 1 / (4.0 * 0.5), size=50)
    times = GammaArrivals(4.0, 0.5).arrival_times_s(50, np.random.default_rng(0))
    np.testing.assert_allclose(times, np.cumsum(gaps) * (50 / 4.0) / gaps.sum(), rtol=1e-12)


def test_older_timing_sends_request_zero_at_zero_then_raw_gaps():
    gaps = np.random.default_rng(0).gamma(1.0, 1 / 2.0, size=5)
    times = PoissonArrivals(2.0, timing="older").arrival_times_s(5, np.random.default_rng(0))
    np.testing.assert_array_equal(times, np.concatenate(([0.0], np.cumsum(gaps)[:-1])))


def test_both_timings_consume_the_generator_identically():
    newer, older = np.random.default_rng(5), np.random.default_rng(5)
    PoissonArrivals(1.0).arrival_times_s(10, newer)
    PoissonArrivals(1.0, timing="older").arrival_times_s(10, older)
    assert newer.random() == older.random()


def test_constant_arrivals_are_exactly_one_over_rate_apart():
    newer = ConstantArrivals(4.0).arrival_times_s(5, np.random.default_rng(0))
    older = ConstantArrivals(4.0, timing="older").arrival_times_s(5, np.random.default_rng(0))
    np.testing.assert_array_equal(newer, [0.25, 0.5, 0.75, 1.0, 1.25])  # last = N/r
    np.testing.assert_array_equal(older, [0.0, 0.25, 0.5, 0.75, 1.0])


def test_inf_releases_everything_at_zero_and_draws_nothing():
    rng = np.random.default_rng(0)
    times = InfArrivals().arrival_times_s(7, rng)
    np.testing.assert_array_equal(times, np.zeros(7))
    assert rng.random() == np.random.default_rng(0).random()


def test_duration_keeps_arrivals_up_to_the_duration_from_raw_gaps():
    rate, duration_s = 50.0, 100.0
    times = PoissonArrivals(rate).arrival_times_until_s(duration_s, np.random.default_rng(0))
    expected = rate * duration_s
    assert abs(times.size - expected) < 4 * math.sqrt(expected)  # Poisson count
    assert times[0] > 0 and times[-1] <= duration_s and np.all(np.diff(times) >= 0)
    # Raw gaps, no rescaling: the times are the plain cumulative sums of the first draws.
    chunk = int(expected + 6 * math.sqrt(expected)) + 16
    gaps = np.random.default_rng(0).gamma(1.0, 1 / rate, size=chunk)
    np.testing.assert_array_equal(times, np.cumsum(gaps)[: times.size])


def test_duration_with_constant_arrivals_counts_both_ends_by_timing():
    newer = ConstantArrivals(2.0).arrival_times_until_s(5.0, np.random.default_rng(0))
    older = ConstantArrivals(2.0, timing="older").arrival_times_until_s(5.0, np.random.default_rng(0))
    assert newer.size == 10 and newer[0] == 0.5 and newer[-1] == 5.0
    assert older.size == 11 and older[0] == 0.0 and older[-1] == 5.0


def test_duration_with_bursty_gamma_draws_more_chunks_until_it_covers_the_duration():
    times = GammaArrivals(1.0, 0.05).arrival_times_until_s(20.0, np.random.default_rng(3))
    assert times.size > 0 and times[-1] <= 20.0


def test_duration_with_inf_arrivals_is_an_error():
    with pytest.raises(ValueError, match="duration_s"):
        InfArrivals().arrival_times_until_s(10.0, np.random.default_rng(0))


@pytest.mark.parametrize("rate", [0.0, -1.0, math.inf, math.nan])
def test_bad_rate_names_the_field(rate):
    with pytest.raises(ValueError, match=r"PoissonArrivals\.rate"):
        PoissonArrivals(rate)
    with pytest.raises(ValueError, match=r"ConstantArrivals\.rate"):
        ConstantArrivals(rate)


@pytest.mark.parametrize("burstiness", [0.0, -2.0, math.inf])
def test_bad_burstiness_names_the_field(burstiness):
    with pytest.raises(ValueError, match=r"GammaArrivals\.burstiness"):
        GammaArrivals(1.0, burstiness)


def test_bad_timing_names_the_field_and_the_allowed_values():
    with pytest.raises(ValueError, match=r"GammaArrivals\.timing.*newer.*older"):
        GammaArrivals(1.0, timing="middle")


def test_negative_count_is_an_error():
    with pytest.raises(ValueError, match="num_requests"):
        PoissonArrivals(1.0).arrival_times_s(-1, np.random.default_rng(0))


def test_config_layer_validates_arrivals_by_kind():
    adapter = TypeAdapter(ArrivalSpec)
    assert adapter.validate_python({"kind": "gamma", "rate": 2, "burstiness": 0.5}) == GammaArrivals(2.0, 0.5)
    assert adapter.validate_python({"kind": "inf"}) == InfArrivals()
    with pytest.raises(ValidationError, match="rate"):
        adapter.validate_python({"kind": "poisson", "rate": -1})
    with pytest.raises(ValidationError, match="burstyness"):
        adapter.validate_python({"kind": "gamma", "rate": 1, "burstyness": 2})  # typo: unknown key
    kinds = {d["properties"]["kind"]["const"] for d in adapter.json_schema()["$defs"].values()
             if "kind" in d.get("properties", {})}
    assert kinds == {"poisson", "gamma", "constant", "inf", "trace"}
