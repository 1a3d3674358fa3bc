"""FinishedPrefix: a running simulation's requests read into arrays as they finish, in id order."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.metrics.finished_prefix import FinishedPrefix
from simulator.metrics.request_arrays import read_request_arrays
from simulator.core.request import Request, RequestStatus


def unfinished(request_id: int) -> Request:
    return Request(request_id, 0.25 * request_id, 8, 2)


def finish(request: Request, end_s: float) -> None:
    request.scheduled_s = request.arrival_s
    request.record_token(end_s - 0.5)
    request.record_token(end_s)
    request.status, request.finish_s = RequestStatus.FINISHED, end_s


def test_advance_reads_up_to_the_first_unfinished_request():
    requests = [unfinished(i) for i in range(5)]
    prefix = FinishedPrefix(requests)
    for i in (0, 1, 3):   # request 3 finishes before request 2
        finish(requests[i], 10.0 + i)
    assert prefix.advance() == (0, 2)
    assert prefix.advance() == (2, 2)   # still waiting for request 2
    finish(requests[2], 20.0)
    assert prefix.advance() == (2, 4)
    finish(requests[4], 30.0)
    assert prefix.advance() == (4, 5) and prefix.advance() == (5, 5)


def test_arrays_read_in_pieces_are_those_read_at_once():
    requests = [unfinished(i) for i in range(6)]
    prefix = FinishedPrefix(requests)
    finish(requests[0], 3.0)
    prefix.advance()
    for i, r in enumerate(requests[1:], 1):
        finish(r, 3.0 + 1 / i)
    arrays = prefix.read_rest()
    at_once = read_request_arrays(requests)
    assert arrays.keys() == at_once.keys()
    for name, values in at_once.items():
        assert arrays[name].dtype == values.dtype and arrays[name].tobytes() == values.tobytes()
    assert prefix.piece(2, 4)["finish_s"].tolist() == [3.5, 3.0 + 1 / 3]


def test_a_piece_not_exact_as_arrays_leaves_no_arrays():
    """An int time (SimPy's clock starts at the int 0) would be written "0", not "0.0"."""
    requests = [unfinished(i) for i in range(3)]
    for r in requests:
        finish(r, 5.0)
    requests[1].arrival_s = 0
    prefix = FinishedPrefix(requests)
    assert prefix.advance() == (0, 3)
    assert prefix.arrays is None and prefix.piece(0, 1) is None and prefix.read_rest() is None


def test_requests_out_of_id_order_are_refused():
    requests = [unfinished(i) for i in (0, 2, 1)]
    for r in requests:
        finish(r, 5.0)
    with pytest.raises(ValueError, match="ids must increase along the list"):
        FinishedPrefix(requests).advance()


def test_a_run_without_requests_reads_nothing():
    prefix = FinishedPrefix([])
    assert prefix.advance() == (0, 0)
    assert {name: len(v) for name, v in prefix.read_rest().items()} == \
        {name: 0 for name in prefix.arrays}
    assert all(isinstance(v, np.ndarray) for v in prefix.arrays.values())
