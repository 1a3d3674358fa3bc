"""StepLog (one row per step, design section 3 step 4) and the engine time series built on it."""
from __future__ import annotations

from itertools import accumulate, repeat

import numpy as np
import pytest

from simulator.metrics import STEP_COLUMNS, EngineSeries, StepLog, time_weighted_mean
from simulator.metrics import step_log as step_log_module

ROWS = [
    # start, end, seqs, prefill/decode seqs, tokens, prefill tokens, running, waiting, kv, preempt
    (0.0, 0.125, 2, 2, 0, 512, 512, 2, 3, 0.25, 0),
    (0.125, 0.1875, 3, 1, 2, 258, 256, 3, 2, 0.5, 0),
    (0.1875, 0.25, 2, 0, 2, 2, 0, 2, 2, 0.375, 1),
]


def test_columns_round_trip_values_and_dtypes():
    log = StepLog()
    for row in ROWS:
        log.append(*row)
    cols = log.to_columns()
    assert tuple(cols) == STEP_COLUMNS and len(log) == log.num_steps == 3
    for i, name in enumerate(STEP_COLUMNS):
        assert cols[name].tolist() == [row[i] for row in ROWS], name
    assert cols["start_s"].dtype == np.float64 and cols["kv_usage"].dtype == np.float64
    assert cols["num_tokens"].dtype == np.int64 and cols["num_running"].dtype == np.int64
    rebuilt = StepLog.from_columns(cols).to_columns()
    assert all(np.array_equal(rebuilt[name], cols[name]) for name in STEP_COLUMNS)


def test_rows_survive_chunk_flushes_in_order(monkeypatch):
    monkeypatch.setattr(step_log_module, "_CHUNK_ROWS", 4)
    log = StepLog()
    for i in range(10):
        log.append(float(i), float(i + 1), i, 0, i, i, 0, i, 0, i / 10, 0)
    assert log.to_columns()["num_seqs"].tolist() == list(range(10))
    log.append(10.0, 11.0, 10, 0, 10, 10, 0, 10, 0, 1.0, 0)   # appending after a read works
    assert log.to_columns()["end_s"].tolist() == [float(i + 1) for i in range(11)]


def test_streamed_chunks_after_the_stored_ones_are_the_whole_log(monkeypatch):
    monkeypatch.setattr(step_log_module, "_CHUNK_ROWS", 4)
    log, handed = StepLog(), []
    for i in range(3):   # pending when streaming starts: stored, not handed over
        log.append(float(i), float(i + 1), i, 0, i, i, 0, i, 0, i / 10, 0)
    log.stream_to(handed.append)
    stored = log.to_columns()["num_seqs"].tolist()
    for i in range(3, 9):
        log.append(float(i), float(i + 1), i, 0, i, i, 0, i, 0, i / 10, 0)
    log.extend_decode_steps(9.0, [10.0, 11.0], [9, 10], [9, 10], [0, 0], [0.9, 1.0])
    log.append_many(2, 11.0, 1.0, 11, 0, 11, 11, 0, 11, 0, 1.0)
    log.flush()
    log.stream_to(None)
    log.append(13.0, 14.0, 13, 0, 13, 13, 0, 13, 0, 1.0, 0)   # after stopping: kept, not handed
    assert stored == [0, 1, 2]
    streamed = [*range(3, 11), 11, 11]   # appends, a decode run, a fast-forward of 2 steps
    assert [n for chunk in handed for n in chunk["num_seqs"].tolist()] == streamed
    assert log.to_columns()["num_seqs"].tolist() == [*stored, *streamed, 13]
    assert all(tuple(chunk) == STEP_COLUMNS for chunk in handed)


def test_empty_log_has_empty_columns():
    cols = StepLog().to_columns()
    assert tuple(cols) == STEP_COLUMNS and all(len(c) == 0 for c in cols.values())


def test_append_many_equals_k_appends():
    # An awkward step time so that t + dt rounding matters: rows must still match bit for bit.
    k, start_s, dt = 7, 3.1, 0.1
    kv = [0.5, 0.5, 0.5, 0.5625, 0.5625, 0.5625, 0.625]   # decodes crossing block boundaries
    one_by_one, at_once = StepLog(), StepLog()
    one_by_one.append(0.0, 3.1, 4, 4, 0, 400, 400, 4, 1, 0.5, 0)
    at_once.append(0.0, 3.1, 4, 4, 0, 400, 400, 4, 1, 0.5, 0)
    t = start_s
    for i in range(k):
        one_by_one.append(t, t + dt, 4, 0, 4, 4, 0, 4, 1, kv[i], 0)
        t = t + dt
    end_s = at_once.append_many(k, start_s, dt, 4, 0, 4, 4, 0, 4, 1, kv, 0)
    assert end_s == t   # the engine can take its clock from here
    a, b = one_by_one.to_columns(), at_once.to_columns()
    for name in STEP_COLUMNS:
        assert np.array_equal(a[name], b[name]), name
    assert a["start_s"].tobytes() == b["start_s"].tobytes()


