"""The pre-run memory check of a workload's request columns (issue 22: memory without bound)."""
import pytest

from simulator.results import footprint
from simulator.results.columns import REQUEST_FIELDS


def test_bytes_per_request_are_the_columns_a_request_fills():
    # 8 bytes for each result-table field and each workload field (arrival, prompt, output,
    # priority): a lower bound, since Python objects of requests in flight come on top.
    assert footprint.BYTES_PER_REQUEST == 8 * (len(REQUEST_FIELDS) + 4) == 144


def test_a_workload_beyond_available_memory_is_refused_by_field(monkeypatch):
    monkeypatch.setattr(footprint, "available_bytes", lambda: 1_000_000)
    footprint.check_requests_fit_memory(6944)        # 999,936 bytes: fits
    footprint.check_requests_fit_memory(None)        # by duration: drawn first, not checked here
    with pytest.raises(ValueError) as error:
        footprint.check_requests_fit_memory(6945)    # 1,000,080 bytes
    assert str(error.value) == ("workload.num_requests: 6945 needs at least 0.001 GB for its request "
                                "columns (144 bytes each); this machine has 0.001 GB available")


def test_unknown_available_memory_checks_nothing(monkeypatch):
    monkeypatch.setattr(footprint, "available_bytes", lambda: None)
    footprint.check_requests_fit_memory(2 ** 62)


def test_available_memory_is_read_on_this_machine():
    have = footprint.available_bytes()
    assert have is None or have > 0
