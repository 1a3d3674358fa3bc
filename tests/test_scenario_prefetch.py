"""`servesim run` reads the scenario file in a forked child while the main process imports the
rest (simulator/scenario_prefetch.py): the same mapping and the same one-line errors as reading it
in the main process, which it falls back to wherever it cannot fork or the child fails."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from simulator import parallel_write, scenario_prefetch
from simulator.scenario import ScenarioError
from simulator.scenario_file import read_raw_scenario
from simulator.scenario_prefetch import ScenarioPrefetch
from tests.fork_helpers import record_forks

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the reader forks on Linux only")


@pytest.fixture
def forks(monkeypatch):
    """Forking allowed here (xdist's own thread aside); yields the children's pids."""
    monkeypatch.setattr(parallel_write.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(parallel_write.threading, "active_count", lambda: 1)
    pids = record_forks(monkeypatch)
    yield pids
    deadline = time.monotonic() + 10
    while parallel_write._leaving and time.monotonic() < deadline:
        parallel_write.reap_leaving()
        time.sleep(0.005)
    for pid in pids:   # each child was reaped: none is left behind
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_the_child_reads_every_shipped_scenario_as_the_main_process_does(path, forks):
    overrides = ("seed=7", "workload.num_requests=12")
    try:
        expected = read_raw_scenario(path, overrides)
    except ScenarioError as exc:   # a deliberately broken example: the same error
        with pytest.raises(ScenarioError) as got:
            ScenarioPrefetch(path, overrides).raw()
        assert str(got.value) == str(exc)
    else:
        assert ScenarioPrefetch(path, overrides).raw() == expected
    assert len(forks) == 1


@pytest.mark.parametrize("text, overrides", [
    (None, ()),                                                   # no such file
    ("a: [1, 2\n", ()),                                           # not valid YAML
    ("a: 1\na: 2\n", ()),                                         # a key given twice
    ("- 1\n- 2\n", ()),                                           # not a mapping
    ("a: {b: 1}\n", ("a.b.c=3",)),                                # --set below a number
    ("a: 1\n", ("novalue",)),                                     # --set without =
])
def test_a_mistake_gets_the_same_one_line_error(tmp_path, forks, text, overrides):
    path = tmp_path / "s.yaml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ScenarioError) as in_process:
        read_raw_scenario(path, overrides)
    with pytest.raises(ScenarioError) as prefetched:
        ScenarioPrefetch(path, overrides).raw()
    assert str(prefetched.value) == str(in_process.value)
    assert len(forks) == 1


def test_a_child_failing_otherwise_leaves_the_reading_to_the_main_process(forks, monkeypatch):
    from simulator import scenario_file
    parent, real = os.getpid(), scenario_file.read_raw_scenario

    def failing_in_the_child(*args):
        if os.getpid() != parent:
            raise MemoryError("child")
        return real(*args)
    monkeypatch.setattr(scenario_file, "read_raw_scenario", failing_in_the_child)
    path = ROOT / "scenarios" / "toy_unit.yaml"
    assert ScenarioPrefetch(path, ("seed=3",)).raw() == real(path, ("seed=3",))
    assert len(forks) == 1


def test_without_forking_the_main_process_reads_the_file(monkeypatch):
    forked = []
    monkeypatch.setattr(parallel_write.threading, "active_count", lambda: 2)   # another thread
    monkeypatch.setattr(scenario_prefetch.os, "fork", lambda: forked.append(1) or os.fork())
    path = ROOT / "scenarios" / "toy_unit.yaml"
    assert ScenarioPrefetch(path).raw() == read_raw_scenario(path)
    assert forked == []
