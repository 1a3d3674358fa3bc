"""`servesim run` reads the scenario file, and draws its workload, in a forked child while the
main process imports the rest (simulator/scenario_prefetch.py): the same mapping, the same
one-line errors and the same trace as in the main process, which falls back to doing it itself
wherever it cannot fork, the child fails, or the child drew from another spec."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulator import parallel_write, scenario_prefetch
from simulator.scenario import ScenarioError, validate_scenario
from simulator.scenario_file import read_raw_scenario
from simulator.scenario_prefetch import ScenarioPrefetch
from simulator.workload.generate import generate_seeded_workload
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


def raw(path: Path, overrides: tuple[str, ...] = ()) -> dict:
    """The mapping through a ScenarioPrefetch, let go of afterwards (as `servesim run` does)."""
    prefetch = ScenarioPrefetch(path, overrides)
    try:
        return prefetch.raw()
    finally:
        prefetch.close()


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_the_child_reads_every_shipped_scenario_as_the_main_process_does(path, forks):
    overrides = ("seed=7", "workload.num_requests=12")
    try:
        expected = read_raw_scenario(path, overrides)
    except ScenarioError as exc:   # a deliberately broken example: the same error
        with pytest.raises(ScenarioError) as got:
            raw(path, overrides)
        assert str(got.value) == str(exc)
    else:
        assert raw(path, overrides) == expected
    assert len(forks) == 1


def _valid(path: Path, overrides: tuple[str, ...]) -> bool:
    try:
        validate_scenario(read_raw_scenario(path, overrides), base_dir=path.parent)
    except ScenarioError:
        return False
    return True


def drawn_early(path: Path, overrides: tuple[str, ...]):
    """(the validated scenario, the trace a child forked early drew for it, or None)."""
    scenario_prefetch.start_early()   # as `servesim run` does before click loads
    prefetch = ScenarioPrefetch(path, overrides)
    try:
        scenario = validate_scenario(prefetch.raw(), base_dir=path.parent)
        return scenario, prefetch.workload(scenario.workload, scenario.seed)
    finally:
        prefetch.close()


@pytest.mark.parametrize("path", [p for p in SCENARIOS if _valid(p, ("seed=7",))]
                         + [ROOT / "bench" / "peer_vidur.yaml"], ids=lambda p: p.name)
def test_a_child_forked_early_draws_the_workload_the_main_process_would(path, forks):
    scenario, drawn = drawn_early(path, ("seed=7",))
    spec = scenario.workload
    if spec.is_trace or spec.num_requests is None or spec.num_requests > 10_000:
        assert drawn is None   # a trace, a duration or a large workload: drawn by the caller
    else:
        expected = generate_seeded_workload(spec, scenario.seed)
        assert drawn is not None   # every shipped scenario takes the quick path
        assert len(drawn) == len(expected) and drawn.fingerprint() == expected.fingerprint()
        assert drawn.max_concurrency == expected.max_concurrency
        for column in (drawn.arrival_s, drawn.num_prompt_tokens, drawn.max_output_tokens):
            assert not column.flags.writeable   # read-only, as a trace made here is
    assert len(forks) == 1


def test_no_child_draws_more_than_10k_requests_nor_one_forked_late(forks):
    path = ROOT / "bench" / "peer_vidur.yaml"
    assert scenario_prefetch.MAX_DRAWN_REQUESTS == 10_000
    assert drawn_early(path, ("workload.num_requests=10000",))[1] is not None
    assert drawn_early(path, ("workload.num_requests=10001",))[1] is None
    prefetch = ScenarioPrefetch(path)   # no early child: forked now, it only reads
    try:
        scenario = validate_scenario(prefetch.raw(), base_dir=path.parent)
        assert prefetch.workload(scenario.workload, scenario.seed) is None
    finally:
        prefetch.close()


def test_a_trace_drawn_for_another_spec_or_seed_is_not_used(forks):
    path = ROOT / "scenarios" / "toy_unit.yaml"
    for change in ("seed", "spec"):
        scenario_prefetch.start_early()
        prefetch = ScenarioPrefetch(path, ("seed=3",))
        try:
            scenario = validate_scenario(prefetch.raw(), base_dir=path.parent)
            other = validate_scenario(read_raw_scenario(path, ("seed=3", "workload.num_requests=5")))
            if change == "seed":
                assert prefetch.workload(scenario.workload, 4) is None
            else:
                assert prefetch.workload(other.workload, 3) is None
        finally:
            prefetch.close()


def test_a_child_forked_early_is_given_the_file_later(forks):
    path = ROOT / "scenarios" / "toy_unit.yaml"
    scenario_prefetch.start_early()   # as `servesim run` does before click loads
    assert len(forks) == 1
    prefetch = ScenarioPrefetch(path, ("seed=3",))
    try:
        assert prefetch.raw() == read_raw_scenario(path, ("seed=3",))
        scenario = validate_scenario(read_raw_scenario(path, ("seed=3",)), base_dir=path.parent)
        drawn = prefetch.workload(scenario.workload, scenario.seed)
    finally:
        prefetch.close()
    assert drawn.fingerprint() == generate_seeded_workload(scenario.workload, 3).fingerprint()
    assert len(forks) == 1   # the early child, no second one


def test_an_early_child_given_no_file_exits(forks):
    scenario_prefetch.start_early()
    child, scenario_prefetch._early = scenario_prefetch._early, None
    os.close(child._job_fd)   # what the process's exit does when it never reads a scenario
    _, status = os.waitpid(child._pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    child._pid = None
    child.close()


def test_servesim_run_writes_the_same_files_with_and_without_its_child(tmp_path):
    from simulator.run_command import run_scenario_file
    path = ROOT / "scenarios" / "toy_unit.yaml"
    subprocess.run([sys.executable, "-m", "simulator.cli", "run", str(path), "--no-plots",
                    "-o", str(tmp_path / "cli")], cwd=ROOT, check=True, capture_output=True)
    run_scenario_file(path, tmp_path / "here", (), plots=False)   # no child: drawn here
    for run in (tmp_path / "here").iterdir():
        for name in ("requests.csv", "steps.csv", "summary.json"):
            assert (tmp_path / "cli" / run.name / name).read_bytes() == (run / name).read_bytes()


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
        raw(path, overrides)
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
    assert raw(path, ("seed=3",)) == real(path, ("seed=3",))
    assert len(forks) == 1


def test_without_forking_the_main_process_reads_the_file(monkeypatch):
    forked = []
    monkeypatch.setattr(parallel_write.threading, "active_count", lambda: 2)   # another thread
    monkeypatch.setattr(scenario_prefetch.os, "fork", lambda: forked.append(1) or os.fork())
    path = ROOT / "scenarios" / "toy_unit.yaml"
    prefetch = ScenarioPrefetch(path)
    assert prefetch.raw() == read_raw_scenario(path)
    assert prefetch.workload(None, 0) is None   # the caller draws it
    assert forked == []
