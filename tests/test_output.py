"""write_results: three result files, written atomically and byte-stable (design section 8)."""
from __future__ import annotations

import csv
import io
import json
import math
from operator import attrgetter
from pathlib import Path

import numpy as np
import pytest

from simulator import output, parallel_write, streaming_write
from simulator.metrics import STEP_COLUMNS, StepLog, summarize
from simulator.output import REQUEST_COLUMNS, summary_json, write_results
from simulator.core.request import Request, RequestStatus


def make_run():
    a = Request(1, 0.1, 10, 3, itl_gaps_s=[])
    for t in (0.3, 0.4, 0.7000000000000001):
        a.record_token(t)
    a.status, a.finish_s, a.scheduled_s = RequestStatus.FINISHED, 0.7000000000000001, 0.1
    a.num_preemptions = 1
    b = Request(0, 0.0, 20, 1, itl_gaps_s=[])
    b.record_token(0.3)
    b.status, b.finish_s, b.scheduled_s, b.num_cached_tokens = RequestStatus.FINISHED, 0.3, 0.0, 16
    c = Request(2, 0.5, 5, 4)                      # never scheduled: still a row, blank times
    log = StepLog()
    log.append(0.0, 0.3, 2, 2, 0, 30, 30, 2, 1, 0.1, 0)
    log.append_many(2, 0.3, 0.2, 1, 0, 1, 1, 0, 1, 1, [0.2, 0.30000000000000004], 0)
    requests = [a, b, c]
    return requests, log, summarize(requests, duration_s=0.7000000000000001, step_log=log)


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_writes_the_three_files_with_documented_columns(tmp_path):
    requests, log, summary = make_run()
    out = write_results(tmp_path / "run", requests, log, summary)
    assert sorted(p.name for p in out.iterdir()) == ["requests.csv", "steps.csv", "summary.json"]
    req_rows = read_csv(out / "requests.csv")
    assert tuple(req_rows[0]) == REQUEST_COLUMNS
    assert [row[0] for row in req_rows[1:]] == ["0", "1", "2"]          # by request id
    assert req_rows[1] == ["0", "0.0", "0.0", "0.3", "0.3", "20", "1", "0", "16",
                           "300.0", "", "300.0", "0.0"]                 # 1 token: no TPOT
    row_a = dict(zip(REQUEST_COLUMNS, req_rows[2]))
    assert float(row_a["ttft_ms"]) == (0.3 - 0.1) * 1000
    assert float(row_a["tpot_ms"]) == ((0.7000000000000001 - 0.1) - (0.3 - 0.1)) / 2 * 1000
    assert req_rows[3][3:5] == ["", ""] and req_rows[3][9:12] == ["", "", ""]
    step_rows = read_csv(out / "steps.csv")
    assert tuple(step_rows[0]) == STEP_COLUMNS and len(step_rows) == 1 + 3
    assert step_rows[3] == ["0.5", "0.7", "1", "0", "1", "1", "0", "1", "1",
                            "0.30000000000000004", "0"]
    assert json.loads((out / "summary.json").read_text()) == summary


def test_csv_floats_round_trip_exactly(tmp_path):
    requests, log, summary = make_run()
    out = write_results(tmp_path / "run", requests, log, summary)
    cols = log.to_columns()
    rows = read_csv(out / "steps.csv")[1:]
    assert [float(r[1]) for r in rows] == cols["end_s"].tolist()
    assert [float(r[9]) for r in rows] == cols["kv_usage"].tolist()


