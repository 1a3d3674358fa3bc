"""ResultWriter with a helper forked before the run: steps.csv and the finished requests' rows
streamed, the rest of requests.csv shared."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from simulator import output, parallel_write, streaming_write
from simulator.metrics import step_log as step_log_module
from simulator.output import ResultWriter, write_results
from simulator.parallel_write import PieceDealer
from simulator.runner import prepare, simulate
from simulator.scenario import load_scenario
from tests.fork_helpers import record_forks

ROOT = Path(__file__).parents[1]
FILES = ("requests.csv", "steps.csv", "summary.json")

pytestmark = pytest.mark.skipif(parallel_write.sys.platform != "linux",
                                reason="the forked helper runs on Linux only")


@pytest.fixture
def forks(monkeypatch):
    """Forking allowed here (xdist's own thread aside), small chunks and pieces so that a short
    run streams many chunks and shares many pieces; yields the helpers' pids."""
    monkeypatch.setattr(parallel_write.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(parallel_write.threading, "active_count", lambda: 1)
    monkeypatch.setattr(step_log_module, "_CHUNK_ROWS", 64)
    monkeypatch.setattr(output, "SHORT_RUN_CHUNK_ROWS", 64)
    monkeypatch.setattr(streaming_write, "piece_rows", lambda num_rows: 7)
    pids = record_forks(monkeypatch)
    yield pids
    for pid in pids:   # no helper outlives its run: ended, or ending once its job is done
        assert ends_soon(pid), f"helper {pid} is still running"


def ends_soon(pid: int, timeout_s: float = 10.0) -> bool:
    """Whether child ``pid`` has ended (reaped here if need be) within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return True
        except ChildProcessError:   # reaped already
            return True
        time.sleep(0.001)
    return False


def prepared_run(path: Path, overrides=(), scheduler=None):
    prepared = prepare(load_scenario(path, list(overrides)), [scheduler] if scheduler else [])
    return prepared, prepared.runs[0]


def run_and_write(target: Path, prepared, run, forked: bool, fast_forward: bool = True) -> Path:
    with ResultWriter(target, stream=forked) as writer:
        out = simulate(prepared, run, fast_forward, writer=writer)
        return writer.finish(out.result.requests, out.summary)


@pytest.fixture
def streamed_rows(monkeypatch):
    """The (start, stop) of each piece of requests.csv streamed during a run."""
    pieces = []
    next_rows = ResultWriter._next_request_rows

    def recording(self):
        rows = next_rows(self)
        if rows is not None:
            pieces.append((self._num_streamed - len(rows[0]), self._num_streamed))
        return rows
    monkeypatch.setattr(ResultWriter, "_next_request_rows", recording)
    return pieces


@pytest.mark.parametrize("scenario, overrides, scheduler", [
    ("bench/standard.yaml", ["workload.num_requests=300"], "vllm_v1"),   # float times: arrays
    ("scenarios/toy_unit.yaml", [], None),   # SimPy's int 0 among float times: cell by cell
])
def test_streamed_files_are_the_bytes_written_in_one_process(tmp_path, forks, scenario,
                                                             overrides, scheduler):
    prepared, run = prepared_run(ROOT / scenario, overrides, scheduler)
    forked = run_and_write(tmp_path / "forked", prepared, run, forked=True)
    plain = run_and_write(tmp_path / "plain", prepared, run, forked=False)
    assert len(forks) == 1
    for name in FILES:
        assert (forked / name).read_bytes() == (plain / name).read_bytes(), name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["forked", "plain"]


@pytest.mark.parametrize("scenario, overrides, exact, chunk_rows", [
    ("bench/standard.yaml", ["workload.num_requests=300"], True, 64),
    # One step logged at a time: the last chunk is stored before the last requests finish.
    ("bench/standard.yaml", ["workload.num_requests=300"], True, 1000),
    ("scenarios/preemption_storm.yaml", ["workload.arrival.kind=poisson",
                                         "workload.arrival.rate=40"], True, 64),
    ("scenarios/preemption_storm.yaml", [], False, 64),   # all sent at SimPy's int 0: by cell
])
def test_requests_streamed_as_they_finish_are_the_bytes_written_at_the_end(
        tmp_path, forks, streamed_rows, monkeypatch, scenario, overrides, exact, chunk_rows):
    """Rows go out in id order, each piece up to the first unfinished request, though later
    requests finish first (shorter outputs, preemptions); the rest is shared at the end."""
    monkeypatch.setattr(step_log_module, "_CHUNK_ROWS", chunk_rows)
    prepared, run = prepared_run(ROOT / scenario, overrides, "vllm_v1")
    fast_forward = chunk_rows == 64
    with ResultWriter(tmp_path / "forked", stream=True) as writer:
        out = simulate(prepared, run, fast_forward, writer=writer)
        assert (writer._prefix.arrays is not None) is exact
        forked = writer.finish(out.result.requests, out.summary)
    plain = run_and_write(tmp_path / "plain", prepared, run, False, fast_forward)
    for name in FILES:
        assert (forked / name).read_bytes() == (plain / name).read_bytes(), name
    finish_s = [r.finish_s for r in out.result.requests]
    assert finish_s != sorted(finish_s)   # some finished before a request ahead of them
    if "preemption" in scenario:
        assert out.summary["num_preemptions"] > 0
    assert len(streamed_rows) > 1 and streamed_rows[0][0] == 0
    assert all(a[1] == b[0] for a, b in zip(streamed_rows, streamed_rows[1:]))
    if not fast_forward:   # 2,293 steps: the last requests finish after the last chunk
        assert streamed_rows[-1][1] < len(finish_s)


def test_a_streamed_runs_requests_are_read_once_for_summary_and_files(tmp_path, forks,
                                                                     monkeypatch):
    from simulator.metrics import finished_prefix
    read, lengths = finished_prefix.read_request_arrays, []
    monkeypatch.setattr(finished_prefix, "read_request_arrays",
                        lambda requests: lengths.append(len(requests)) or read(requests))
    prepared, run = prepared_run(ROOT / "bench/standard.yaml", ["workload.num_requests=300"],
                                 "vllm_v1")
    run_and_write(tmp_path / "run", prepared, run, forked=True)
    assert len(lengths) > 1 and sum(lengths) == 300


def static_scenario(tmp_path: Path, variant: str) -> Path:
    """scenarios/toy_unit.yaml with its static scheduler set to ``variant``."""
    path = tmp_path / f"toy_{variant}.yaml"
    text = (ROOT / "scenarios/toy_unit.yaml").read_text()
    path.write_text(text.replace("{preset: static, max_num_seqs: 4}",
                                 f"{{preset: static, max_num_seqs: 4, variant: {variant}}}"))
    return path


def test_a_static_batch_is_written_at_the_end(tmp_path, forks, streamed_rows):
    """Static's hf variant rewrites its whole batch's times when the batch ends, after earlier
    members finished: its requests are read once the run is over."""
    prepared, run = prepared_run(static_scenario(tmp_path, "hf"), [], "static")
    forked = run_and_write(tmp_path / "forked", prepared, run, forked=True)
    plain = run_and_write(tmp_path / "plain", prepared, run, forked=False)
    assert streamed_rows == []
    assert (forked / "requests.csv").read_bytes() == (plain / "requests.csv").read_bytes()


def test_a_static_ft_batch_is_streamed_as_it_finishes(tmp_path, forks, streamed_rows):
    """The ft variant's finish is a request's last change (Scheduler.finished_requests_final):
    its rows go out as its members finish, the same bytes as written at the end."""
    prepared, run = prepared_run(static_scenario(tmp_path, "ft"), [], "static")
    forked = run_and_write(tmp_path / "forked", prepared, run, forked=True)
    plain = run_and_write(tmp_path / "plain", prepared, run, forked=False)
    assert streamed_rows
    assert (forked / "requests.csv").read_bytes() == (plain / "requests.csv").read_bytes()


@pytest.mark.parametrize("share", ["a slow helper: the parent takes most pieces",
                                   "the parent takes no piece"])
def test_requests_csv_is_whole_however_the_pieces_are_shared(tmp_path, forks, monkeypatch,
                                                             share):
    """The helper's pieces go first into the file and the parent's are appended, whoever
    formats how many."""
    if share.startswith("a slow helper"):
        parent, table_text = os.getpid(), streaming_write._table_text

        def slow_in_the_helper(columns):
            if os.getpid() != parent:
                time.sleep(0.05)
            return table_text(columns)
        monkeypatch.setattr(streaming_write, "_table_text", slow_in_the_helper)
    else:
        monkeypatch.setattr(PieceDealer, "take_back", lambda self, watch_fd=None: None)
    prepared, run = prepared_run(ROOT / "bench/standard.yaml", ["workload.num_requests=300"],
                                 "vllm_v1")
    forked = run_and_write(tmp_path / "forked", prepared, run, forked=True)
    plain = run_and_write(tmp_path / "plain", prepared, run, forked=False)
    assert (forked / "requests.csv").read_bytes() == (plain / "requests.csv").read_bytes()


def test_a_helper_failing_mid_run_raises_its_error_and_leaves_nothing(tmp_path, forks,
                                                                      monkeypatch):
    calls = []

    def fail_second_time(columns):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("disk full (helper)")
        return streaming_write.csv_row_chunks([], 1)
    monkeypatch.setattr(streaming_write, "_steps_text", fail_second_time)
    prepared, run = prepared_run(ROOT / "bench/standard.yaml", ["workload.num_requests=300"],
                                 "vllm_v1")
    with pytest.raises(OSError, match=r"disk full \(helper\)"):
        run_and_write(tmp_path / "results" / "run", prepared, run, forked=True)
    assert len(forks) == 1 and list((tmp_path / "results").iterdir()) == []


@pytest.mark.parametrize("when", ["streamed during the run", "shared at the end"])
def test_a_helper_failing_on_requests_rows_raises_its_error(tmp_path, forks, monkeypatch, when):
    parent, piece_text = os.getpid(), streaming_write._table_text

    def fail_in_the_helper(columns):
        if os.getpid() != parent:
            raise ValueError("bad piece")
        return piece_text(columns)
    monkeypatch.setattr(streaming_write, "_table_text", fail_in_the_helper)
    prepared, run = prepared_run(ROOT / "bench/standard.yaml", ["workload.num_requests=300"],
                                 "vllm_v1")
    with pytest.raises(ValueError, match="bad piece"):
        if when.startswith("streamed"):
            run_and_write(tmp_path / "results" / "run", prepared, run, forked=True)
        else:   # the parent takes no piece: the helper formats them all
            out = simulate(prepared, run)
            monkeypatch.setattr(output, "MIN_FORKED_ROWS", 0)
            monkeypatch.setattr(PieceDealer, "take_back", lambda self, watch_fd=None: None)
            write_results(tmp_path / "results" / "run", out.result.requests,
                          out.result.step_log, out.summary)
    assert len(forks) == 1 and list((tmp_path / "results").iterdir()) == []


@pytest.mark.parametrize("error", [RuntimeError("reading failed"), KeyboardInterrupt()])
def test_a_failure_while_streaming_requests_ends_the_helper_and_leaves_nothing(
        tmp_path, forks, streamed_rows, monkeypatch, error):
    from simulator.metrics.finished_prefix import FinishedPrefix
    advance = FinishedPrefix.advance

    def fail_third_time(self):
        if len(streamed_rows) == 2:
            raise error
        return advance(self)
    monkeypatch.setattr(FinishedPrefix, "advance", fail_third_time)
    prepared, run = prepared_run(ROOT / "bench/standard.yaml", ["workload.num_requests=300"],
                                 "vllm_v1")
    with pytest.raises(type(error)):
        run_and_write(tmp_path / "results" / "run", prepared, run, forked=True)
    assert len(forks) == 1 and len(streamed_rows) == 2
    assert list((tmp_path / "results").iterdir()) == []


@pytest.mark.parametrize("error", [RuntimeError("simulation failed"), KeyboardInterrupt()])
def test_a_failure_during_the_run_ends_the_helper_and_leaves_nothing(tmp_path, forks, error):
    prepared, run = prepared_run(ROOT / "bench/standard.yaml", ["workload.num_requests=300"],
                                 "vllm_v1")
    with pytest.raises(type(error)):
        with ResultWriter(tmp_path / "results" / "run", stream=True) as writer:
            for i in range(200):   # some chunks streamed to the helper already
                writer.step_log.append(i, i + 1, 1, 0, 1, 1, 0, 1, 0, 0.5, 0)
            raise error
    assert len(forks) == 1 and list((tmp_path / "results").iterdir()) == []


def test_a_helper_killed_from_outside_is_an_error_not_a_hang(tmp_path, forks):
    with pytest.raises(OSError, match="status -9"):
        with ResultWriter(tmp_path / "results" / "run", stream=True) as writer:
            os.kill(forks[0], signal.SIGKILL)
            # Until it has died its end of the pipe is open, and 10k rows fit in the pipe.
            while Path(f"/proc/{forks[0]}/stat").read_text().split()[2] != "Z":
                time.sleep(0.001)
            for i in range(10_000):   # the pipe breaks: the parent stops and says why
                writer.step_log.append(i, i + 1, 1, 0, 1, 1, 0, 1, 0, 0.5, 0)
    assert list((tmp_path / "results").iterdir()) == []


def test_without_forking_the_same_writer_writes_in_one_process(tmp_path, forks, monkeypatch):
    monkeypatch.setattr(parallel_write.threading, "active_count", lambda: 2)   # another thread
    prepared, run = prepared_run(ROOT / "scenarios/toy_unit.yaml")
    out = run_and_write(tmp_path / "run", prepared, run, forked=True)
    assert forks == [] and sorted(p.name for p in out.iterdir()) == sorted(FILES)


def test_write_results_of_a_finished_log_shares_the_work_too(tmp_path, forks, monkeypatch):
    prepared, run = prepared_run(ROOT / "bench/standard.yaml", ["workload.num_requests=300"],
                                 "vllm_v1")
    out = simulate(prepared, run)
    args = out.result.requests, out.result.step_log, out.summary
    monkeypatch.setattr(output, "MIN_FORKED_ROWS", 0)
    forked = write_results(tmp_path / "forked", *args)
    monkeypatch.setattr(output, "MIN_FORKED_ROWS", 10**12)
    plain = write_results(tmp_path / "plain", *args)
    assert len(forks) == 1
    for name in FILES:
        assert (forked / name).read_bytes() == (plain / name).read_bytes(), name


def test_dealer_gives_each_piece_once_front_and_back_until_they_meet():
    dealer = PieceDealer()
    try:
        dealer.deal(5)
        taken = [dealer.take_front(), dealer.take_back(), dealer.take_back(), dealer.take_front(),
                 dealer.take_front(), dealer.take_back(), dealer.take_front()]
        assert taken == [0, 4, 3, 1, 2, None, None]
    finally:
        dealer.close()


def test_a_helper_done_with_its_job_is_not_waited_for_while_it_exits(monkeypatch):
    """wait() returns once the child has reported its job done; a child slow to exit is reaped
    later (reap_leaving), not waited for."""
    real_exit = os._exit

    def slow_exit(code):   # in the child only: the parent never calls os._exit here
        time.sleep(0.5)
        real_exit(code)
    monkeypatch.setattr(parallel_write.os, "_exit", slow_exit)
    helper = parallel_write.Helper(lambda inbox: inbox.receive())
    pid = helper._pid
    helper.send("one message")
    start = time.monotonic()
    helper.wait()
    assert time.monotonic() - start < 0.4
    assert parallel_write._leaving == [pid]
    deadline = time.monotonic() + 10
    while parallel_write._leaving and time.monotonic() < deadline:
        parallel_write.reap_leaving()
        time.sleep(0.01)
    assert parallel_write._leaving == []
    with pytest.raises(ChildProcessError):   # reaped
        os.waitpid(pid, os.WNOHANG)


def test_a_helper_that_exits_without_reporting_its_job_done_is_an_error():
    helper = parallel_write.Helper(lambda inbox: os._exit(0))
    with pytest.raises(OSError, match="without saying it had finished"):
        helper.wait()


@pytest.mark.parametrize("num_rows, rows_per_piece", [
    (0, 256), (100, 256), (600, 256), (1000, 256), (3000, 750), (4095, 1024), (10_000, 1024),
    (100_000, 1563), (10**7, 16384)])
def test_pieces_are_a_64th_within_1024_to_16384_rows_but_quarters_of_a_small_table(
        num_rows, rows_per_piece):
    assert streaming_write.piece_rows(num_rows) == rows_per_piece


def test_the_helper_has_the_last_steps_and_the_requests_rows_before_the_summary(
        tmp_path, forks, monkeypatch):
    """At the run's end the helper is handed steps.csv's last rows and requests.csv's rest
    first, and formats them while the parent summarises the run."""
    from simulator import runner
    order = []
    for name in ("end_steps", "start_table", "finish_table"):
        method = getattr(streaming_write.ForkedWriter, name)
        monkeypatch.setattr(streaming_write.ForkedWriter, name,
                            lambda self, *a, _m=method, _n=name: order.append(_n) or _m(self, *a))
    summarize = runner.summarize
    monkeypatch.setattr(runner, "summarize",
                        lambda *a, **k: order.append("summarize") or summarize(*a, **k))
    prepared, run = prepared_run(ROOT / "bench/standard.yaml", ["workload.num_requests=300"],
                                 "vllm_v1")
    run_and_write(tmp_path / "run", prepared, run, forked=True)
    assert len(forks) == 1
    assert order == ["end_steps", "start_table", "summarize", "finish_table"]


@pytest.mark.parametrize("min_streamed", [1, 10**12])   # forked before the run, or at a chunk
def test_servesim_run_streams_its_runs_and_writes_the_same_files(tmp_path, forks, monkeypatch,
                                                                 min_streamed):
    from simulator import run_command
    scenario = ROOT / "scenarios/toy_unit.yaml"
    monkeypatch.setattr(run_command, "MIN_STREAMED_REQUESTS", min_streamed)
    run_command.run_scenario_file(scenario, tmp_path / "streamed", [], plots=False)
    helpers = len(forks)
    monkeypatch.setattr(output, "can_fork", lambda: False)
    run_command.run_scenario_file(scenario, tmp_path / "plain", [], plots=False)
    runs = sorted(p.name for p in (tmp_path / "plain").iterdir())
    assert sorted(p.name for p in (tmp_path / "streamed").iterdir()) == runs
    assert helpers == len(forks) == len(runs)   # one helper per scheduler of the file
    for run in runs:
        for name in FILES:
            assert (tmp_path / "streamed" / run / name).read_bytes() == \
                (tmp_path / "plain" / run / name).read_bytes(), (run, name)


@pytest.mark.parametrize("chunk_rows, helpers", [(64, 1), (10**6, 0)])
def test_a_helper_is_forked_once_the_log_stores_its_first_chunk(tmp_path, forks, streamed_rows,
                                                               monkeypatch, chunk_rows, helpers):
    """A log shorter than a chunk is written in one process, even though the summary's reading
    of it stores its one chunk; a longer one forks the helper at its first chunk, which then
    writes what the log held, the chunks after it and the requests finished from then on."""
    monkeypatch.setattr(output, "SHORT_RUN_CHUNK_ROWS", chunk_rows)
    prepared, run = prepared_run(ROOT / "bench/standard.yaml", ["workload.num_requests=300"],
                                 "vllm_v1")
    with ResultWriter(tmp_path / "lazy", stream=True, fork_when_long=True) as writer:
        out = simulate(prepared, run, writer=writer)
        lazy = writer.finish(out.result.requests, out.summary)
    assert len(forks) == helpers and (len(streamed_rows) > 0) == (helpers > 0)
    plain = run_and_write(tmp_path / "plain", prepared, run, forked=False)
    for name in FILES:
        assert (lazy / name).read_bytes() == (plain / name).read_bytes(), name
