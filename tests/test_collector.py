"""The cycle collector pauses while `servesim run` starts up and runs again for the simulation
(simulator/collector.py): start-up makes only objects that live on, a long run makes garbage."""
from __future__ import annotations

import gc
from pathlib import Path

from simulator import cli, run_command
from simulator.collector import collector_paused

ROOT = Path(__file__).resolve().parents[1]


def test_the_pause_restores_the_collectors_state():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()   # the inner pause leaves the outer one's state
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()   # off before: still off
    finally:
        gc.enable()


def test_run_prepares_with_the_collector_off_and_simulates_with_it_on(tmp_path, monkeypatch):
    seen = []
    real_prepare, real_simulate = run_command.prepare, run_command.simulate

    def prepare(*args, **kwargs):
        seen.append(("prepare", gc.isenabled()))
        return real_prepare(*args, **kwargs)

    def simulate(*args, **kwargs):
        seen.append(("simulate", gc.isenabled()))
        return real_simulate(*args, **kwargs)
    monkeypatch.setattr(run_command, "prepare", prepare)
    monkeypatch.setattr(run_command, "simulate", simulate)
    cli.main(["run", str(ROOT / "scenarios/toy_unit.yaml"), "--no-plots", "-o", str(tmp_path)],
             standalone_mode=False)
    assert seen == [("prepare", False), ("simulate", True), ("simulate", True)]
    assert gc.isenabled()
