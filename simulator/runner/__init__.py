"""From a validated scenario to results: ``prepare`` catches everything impossible before any
run starts (preparation.py); ``simulate`` runs one prepared scheduler (execution.py)."""
from simulator.runner.execution import RunOutput, iter_requests, make_requests, replica_stages, simulate
from simulator.runner.prepared import Prepared, PreparedPool, PreparedRun, counted_kv_cache
from simulator.runner.preparation import check_requests_fit, prepare, select_schedulers

__all__ = ["Prepared", "PreparedPool", "PreparedRun", "RunOutput", "check_requests_fit",
           "counted_kv_cache", "iter_requests", "make_requests", "prepare", "replica_stages", "select_schedulers",
           "simulate"]
