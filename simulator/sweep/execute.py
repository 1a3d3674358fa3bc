"""Run a sweep plan: skip what sweep.csv already holds, prepare the rest, run it, write rows.

Every pending (point, seed) workload is prepared (generated and checked) in this process before
the first run starts, so an impossible point fails at once instead of after an hour of work; each
prepared workload is then shared by the tasks of all its schedulers.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from simulator.results.atomic import atomic_write
from simulator.runner import prepare, simulate
from simulator.scenario import ScenarioError
from simulator.sweep.backends import make_backend
from simulator.scenario.sweep_plan import PlannedRun, PlannedWorkload, SweepPlan
from simulator.sweep.table import ERROR_COLUMN, KEY_COLUMNS, SWEEP_CSV, SweepTable

SWEEP_JSON = "sweep.json"


@dataclass(frozen=True)
class SweepOutcome:
    csv_path: Path
    num_runs: int          # in the plan
    num_skipped: int       # already in sweep.csv
    num_ran: int
    num_errors: int        # rows whose run could not finish (their ``error`` cell says why)


def simulate_summary(prepared, run_index: int) -> dict:
    """One task: one scheduler on one prepared workload -> its summary (or why it failed)."""
    from simulator.engine.progress import NoProgressError
    try:
        return simulate(prepared, prepared.runs[run_index]).summary
    except NoProgressError as exc:   # a livelocked point is a result, not a crash of the sweep
        return {ERROR_COLUMN: str(exc)}


def make_row(run: PlannedRun, result: dict) -> dict[str, Any]:
    row: dict[str, Any] = {"run_key": run.run_key, "scheduler": run.scheduler, "seed": run.seed}
    row.update(run.params)
    row[ERROR_COLUMN] = result.get(ERROR_COLUMN)
    row.update((k, v) for k, v in result.items() if k not in row)
    return row


def run_sweep(plan: SweepPlan, out_dir: Path, *, backend: str = "local", workers: int | None = None,
              address: str | None = None, restart: bool = False, progress: bool = True,
              log: Callable[[str], None] = print,
              max_memory_gb: float | None = None) -> SweepOutcome:
    out_dir = Path(out_dir)
    table = SweepTable(out_dir / SWEEP_CSV, (*KEY_COLUMNS, *plan.param_keys))
    done = {} if restart else table.load()
    _check_no_stale_rows(plan, done, table.path)
    pending = [w for w in plan.workloads if any(r.run_key not in done for r in w.runs)]
    num_pending = sum(r.run_key not in done for w in pending for r in w.runs)
    log(f"{plan.name}: {len(plan.runs)} runs ({_shape(plan)}); {len(plan.runs) - num_pending} "
        f"already in {table.path}, {num_pending} to run")
    prepared = [_prepare(w, max_memory_gb) for w in pending]   # every point checked before any run
    if restart or not table.path.exists():
        table.rewrite([])
    _write_meta(plan, out_dir)
    if num_pending:
        _execute(plan, table, pending, prepared, done, backend, workers, address, progress)
    if num_pending or list(table.rows) != [r.run_key for r in plan.runs]:
        table.rewrite([table.rows[r.run_key] for r in plan.runs])   # plan order: same bytes
    errors = sum(bool(table.rows[r.run_key].get(ERROR_COLUMN)) for r in plan.runs)
    return SweepOutcome(table.path, len(plan.runs), len(plan.runs) - num_pending, num_pending, errors)


def _execute(plan, table, pending, prepared, done, backend, workers, address, progress) -> None:
    from simulator.engine.progress import progress_bar
    with make_backend(backend, workers, address) as executor:
        tasks, runs = [], []
        for workload, ready in zip(pending, prepared):
            handle = executor.share(ready)
            for run in workload.runs:
                if run.run_key not in done:
                    tasks.append((handle, run.scheduler_index))
                    runs.append(run)
        with progress_bar(len(tasks), plan.name, "run", enabled=progress) as bar:
            for index, result in executor.map_unordered(simulate_summary, tasks):
                table.append(make_row(runs[index], result))
                bar.advance()


def _prepare(workload: PlannedWorkload, max_memory_gb: float | None = None):
    try:
        return prepare(workload.scenario, max_memory_gb=max_memory_gb)
    except ScenarioError as exc:
        where = ", ".join(f"{k}={v!r}" for k, v in (*workload.params, ("seed", workload.seed)))
        raise ScenarioError(f"sweep point ({where}): {exc}") from None


def _check_no_stale_rows(plan: SweepPlan, done: dict, path: Path) -> None:
    stale = set(done) - {r.run_key for r in plan.runs}
    if stale:
        raise ScenarioError(f"{path}: {len(stale)} of its rows are runs this sweep does not contain "
                            f"(the scenario changed since they ran); pass --restart to start over, "
                            f"or -o another folder")


def _shape(plan: SweepPlan) -> str:
    num_points = len(plan.workloads) // len(plan.seeds)
    return (f"{len(plan.scheduler_labels)} schedulers x {num_points} points x "
            f"{len(plan.seeds)} seeds")


def _write_meta(plan: SweepPlan, out_dir: Path) -> None:
    """What the plots need besides the rows: the axes, the seeds and the SLOs."""
    goodput = plan.base.metrics.goodput
    meta = {"scenario": plan.name, "param_keys": list(plan.param_keys), "load_key": plan.load_key,
            "seeds": list(plan.seeds), "schedulers": list(plan.scheduler_labels),
            "slos_ms": goodput.as_dict() if goodput else {}}
    text = json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n"
    path = out_dir / SWEEP_JSON
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return   # unchanged: keep its time stamp, so plots newer than it stay up to date
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda f: f.write(text))
