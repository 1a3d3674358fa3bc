"""A sweep killed mid-way (SIGKILL to the CLI and its worker processes) resumes without
duplicate or lost rows, and ends byte-identical to an uninterrupted in-process sweep: so the
process pool, the in-process path and a resume all write the same file."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.test_sweep import csv_rows, quiet_sweep, tiny, write

from simulator.sweep.table import SWEEP_CSV

ROOT = Path(__file__).resolve().parents[1]
KILL_AFTER_ROWS = 3
TIMEOUT_S = 120


def _num_rows(path: Path) -> int:
    if not path.exists():
        return 0
    text = path.read_text()
    return max(0, text.count("\n") - 1)


def _sweep_raw() -> dict:
    raw = tiny(sweep={"workload.arrival.rate": [2.0, 8.0]}, num_seeds=3)
    raw["workload"]["num_requests"] = 150   # long enough runs to be killed between rows
    return raw


def test_killed_sweep_resumes_without_duplicates_or_lost_rows(tmp_path):
    raw = _sweep_raw()
    path, out = write(tmp_path, raw), tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "simulator.cli", "sweep", str(path), "-o", str(out),
                             "--workers", "2", "--no-plots", "--no-progress"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)   # its own group: the kill reaches the workers
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while _num_rows(out / SWEEP_CSV) < KILL_AFTER_ROWS and proc.poll() is None:
            assert time.monotonic() < deadline, "the sweep wrote no rows in time"
            time.sleep(0.01)
        assert proc.poll() is None, f"the sweep ended before it could be killed: {proc.stderr.read()}"
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    total = 2 * 2 * 3
    outcome = quiet_sweep(raw, out)
    assert KILL_AFTER_ROWS <= outcome.num_skipped < total
    assert outcome.num_ran + outcome.num_skipped == total
    rows = csv_rows(out / SWEEP_CSV)
    assert len(rows) == total and len({r["run_key"] for r in rows}) == total
    quiet_sweep(raw, tmp_path / "reference")
    assert (out / SWEEP_CSV).read_bytes() == (tmp_path / "reference" / SWEEP_CSV).read_bytes()
