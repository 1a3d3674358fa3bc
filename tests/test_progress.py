"""The progress bar of long commands (engine/progress.py): on a terminal only, redrawn on a coarse
cadence, and without any effect on what a run writes."""
from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

import simulator.engine.progress as progress
from simulator.commands.compare import CountingBackend
from simulator.commands.run import simulate_runs
from simulator.engine.progress import ProgressBar, progress_bar
from simulator.runner import prepare
from simulator.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]


class FakeBar:
    def __init__(self):
        self.updates: list[int] = []
        self.closed = False

    def update(self, n: int) -> None:
        self.updates.append(n)

    def close(self) -> None:
        self.closed = True


class FakeClock:
    def __init__(self):
        self.now_s = 100.0

    def monotonic(self) -> float:
        return self.now_s


def test_not_a_terminal_gives_an_inactive_bar_that_wraps_nothing():
    bar = progress_bar(10, "x")       # pytest captures stderr: not a terminal
    record = [].append
    assert not bar.active and bar.wrap(record) is record
    bar.advance(5)
    bar.close()


def test_the_clock_is_read_every_stride_and_the_bar_drawn_at_most_every_refresh(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(progress.time, "monotonic", clock.monotonic)
    fake = FakeBar()
    bar = ProgressBar(fake, total=10_000)    # stride 10
    for _ in range(9):
        bar.advance()
    assert fake.updates == []                # below the stride: not even the clock is read
    bar.advance()
    assert fake.updates == [10]
    bar.advance(25)
    assert fake.updates == [10]              # within 0.25 s of the last draw
    clock.now_s += progress.PROGRESS_REFRESH_S
    bar.advance(5)
    assert fake.updates == [10, 30]
    bar.advance(7)
    bar.close()
    assert fake.updates == [10, 30, 7] and fake.closed and sum(fake.updates) == 47


def test_wrap_counts_finished_requests_after_recording_them():
    fake, seen = FakeBar(), []
    bar = ProgressBar(fake, total=3)
    counted = bar.wrap(seen.extend)
    counted(["a", "b"])
    counted(["c"])
    bar.close()
    assert seen == ["a", "b", "c"] and sum(fake.updates) == 3


def test_a_run_writes_the_same_bytes_with_a_bar_drawn_as_without(tmp_path, monkeypatch):
    prepared = prepare(load_scenario(ROOT / "scenarios" / "toy_unit.yaml"))
    list(simulate_runs(prepared, tmp_path / "quiet"))
    terminal = io.StringIO()
    monkeypatch.setattr(progress, "stderr_is_terminal", lambda: True)
    monkeypatch.setattr(progress, "PROGRESS_DELAY_S", 0.0)
    monkeypatch.setattr(progress, "PROGRESS_REFRESH_S", 0.0)
    monkeypatch.setattr(sys, "stderr", terminal)
    list(simulate_runs(prepared, tmp_path / "drawn"))
    assert "static: 100%" in terminal.getvalue() and "16/16" in terminal.getvalue()
    files = sorted(p.relative_to(tmp_path / "quiet") for p in (tmp_path / "quiet").rglob("*") if p.is_file())
    assert len(files) == 6
    for name in files:
        assert (tmp_path / "drawn" / name).read_bytes() == (tmp_path / "quiet" / name).read_bytes(), name


def test_compare_counts_each_finished_search():
    class Executor:
        def share(self, obj):
            return ("shared", obj)

        def map_unordered(self, fn, tasks):
            for i, args in enumerate(tasks):
                yield i, fn(*args)

    fake = FakeBar()
    backend = CountingBackend(Executor(), ProgressBar(fake, total=3))
    assert backend.share(1) == ("shared", 1)
    assert list(backend.map_unordered(lambda x: x * 2, [(1,), (2,), (3,)])) == [(0, 2), (1, 4), (2, 6)]
    backend.bar.close()
    assert sum(fake.updates) == 3


@pytest.mark.parametrize("stream", [None, io.StringIO()])
def test_a_missing_or_plain_stderr_is_not_a_terminal(monkeypatch, stream):
    monkeypatch.setattr(sys, "stderr", stream)
    assert progress.stderr_is_terminal() is False
