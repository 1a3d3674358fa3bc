"""The `servesim` console script (``simulator.cli.entry``) leaves without Python's teardown, yet
exits as Python would have: the command's status, every byte of its output, every exit handler
the command registered."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Runs entry() with main wrapped: the wrapper registers an exit handler (as a library the command
# uses would), then runs the real command line given after the script.
ENTRY_WITH_HANDLER = """
import atexit, sys
from simulator import cli
real_main = cli.main
def wrapped():
    atexit.register(lambda: print("handler ran", file=sys.stderr, flush=True))
    try:
        real_main()
    finally:   # after click's last echo (which flushes): stays in stdout's buffer
        print("printed after the command")
cli.main = wrapped
sys.argv = ["servesim", *sys.argv[1:]]
cli.entry()
"""


# Buffered output, as a user's shell has it (PYTHONUNBUFFERED would hide a missing flush).
BUFFERED_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


def run_entry(*args: str, code: str = ENTRY_WITH_HANDLER) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=BUFFERED_ENV,
                          capture_output=True, text=True, timeout=120)


def test_piped_output_is_complete_and_the_status_is_zero():
    # Piped stdout is block-buffered: the schema's JSON (tens of kB) arrives whole only if the
    # quick exit flushes it.
    proc = run_entry("schema")
    assert proc.returncode == 0, proc.stderr
    schema, last = proc.stdout.rstrip("\n").rsplit("\n", 1)
    assert json.loads(schema)["type"] == "object"
    assert last == "printed after the command"


def test_exit_handlers_registered_by_the_command_still_run():
    proc = run_entry("schedulers")
    assert proc.returncode == 0
    assert proc.stderr.splitlines() == ["handler ran"]


def test_a_user_error_keeps_its_status_and_message(tmp_path):
    proc = run_entry("run", str(tmp_path / "missing.yaml"))
    assert proc.returncode == 2
    assert "missing.yaml" in proc.stderr and "handler ran" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_uncaught_exception_leaves_the_usual_way(tmp_path):
    # Not a SystemExit: Python prints the traceback and exits 1, teardown included.
    proc = run_entry("schedulers",
                     code=ENTRY_WITH_HANDLER.replace("real_main()", "raise RuntimeError('boom')"))
    assert proc.returncode == 1
    assert "RuntimeError: boom" in proc.stderr and "handler ran" in proc.stderr
