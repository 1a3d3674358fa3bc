"""Run metrics: the per-step log, the `vllm bench serve` summary and engine time series."""
from simulator.metrics.step_log import STEP_COLUMNS, StepLog
from simulator.metrics.summary import latencies_s, percentile_key, summarize
from simulator.metrics.timeseries import EngineSeries, time_weighted_mean

__all__ = ["STEP_COLUMNS", "StepLog", "EngineSeries", "latencies_s", "percentile_key",
           "summarize", "time_weighted_mean"]
