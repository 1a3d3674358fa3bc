"""Run `servesim run` as a fresh process and measure it (shared by bench/peer.py and bench/suite.py)."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUMMARY_KEYS = ("mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "mean_e2el_ms",
                "p99_e2el_ms")


# Bytecode as an installed package has it: compiled once, then read from a cache (this machine
# sets PYTHONDONTWRITEBYTECODE, which would make every run recompile ~40 modules, ~0.1 s).
BYTECODE_CACHE = Path(tempfile.gettempdir()) / "servesim-bench-pycache"


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(BYTECODE_CACHE)
    return env


def run_once(command: list[str], cwd: Path = ROOT) -> tuple[float, float]:
    """(wall seconds, peak RSS in MiB) of one child process; a failed run stops the bench."""
    with tempfile.TemporaryFile() as stderr:
        start = time.perf_counter()
        proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=stderr,
                                env=child_env())
        _, status, usage = os.wait4(proc.pid, 0)   # this child's own rusage, not all children's
        wall_s = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            stderr.seek(0)
            sys.exit(f"bench: {' '.join(command)} exited {proc.returncode}: "
                     f"{stderr.read().decode(errors='replace').strip()}")
    return wall_s, usage.ru_maxrss / 1024     # Linux reports KiB


def time_run(scenario: Path, label: str, overrides: list[str], repeat: int) -> tuple[dict, dict]:
    """Run ``servesim run SCENARIO --scheduler LABEL --no-plots`` ``repeat`` times; return the
    measured fields (median wall, peak RSS, rates) and the last run's summary.json."""
    return time_interleaved([(scenario, label, overrides)], repeat)[0]


def time_interleaved(cells: list[tuple[Path, str, list[str]]], repeat: int) -> list[tuple[dict, dict]]:
    """``time_run`` of each (scenario, label, overrides) cell, the runs interleaved: run r of
    every cell before run r + 1 of any, so that a slow spell of a shared machine (this VM
    alternates between a fast and a slow state every few seconds) falls on every cell's runs
    alike instead of on all of one cell's."""
    return time_interleaved_with_others(cells, [], repeat)[0]


def time_interleaved_with_others(cells: list[tuple[Path, str, list[str]]],
                                 others: list[tuple[list[str], list[str], Path]], repeat: int
                                 ) -> tuple[list[tuple[dict, dict]], list[list[tuple[float, float]]]]:
    """``time_interleaved`` of the servesim cells, with other programs' runs in the same rounds:
    each of ``others`` is (warm-up command, timed command, working folder); the warm-up runs once,
    untimed, before any timed run, and the timed command is run ``repeat`` times, its run r
    after run r of every servesim cell and before run r + 1 of any. Returns the cells' fields
    and summaries, and each other command's (wall seconds, peak RSS MiB) runs."""
    with tempfile.TemporaryDirectory(prefix="servesim-bench-") as root:
        commands = []
        for i, (scenario, label, overrides) in enumerate(cells):
            out_dir = Path(root) / str(i)
            command = [sys.executable, "-m", "simulator.cli", "run", str(scenario), "--scheduler",
                       label, "--no-plots", "--out", str(out_dir)]
            run_once(command + ["--set", "workload.num_requests=1"])   # warm the bytecode cache
            commands.append((command + [arg for o in overrides for arg in ("--set", o)], ROOT))
        for warm, timed, cwd in others:
            run_once(warm, cwd)
            commands.append((timed, cwd))
        runs = [[] for _ in commands]
        for _ in range(repeat):
            for (command, cwd), command_runs in zip(commands, runs):
                command_runs.append(run_once(command, cwd))
        results = [_fields(cell_runs, json.loads((Path(root) / str(i) / label / "summary.json").read_text()))
                   for i, ((_, label, _), cell_runs) in enumerate(zip(cells, runs))]
        return results, runs[len(cells):]


def wall_fields(runs: list[tuple[float, float]]) -> dict[str, str]:
    """Median, fastest and slowest wall seconds and the largest peak RSS of a command's runs."""
    walls = [wall for wall, _ in runs]
    return {"wall_s": f"{statistics.median(walls):.3f}", "wall_min_s": f"{min(walls):.3f}",
            "wall_max_s": f"{max(walls):.3f}", "peak_rss_mb": f"{max(r for _, r in runs):.0f}"}


def _fields(runs: list[tuple[float, float]], summary: dict) -> tuple[dict, dict]:
    wall = statistics.median(wall for wall, _ in runs)
    fields = {"requests": summary["completed"], "runs": len(runs), **wall_fields(runs),
              "req_per_s": f"{summary['completed'] / wall:.0f}",
              "steps_per_s": f"{summary['num_steps'] / wall:.0f}",
              "sim_over_wall": f"{summary['duration'] / wall:.1f}",
              "sim_s": f"{summary['duration']:.1f}", "steps": summary["num_steps"]}
    fields.update({key: f"{summary[key]:.2f}" for key in SUMMARY_KEYS})
    return fields, summary


def line(prefix: str, fields: dict) -> str:
    return prefix + " " + " ".join(f"{k}={v}" for k, v in fields.items())
