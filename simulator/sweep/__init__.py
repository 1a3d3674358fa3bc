"""Sweeps: a scenario's ``sweep:`` block run as (scheduler x point x seed) into one sweep.csv."""
from simulator.sweep.execute import SweepOutcome, run_sweep
from simulator.sweep.plan import PlannedRun, SweepPlan, build_plan, load_plan

__all__ = ["PlannedRun", "SweepOutcome", "SweepPlan", "build_plan", "load_plan", "run_sweep"]