def test_same_inputs_give_byte_identical_files(tmp_path):
    first = write_results(tmp_path / "a", *make_run())
    second = write_results(tmp_path / "b", *make_run())
    for name in ("requests.csv", "steps.csv", "summary.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_summary_json_is_sorted_and_strict():
    text = summary_json({"b": float("inf"), "a": 1.5, "c": None})
    assert text == '{\n  "a": 1.5,\n  "b": "inf",\n  "c": null\n}\n'


def test_replaces_an_older_result_folder_whole(tmp_path):
    target = tmp_path / "run"
    target.mkdir()
    (target / "stale.png").write_text("old plot")
    write_results(target, *make_run())
    assert sorted(p.name for p in target.iterdir()) == ["requests.csv", "steps.csv", "summary.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]   # no staging or old folder left


@pytest.mark.parametrize("victim", ["_write_requests_csv", "_write_steps_csv", "summary_json"])
def test_failure_while_writing_leaves_no_folder_and_no_temp_files(tmp_path, monkeypatch, victim):
    def explode(*args, **kwargs):
        raise OSError("disk full")
    monkeypatch.setattr(output, victim, explode)
    with pytest.raises(OSError, match="disk full"):
        write_results(tmp_path / "results" / "run", *make_run())
    assert list((tmp_path / "results").iterdir()) == []


def test_failure_keeps_the_older_result_folder_intact(tmp_path, monkeypatch):
    target = write_results(tmp_path / "run", *make_run())
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    monkeypatch.setattr(output, "_write_steps_csv", lambda f, log: f.write(1 / 0))
    with pytest.raises(ZeroDivisionError):
        write_results(target, *make_run())
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_result_dir_that_is_a_file_is_rejected(tmp_path):
    (tmp_path / "run").write_text("not a folder")
    with pytest.raises(ValueError, match="result_dir"):
        write_results(tmp_path / "run", *make_run())


def test_summary_of_an_empty_run_writes(tmp_path):
    out = write_results(tmp_path / "empty", [], StepLog(), summarize([]))
    assert read_csv(out / "requests.csv") == [list(REQUEST_COLUMNS)]
    assert read_csv(out / "steps.csv") == [list(STEP_COLUMNS)]
    assert not math.isnan(json.loads((out / "summary.json").read_text())["mean_ttft_ms"])


def csv_writer_text(header, rows) -> str:
    """What the standard csv module writes: the format csv_text must reproduce byte for byte."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([["" if v is None else repr(float(v)) if isinstance(v, (float, np.floating))
                       else int(v) for v in row] for row in rows])
    return buf.getvalue()


def test_csv_text_matches_the_csv_module_cell_for_cell():
    rows = [[0, 0.0, None, -0.0, np.float64(0.1), np.int64(7), 1e22, 5e-324, 2 ** 62],
            [1, 0.5, 3, 0.1 + 0.2, np.float64(-1.5), np.int64(-3), 1e-7, float("inf"), -1],
            [2, 0, 2.5, 1.0, np.float64(1e16), np.int64(0), 123456789.125, 1.7976931348623157e308, 0]]
    header = [f"c{i}" for i in range(len(rows[0]))]
    columns = [list(c) for c in zip(*rows)]
    assert output.csv_text(header, columns) == csv_writer_text(header, rows)
    # int 0 and float 0.0 in one column keep their own text, as do -0.0 and 0.0
    assert output.csv_text(["t"], [[0, 0.0, -0.0]]) == "t\n0\n0.0\n-0.0\n"


def test_csv_text_of_numpy_columns_matches_the_csv_module():
    times = np.array([0.0, 0.1, 0.30000000000000004, 0.30000000000000004, -0.0])
    counts = np.array([3, 3, 0, -2, 3], dtype=np.int64)
    rows = list(zip(times.tolist(), counts.tolist(), times[::-1].tolist()))
    assert output.csv_text(["a", "b", "c"], [times, counts, times[::-1]]) == \
        csv_writer_text(["a", "b", "c"], rows)


def test_csv_text_refuses_a_text_cell():
    with pytest.raises(TypeError, match="str cell"):
        output.csv_text(["a"], [[1, "x"]])


def test_result_files_of_a_real_run_are_what_the_csv_module_writes(tmp_path):
    """A run whose clock starts at SimPy's int 0 (ints and floats in one time column)."""
    from simulator.runner import prepare, simulate
    from simulator.scenario import load_scenario
    prepared = prepare(load_scenario(Path(__file__).parents[1] / "scenarios" / "toy_unit.yaml"))
    run = simulate(prepared, prepared.runs[0])
    out = write_results(tmp_path / "run", run.result.requests, run.result.step_log, run.summary)
    requests_text = (out / "requests.csv").read_text()
    assert requests_text == csv_writer_text(REQUEST_COLUMNS, output.request_rows(run.result.requests))
    assert "\n0,0,0,1.0," in requests_text   # arrival and scheduling at the int 0: written as 0
    cols = run.result.step_log.to_columns()
    step_rows = zip(*(cols[name].tolist() for name in STEP_COLUMNS))
    assert (out / "steps.csv").read_text() == csv_writer_text(STEP_COLUMNS, step_rows)


def test_csv_in_pieces_is_the_same_text():
    times = [0, 0.5, None, 1.0, 1.25, -0.0, 2]
    counts = np.arange(7, dtype=np.int64)
    whole = output.csv_text(["t", "n"], [times, counts])
    assert whole == csv_writer_text(["t", "n"], zip(times, counts.tolist()))
    for rows in (1, 2, 3, 7, 8):
        assert "".join(output.csv_chunks(["t", "n"], [times, counts], chunk_rows=rows)) == whole


def standard_run(overrides=()):
    """300 Poisson requests on bench/standard.yaml (vllm_v1): float times throughout."""
    from simulator.runner import prepare, simulate
    from simulator.scenario import load_scenario
    scenario = load_scenario(Path(__file__).parents[1] / "bench" / "standard.yaml",
                             ["workload.num_requests=300", *overrides])
    prepared = prepare(scenario, ["vllm_v1"])
    return simulate(prepared, prepared.runs[0])


def test_requests_read_into_arrays_give_the_cell_by_cell_text():
    """All-float times go through numpy arrays (latencies in numpy, TPOT blanks masked): the
    bytes must be those of reading request by request with latencies_s, as the csv module
    writes them, whatever order the requests come in."""
    requests = standard_run().result.requests
    one_token = Request(len(requests), 1.5, 8, 1)             # no TPOT: a blank cell
    one_token.record_token(2.25)
    one_token.status, one_token.finish_s, one_token.scheduled_s = RequestStatus.FINISHED, 2.25, 1.5
    shuffled = [one_token, *requests[::-1]]
    columns = output.request_columns(shuffled)
    assert isinstance(columns[REQUEST_COLUMNS.index("arrival_s")], np.ndarray)   # the array path
    by_cell = output._request_columns_by_cell(sorted(shuffled, key=attrgetter("request_id")))
    text = output.csv_text(REQUEST_COLUMNS, columns)
    assert text == output.csv_text(REQUEST_COLUMNS, by_cell)
    assert text == csv_writer_text(REQUEST_COLUMNS, zip(*by_cell))
    assert ",," in text.splitlines()[-1]                        # the one-token row's TPOT


def test_blankable_column_is_the_column_with_nones():
    values = np.array([0.5, 7.0, -0.0, 1e-7])
    present = np.array([True, False, True, True])
    with_nones = [0.5, None, -0.0, 1e-7]
    blankable = output.BlankableColumn(values, present)
    assert blankable.tolist() == with_nones
    for rows in (1, 3, 4):
        assert "".join(output.csv_chunks(["x", "n"], [blankable, np.arange(4)], chunk_rows=rows)) \
            == csv_writer_text(["x", "n"], zip(with_nones, range(4)))


@pytest.fixture(params=["in this process", "with a forked helper"])
def steps_writer(request, monkeypatch):
    """Run a test with the files written by the parent alone, then with a helper forked at write
    time (Linux only)."""
    forks = []
    if request.param == "with a forked helper":
        if not parallel_write.sys.platform == "linux":
            pytest.skip("the forked helper runs on Linux only")
        allow_forking(monkeypatch)
        monkeypatch.setattr(output, "MIN_FORKED_ROWS", 0)
        fork = parallel_write.os.fork
        monkeypatch.setattr(parallel_write.os, "fork", lambda: forks.append(1) or fork())
    yield request.param
    assert bool(forks) == (request.param == "with a forked helper")   # the mode really was used


def allow_forking(monkeypatch):
    monkeypatch.setattr(parallel_write.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(parallel_write.threading, "active_count", lambda: 1)   # xdist's own thread


def test_forked_helper_gives_the_same_bytes(tmp_path, steps_writer, monkeypatch):
    monkeypatch.setattr(streaming_write, "piece_rows", lambda num_rows: 1)   # row by row
    forked = write_results(tmp_path / "forked", *make_run())
    monkeypatch.setattr(output, "MIN_FORKED_ROWS", 10**12)
    in_process = write_results(tmp_path / "in_process", *make_run())
    for name in ("requests.csv", "steps.csv", "summary.json"):
        assert (forked / name).read_bytes() == (in_process / name).read_bytes(), name


def test_a_failing_steps_writer_raises_its_own_error_and_leaves_nothing(tmp_path, steps_writer,
                                                                         monkeypatch):
    target = write_results(tmp_path / "run", *make_run())
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    monkeypatch.setattr(output, "_write_steps_csv", lambda f, log: f.write(1 / 0))
    monkeypatch.setattr(streaming_write, "_steps_text", lambda chunks: [str(1 / 0)])
    with pytest.raises(ZeroDivisionError):          # the helper's exception, type and all
        write_results(target, *make_run())
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_failure_in_the_parent_ends_the_helper(tmp_path, steps_writer, monkeypatch):
    # requests.csv fails in the parent while the helper may still be writing: the helper is
    # ended before the staging folder is removed, so nothing is left behind.
    def explode(*args, **kwargs):
        raise OSError("disk full")
    monkeypatch.setattr(output, "_write_requests_csv", explode)
    monkeypatch.setattr(output, "request_columns", explode)
    with pytest.raises(OSError, match="disk full"):
        write_results(tmp_path / "results" / "run", *make_run())
    assert list((tmp_path / "results").iterdir()) == []
