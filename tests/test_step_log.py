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


def test_a_log_of_its_own_chunk_size_hands_on_chunks_of_that_many_rows():
    log, handed = StepLog(chunk_rows=3), []
    log.stream_to(handed.append)
    for i in range(5):
        log.append(float(i), float(i + 1), i, 0, i, i, 0, i, 0, i / 10, 0)
    log.extend_decode_steps(5.0, [6.0, 7.0, 8.0], [5, 6, 7], [5, 6, 7], [0, 0, 0], [0.5] * 3)
    assert [chunk["num_seqs"].tolist() for chunk in handed] == [[0, 1, 2], [3, 4, 5, 6, 7]]
    assert StepLog().chunk_rows == 8192


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


def test_a_receiver_of_a_chunk_reads_the_log_with_each_row_once(monkeypatch):
    """A chunk is handed on once the pending rows are emptied: a receiver that reads (so
    flushes) the log, as a helper forked at the first chunk does, sees every row once."""
    monkeypatch.setattr(step_log_module, "_CHUNK_ROWS", 4)
    log, seen = StepLog(), []
    log.stream_to(lambda chunk: seen.append(log.to_columns()["num_seqs"].tolist()))
    for i in range(4):
        log.append(float(i), float(i + 1), i, 0, i, i, 0, i, 0, i / 10, 0)
    log.extend_decode_steps(4.0, [5.0, 6.0, 7.0, 8.0], [4, 5, 6, 7], [4] * 4, [0] * 4, [0.5] * 4)
    assert seen == [[0, 1, 2, 3], [0, 1, 2, 3, 4, 5, 6, 7]]
    assert len(log) == 8


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


def _random_calls(rng: np.random.Generator, num_calls: int) -> list[tuple[str, tuple]]:
    """A mix like the engine's: mostly decode runs of a few rows, single appended rows between
    them (sometimes none, so runs come back to back), and an empty run now and then."""
    calls, t = [], 0.0
    for _ in range(num_calls):
        if rng.random() < 0.4:
            n = int(rng.integers(0, 9))
            row = (t, t + 0.25, n + 1, 1, n, 300 + n, 300, n + 1, int(rng.integers(0, 5)),
                   float(rng.random()), int(rng.integers(0, 2)))
            calls.append(("append", row))
            t += 0.25
        else:
            k = int(rng.integers(0, 7))
            ends = [t + 0.1 * (j + 1) for j in range(k)]
            rows = [int(x) for x in rng.integers(1, 64, k)]
            calls.append(("decode", (t, ends, rows, [r + 1 for r in rows],
                                     [int(x) for x in rng.integers(0, 9, k)],
                                     [float(x) for x in rng.random(k)])))
            t = ends[-1] if k else t
    return calls


def _as_appends(start_s, ends, rows, running, waiting, kv):
    starts = [start_s, *ends[:-1]]
    return [(starts[j], ends[j], rows[j], 0, rows[j], rows[j], 0, running[j], waiting[j], kv[j], 0)
            for j in range(len(ends))]


@pytest.mark.parametrize("seed", range(12))
def test_random_mixes_equal_row_by_row_appends_chunk_for_chunk(monkeypatch, seed):
    monkeypatch.setattr(step_log_module, "_CHUNK_ROWS", 7)
    logged, expected, handed = StepLog(), StepLog(), []
    logged.stream_to(handed.append)
    sizes, pending = [], 0   # a chunk is handed over as soon as 7 rows or more are pending
    for kind, args in _random_calls(np.random.default_rng(seed), 60):
        if kind == "append":
            logged.append(*args)
            rows = [args]
        else:
            logged.extend_decode_steps(*args)
            rows = _as_appends(*args)
        for row in rows:
            expected.append(*row)
        pending += len(rows)
        if pending >= 7:
            sizes, pending = sizes + [pending], 0
    logged.flush()
    sizes += [pending] if pending else []
    assert [len(chunk["start_s"]) for chunk in handed] == sizes
    got, want = logged.to_columns(), expected.to_columns()
    for name in STEP_COLUMNS:
        assert got[name].dtype == want[name].dtype, name
        assert got[name].tobytes() == want[name].tobytes(), name
        assert np.concatenate([c[name] for c in handed]).tobytes() == got[name].tobytes(), name


def test_values_keep_their_exact_bits_in_both_kinds_of_row():
    floats = [-0.0, float("nan"), 5e-324, 0.1 + 0.2, 1e308]
    counts = [2**62, -1, np.int64(7), 0, 3]   # a numpy integer is an integer too
    log = StepLog()
    for i in range(2):
        log.append(floats[i], floats[i + 1], counts[i], counts[i + 1], 0, counts[i + 2], 0,
                   counts[i], counts[i + 1], floats[i + 2], counts[i + 3])
    log.extend_decode_steps(floats[0], floats, counts, counts, counts, floats)
    cols = log.to_columns()
    as_float = np.array(floats, np.float64).tobytes()
    assert cols["end_s"][2:].tobytes() == cols["kv_usage"][2:].tobytes() == as_float
    assert cols["start_s"][2:].tobytes() == np.array([-0.0, *floats[:-1]]).tobytes()
    assert cols["num_seqs"][2:].tolist() == cols["num_waiting"][2:].tolist() == \
        [2**62, -1, 7, 0, 3]
    assert cols["start_s"][:2].tobytes() == np.array(floats[:2]).tobytes()
    assert cols["kv_usage"][:2].tobytes() == np.array(floats[2:4]).tobytes()
    assert cols["num_preemptions"][:2].tolist() == [0, 3]


def test_a_value_of_the_wrong_kind_is_refused_naming_its_field():
    with pytest.raises(ValueError, match=r"^append num_tokens: 2\.5 must be an integer$"):
        StepLog().append(0.0, 1.0, 1, 0, 1, 2.5, 0, 1, 0, 0.5, 0)
    with pytest.raises(ValueError, match=r"^append kv_usage: 'full' must be a number$"):
        StepLog().append(0.0, 1.0, 1, 0, 1, 1, 0, 1, 0, "full", 0)
    log = StepLog()
    log.extend_decode_steps(0.0, [0.5, 1.0], [2, 2], [2, 2.0], [0, 0], [0.1, 0.1])
    with pytest.raises(ValueError, match=r"^extend_decode_steps num_running: 2\.0 must be an "
                                         r"integer$"):
        log.flush()
    with pytest.raises(ValueError, match=r"^extend_decode_steps start_s: None must be a number$"):
        StepLog().extend_decode_steps(None, [0.5], [2], [2], [0], [0.1])