def test_append_many_accumulates_like_successive_timeouts():
    log = StepLog()
    end_s = log.append_many(1000, 0.0, 0.1, 1, 0, 1, 1, 0, 1, 0, 0.25)
    expected = list(accumulate(repeat(0.1, 1000), initial=0.0))
    assert end_s == expected[-1] != 1000 * 0.1   # sequential sums differ from start + k*dt
    assert log.to_columns()["end_s"].tolist() == expected[1:]
    assert np.all(log.to_columns()["kv_usage"] == 0.25)


@pytest.mark.parametrize("k", [0, -1, 2.0])
def test_append_many_rejects_bad_k(k):
    with pytest.raises(ValueError, match="k"):
        StepLog().append_many(k, 0.0, 0.1, 1, 0, 1, 1, 0, 1, 0, 0.25)


def test_append_many_rejects_wrong_length_sequence():
    with pytest.raises(ValueError, match="kv_usage"):
        StepLog().append_many(3, 0.0, 0.1, 1, 0, 1, 1, 0, 1, 0, [0.1, 0.2])


def test_from_columns_names_missing_columns():
    with pytest.raises(ValueError, match="kv_usage"):
        StepLog.from_columns({name: [] for name in STEP_COLUMNS if name != "kv_usage"})


def test_engine_series_is_stamped_at_step_ends():
    log = StepLog()
    for row in ROWS:
        log.append(*row)
    series = EngineSeries.from_step_log(log)
    assert series.time_s.tolist() == [0.125, 0.1875, 0.25]
    assert series.num_running.tolist() == [2, 3, 2] and series.num_waiting.tolist() == [3, 2, 2]
    assert series.step_time_s.tolist() == [0.125, 0.0625, 0.0625]
    # KV: (0.25 * 0.125 + 0.5 * 0.0625 + 0.375 * 0.0625) / 0.25
    assert series.mean("kv_usage") == 0.34375
    assert series.mean("num_running") == 2.25


def test_time_weighted_mean_over_a_window_counts_idle_time_as_zero():
    # Little's law needs the mean over the whole run: 2 s busy with 3 requests, 2 s idle.
    assert time_weighted_mean([1.0, 1.0], [3, 3]) == 3.0
    assert time_weighted_mean([1.0, 1.0], [3, 3], over_s=4.0) == 1.5
    assert time_weighted_mean([], []) == 0.0
    with pytest.raises(ValueError, match="over_s"):
        time_weighted_mean([1.0], [1.0], over_s=-1.0)
    with pytest.raises(ValueError, match="num_seqs"):
        EngineSeries.from_step_log(StepLog()).mean("num_seqs")


def test_decode_runs_and_appends_keep_their_order_across_flushes(monkeypatch):
    monkeypatch.setattr(step_log_module, "_CHUNK_ROWS", 4)
    logged, expected = StepLog(), StepLog()
    t = 0.0
    for i in range(6):
        row = (t, t + 0.5, 3, 1, 2, 130, 128, 3, i, 0.25, i % 2)
        logged.append(*row)
        expected.append(*row)
        t += 0.5
        ends = [t + 0.125 * (j + 1) for j in range(i)]   # runs of 0..5 decode steps
        rows, running = [3 - j % 2 for j in range(i)], [3 + j for j in range(i)]
        waiting, kv = [i] * i, [0.25 + j / 64 for j in range(i)]
        logged.extend_decode_steps(t, ends, rows, running, waiting, kv)
        for j in range(i):
            expected.append(t if j == 0 else ends[j - 1], ends[j], rows[j], 0, rows[j], rows[j], 0,
                            running[j], waiting[j], kv[j], 0)
        t = ends[-1] if ends else t
    assert len(logged) == len(expected) == 6 + sum(range(6))
    got, want = logged.to_columns(), expected.to_columns()
    for name in STEP_COLUMNS:
        assert got[name].dtype == want[name].dtype and got[name].tolist() == want[name].tolist(), name


def test_decode_steps_with_lists_of_unequal_length_are_refused():
    with pytest.raises(ValueError, match="len\\(end_s\\)=2"):
        StepLog().extend_decode_steps(0.0, [0.5, 1.0], [2, 2], [2, 2], [0], [0.1, 0.1])


def test_columns_are_read_only_and_owned_by_the_log():
    log = StepLog()
    for row in ROWS:
        log.append(*row)
    cols = log.to_columns()
    with pytest.raises(ValueError, match="read-only"):
        cols["end_s"][0] = 9.0
    source = {name: np.array(cols[name]) for name in STEP_COLUMNS}
    rebuilt = StepLog.from_columns(source)
    source["end_s"][0] = 9.0                      # the caller's array changes, the log does not
    assert rebuilt.to_columns()["end_s"].tolist() == [0.125, 0.1875, 0.25]
