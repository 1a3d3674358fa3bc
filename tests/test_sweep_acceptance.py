"""The issue's acceptance figure: `servesim sweep` of the headline scenario (5 rates x 3
schedulers x 3 seeds, roofline cost model) on 2 workers finishes in under 2 minutes, and running
it again does no work."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "sweep_static_vs_continuous.yaml"
LIMIT_S = 120


def _sweep(out: Path) -> tuple[float, str]:
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "simulator.cli", "sweep", str(SCENARIO), "-o", str(out),
                           "--workers", "2", "--no-progress"], cwd=ROOT, capture_output=True,
                          text=True, timeout=2 * LIMIT_S)
    assert done.returncode == 0, done.stderr
    return time.monotonic() - start, done.stdout


def test_headline_sweep_runs_45_runs_in_under_two_minutes_and_a_rerun_does_no_work(tmp_path):
    elapsed_s, output = _sweep(tmp_path)
    assert "45 runs (3 schedulers x 5 points x 3 seeds); 0 already in" in output
    assert elapsed_s < LIMIT_S
    written = (tmp_path / "sweep.csv").read_bytes()
    assert written.count(b"\n") == 1 + 45
    _, again = _sweep(tmp_path)
    assert "45 already in" in again and "0 to run" in again and "plots: up to date" in again
    assert (tmp_path / "sweep.csv").read_bytes() == written
