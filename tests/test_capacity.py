"""Capacity under SLOs: the bisection itself (on exact thresholds), SLO parsing, reproducibility,
intervals over seeds, and the textbook result: continuous batching serves a higher rate than
static batching at the same TTFT p99 SLO, by much less when every output has the same length."""
from __future__ import annotations

from pathlib import Path

import pytest

from simulator.sweep.capacity import (CapacitySearch, find_capacity, meets_slos, parse_slos,
                                search_boundary, single_scheduler_raw, summarize_capacity)
from simulator.scenario.file import read_raw_scenario
from simulator.sweep.stats import mean_ci95, t_critical_95

ROOT = Path(__file__).resolve().parents[1]
SLOTS = ROOT / "scenarios" / "static_vs_continuous_slots.yaml"
TTFT_SLO = {"p99_ttft_ms": 3000.0}
EQUAL_OUTPUTS = "workload.output_len={kind: fixed, value: 32}"
RATE = CapacitySearch(rel_tol=0.05)


def slots_raw(*overrides: str, num_requests: int = 200) -> dict:
    return read_raw_scenario(SLOTS, [f"workload.num_requests={num_requests}", *overrides])


# -- the search on known thresholds --------------------------------------------------------------
def test_rate_bisection_brackets_the_threshold_within_the_tolerance():
    probes = []

    def probe(rate):
        probes.append(rate)
        return rate <= 3.7
    low, high = search_boundary(probe, 1.0, RATE)
    assert low <= 3.7 < high and high / low <= 1.05
    assert probes[:3] == [1.0, 2.0, 4.0]   # doubling finds the bracket [2, 4]


def test_concurrency_bisection_finds_the_exact_integer_threshold():
    search = CapacitySearch(over="workload.max_concurrency")
    assert search_boundary(lambda c: c <= 13, 4, search) == (13, 14)
    assert search_boundary(lambda c: c <= 13, 40, search) == (13, 14)
    assert search_boundary(lambda c: False, 4, search) == (None, 1)


def test_a_limit_never_crossed_is_reported_unbounded():
    low, high = search_boundary(lambda rate: True, 1.0, RATE)
    assert (low, high) == (4096.0, None)


# -- SLOs and statistics -------------------------------------------------------------------------
def test_slos_parse_and_bad_ones_name_the_item():
    assert parse_slos(["p99_ttft_ms=1000", "median_tpot_ms=50", "p99.9_e2el_ms=2e4"]) == {
        "p99_ttft_ms": 1000.0, "median_tpot_ms": 50.0, "p99.9_e2el_ms": 20000.0}
    for bad, says in [("p99_ttft=1000", "must look like p99_ttft_ms=1000"),
                      ("p99_ttft_ms=fast", "'fast' is not a number of ms"),
                      ("p99_ttft_ms=-1", "must be a positive number")]:
        with pytest.raises(ValueError, match=says):
            parse_slos([bad])


def test_a_run_meets_slos_only_when_every_bound_holds_and_all_requests_finished():
    summary = {"p99_ttft_ms": 900.0, "p99_tpot_ms": 60.0, "num_unfinished": 0}
    assert meets_slos(summary, {"p99_ttft_ms": 900.0})   # <=, as vLLM's goodput compares
    assert not meets_slos(summary, {"p99_ttft_ms": 900.0, "p99_tpot_ms": 50.0})
    assert not meets_slos({**summary, "num_unfinished": 1}, {"p99_ttft_ms": 1000.0})


def test_percentiles_the_slos_read_are_added_to_the_runs():
    single = single_scheduler_raw(slots_raw(), 1, {"p99.9_ttft_ms": 1.0, "median_tpot_ms": 1.0})
    assert single["metrics"]["percentiles"] == [90.0, 95.0, 99.0, 99.9]
    assert [s["preset"] for s in single["schedulers"]] == ["orca"] and "sweep" not in single


def test_student_t_interval_over_seeds():
    assert t_critical_95(1) == 12.706 and t_critical_95(2) == 4.303 and t_critical_95(10**6) == pytest.approx(1.96, abs=1e-4)
    assert t_critical_95(45) == pytest.approx(2.014, abs=2e-3)   # tables: 2.014
    est = mean_ci95([1.0, 2.0, 3.0])   # s = 1, n = 3
    assert est.mean == 2.0 and est.half_width == pytest.approx(4.303 / 3 ** 0.5)
    assert mean_ci95([5.0]).half_width is None


# -- on the simulator ----------------------------------------------------------------------------
def _capacity(raw: dict, scheduler_index: int, seed: int = 0, search: CapacitySearch = RATE):
    return find_capacity(raw, SLOTS.parent, scheduler_index, seed, TTFT_SLO, search)


def test_continuous_serves_a_higher_rate_than_static_and_the_gap_shrinks_with_equal_lengths():
    varied, equal = slots_raw(), slots_raw(EQUAL_OUTPUTS)
    static_varied, continuous_varied = _capacity(varied, 0), _capacity(varied, 1)
    static_equal, continuous_equal = _capacity(equal, 0), _capacity(equal, 1)
    assert (static_varied.scheduler, continuous_varied.scheduler) == ("static", "orca")
    for result in (static_varied, continuous_varied, static_equal, continuous_equal):
        assert result.bounded and result.capacity > 0
        met = [p.value for p in result.probes if p.met]
        assert result.capacity == max(met)
        assert all(p.summary["p99_ttft_ms"] <= 3000.0 for p in result.probes if p.met)
    varied_gain = continuous_varied.capacity / static_varied.capacity
    equal_gain = continuous_equal.capacity / static_equal.capacity
    assert varied_gain > 1.3             # a static batch idles slots until its longest member ends
    assert 1.0 <= equal_gain < varied_gain


def test_capacity_is_reproducible_for_a_seed():
    raw = slots_raw(num_requests=120)
    first, second = _capacity(raw, 1, seed=3), _capacity(raw, 1, seed=3)
    assert first.capacity == second.capacity
    assert [(p.value, p.met) for p in first.probes] == [(p.value, p.met) for p in second.probes]


def test_the_interval_over_seeds_shrinks_as_seeds_are_added():
    raw = slots_raw(num_requests=120)
    search = CapacitySearch(rel_tol=0.1)
    results = [find_capacity(raw, SLOTS.parent, 1, seed, TTFT_SLO, search) for seed in range(6)]
    two = summarize_capacity("slots", results[:2])[0].estimate
    six = summarize_capacity("slots", results)[0].estimate
    assert (two.n, six.n) == (2, 6)
    assert six.half_width < two.half_width
