"""The result tables' columns: their names in the files, and what a request row keeps."""
from __future__ import annotations

import numpy as np

# requests.csv, one row per request by id.
REQUEST_COLUMNS: tuple[str, ...] = (
    "request_id", "arrival_s", "scheduled_s", "first_token_s", "finish_s", "num_prompt_tokens",
    "num_output_tokens", "num_preemptions", "num_cached_tokens", "ttft_ms", "tpot_ms", "e2el_ms",
    "client_queue_ms")   # time held by the client's --max-concurrency limit (not in TTFT/E2EL)

# What a finished request leaves in its table row (Request's fields of the same names).
REQUEST_COUNTS: tuple[str, ...] = ("request_id", "num_prompt_tokens", "max_output_tokens",
                                   "num_output_tokens", "num_preemptions", "num_cached_tokens")
REQUEST_TIMES: tuple[str, ...] = ("arrival_s", "scheduled_s", "first_token_s", "last_token_s",
                                  "finish_s", "client_queue_s", "itl_sq_sum_s2", "max_itl_s")
REQUEST_FIELDS = REQUEST_COUNTS + REQUEST_TIMES

# steps.csv, one row per forward pass. Queue lengths are taken at the step's end (finished
# requests gone, arrivals during the step included), like vllm:num_requests_running/waiting.
STEP_DTYPES: dict[str, type] = {
    "start_s": np.float64, "end_s": np.float64, "num_seqs": np.int64, "num_prefill_seqs": np.int64,
    "num_decode_seqs": np.int64, "num_tokens": np.int64, "num_prefill_tokens": np.int64,
    "num_running": np.int64, "num_waiting": np.int64,
    "kv_usage": np.float64,          # 0..1 fraction, like vllm:kv_cache_usage_perc
    "num_preemptions": np.int64,     # decided while forming this step
}
STEP_COLUMNS: tuple[str, ...] = tuple(STEP_DTYPES)
# Columns only some runs have, after STEP_COLUMNS in this order: a hybrid model's runs keep the
# requests holding a state (docs/hybrid-state-semantics.md H4); a run of several replicas the
# replica each step ran on (its index in summary.json's "replicas").
STATE_SLOTS, REPLICA = "num_state_slots", "replica"
OPTIONAL_STEP_COLUMNS: tuple[str, ...] = (STATE_SLOTS, REPLICA)
ALL_STEP_DTYPES = {**STEP_DTYPES, STATE_SLOTS: np.int64, REPLICA: np.int64}   # every column
# What a run keeps of every step once the rest is written: the summary's and the plots' series.
STEP_SERIES: tuple[str, ...] = ("start_s", "end_s", "num_running", "num_waiting", "kv_usage",
                                "num_preemptions")

# The step series the summary gives as a peak and a time-weighted mean, and its step figures.
LEVELS: tuple[str, ...] = ("kv_usage", "num_running", "num_waiting")
STEP_FIGURES: tuple[str, ...] = (
    "num_steps", "total_step_time_s", "mean_step_time_ms",
    *(f"{kind}_{name}" for name in LEVELS for kind in ("peak", "mean")))
