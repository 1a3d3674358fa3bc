"""The step log as columns (simulator/results/step_table.py)."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.results.columns import STEP_COLUMNS, STEP_SERIES
from simulator.results.step_table import StepTable
from simulator.results.timeseries import EngineSeries, time_weighted_mean

ROWS = [(0.0, 0.125, 2, 2, 0, 40, 40, 2, 3, 0.25, 0),
        (0.125, 0.1875, 3, 1, 2, 22, 20, 3, 2, 0.5, 1),
        (0.1875, 0.25, 2, 0, 2, 2, 0, 2, 2, 0.375, 0)]


class Sink:
    def __init__(self):
        self.chunks = []

    def write(self, columns):
        self.chunks.append({k: v.copy() for k, v in columns.items()})


def test_columns_round_trip_values_and_dtypes():
    table = StepTable()
    for row in ROWS:
        table.append(*row)
    cols = table.to_columns()
    assert tuple(cols) == STEP_COLUMNS
    assert [tuple(cols[name][i].item() for name in STEP_COLUMNS) for i in range(3)] == ROWS
    assert cols["start_s"].dtype == np.float64 and cols["num_seqs"].dtype == np.int64


def test_decode_runs_and_appends_keep_their_order_across_flushes():
    table = StepTable(chunk_rows=4)
    table.append(*ROWS[0])
    table.extend_decode_steps(0.125, [0.2, 0.3, 0.4], [2, 2, 1], [2, 2, 1], [3, 3, 3], [0.3, 0.3, 0.2])
    table.append(0.4, 0.5, 1, 1, 0, 9, 9, 1, 0, 0.1, 0)
    table.extend_decode_steps(0.5, [0.6], [1], [1], [0], [0.1])
    cols = table.to_columns()
    assert cols["start_s"].tolist() == [0.0, 0.125, 0.2, 0.3, 0.4, 0.5]
    assert cols["end_s"].tolist() == [0.125, 0.2, 0.3, 0.4, 0.5, 0.6]
    assert cols["num_decode_seqs"].tolist() == [0, 2, 2, 1, 0, 1]
    assert cols["num_prefill_tokens"].tolist() == [40, 0, 0, 0, 9, 0]
    assert len(table) == 6


def test_a_table_with_a_sink_hands_on_every_row_once_and_keeps_the_series():
    sink = Sink()
    table = StepTable(sink=sink, chunk_rows=2)
    for row in ROWS:
        table.append(*row)
    table.flush()
    assert [len(c["end_s"]) for c in sink.chunks] == [2, 1]
    written = {name: np.concatenate([c[name] for c in sink.chunks]).tolist() for name in STEP_COLUMNS}
    assert [tuple(written[name][i] for name in STEP_COLUMNS) for i in range(3)] == ROWS
    assert tuple(table.to_columns()) == STEP_SERIES   # memory: the series, not every column


def test_empty_table_has_empty_columns():
    cols = StepTable().to_columns()
    assert all(len(cols[name]) == 0 for name in STEP_COLUMNS)


def test_decode_steps_with_lists_of_unequal_length_are_refused():
    with pytest.raises(ValueError, match="len"):
        StepTable().extend_decode_steps(0.0, [1.0, 2.0], [1], [1, 1], [0, 0], [0.1, 0.1])


def test_from_columns_names_missing_columns():
    with pytest.raises(ValueError, match="missing"):
        StepTable.from_columns({"start_s": [0.0]})


def test_engine_series_is_stamped_at_step_ends():
    table = StepTable()
    for row in ROWS:
        table.append(*row)
    series = EngineSeries.from_columns(table.to_columns())
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
        EngineSeries.from_columns(StepTable().to_columns()).mean("num_seqs")


def test_a_long_run_folds_windows_its_figures_agree_and_its_memory_stays_bounded(monkeypatch):
    import simulator.results.step_table as step_table
    rng = np.random.default_rng(3)
    n = 5000
    ends = np.cumsum(rng.uniform(0.01, 0.02, n))
    rows = [(float(e - 0.005), float(e), 3, 0, 3, 3, 0, int(r), int(w), float(k), int(p))
            for e, r, w, k, p in zip(ends, rng.integers(1, 90, n), rng.integers(0, 9, n),
                                     rng.uniform(0, 1, n), rng.integers(0, 2, n))]
    whole = StepTable(sink=Sink())
    for row in rows:
        whole.append(*row)
    monkeypatch.setattr(step_table, "WINDOW_ROWS", 512)
    monkeypatch.setattr(step_table, "WINDOW_POINTS", 32)
    folded = StepTable(sink=Sink(), chunk_rows=256)
    for row in rows:
        folded.append(*row)
    a, b = whole.stats(), folded.stats()
    assert a.keys() == b.keys() and a["num_steps"] == b["num_steps"] == n
    for key in a:
        assert b[key] == pytest.approx(a[key], rel=1e-12)
    kept = folded.to_columns()
    assert len(kept["end_s"]) < n / 2                              # plot rows, not every step
    assert np.all(np.diff(kept["end_s"]) > 0)                      # in time order
    assert kept["num_running"].max() == max(r[7] for r in rows)    # the peaks stay


def test_folded_windows_are_thinned_again_so_plot_rows_stay_bounded(monkeypatch):
    # Issue 22: time series at a bounded resolution whatever the run's length.
    import simulator.results.step_table as step_table
    monkeypatch.setattr(step_table, "WINDOW_ROWS", 256)
    monkeypatch.setattr(step_table, "WINDOW_POINTS", 8)
    monkeypatch.setattr(step_table, "MAX_PLOT_ROWS", 64)
    rng = np.random.default_rng(5)
    table = StepTable(sink=Sink(), chunk_rows=128)
    peak_running, kept_sizes = 0, []
    for window in range(40):
        for i in range(256):
            end_s = window * 256 + i + 1.0
            running = int(rng.integers(1, 1000))
            peak_running = max(peak_running, running)
            table.append(end_s - 0.5, end_s, 1, 0, 1, 1, 0, running, 0, 0.5, 0)
        kept_sizes.append(sum(len(d["end_s"]) for d in table._decimated))
    assert max(kept_sizes) <= 64                      # thinned whenever past MAX_PLOT_ROWS
    assert kept_sizes[-1] > 0
    kept = table.to_columns()
    assert np.all(np.diff(kept["end_s"]) > 0)
    assert kept["num_running"].max() == peak_running   # the run's peak survives the thinning
    assert kept["end_s"][0] == 1.0                    # and so does its first step
