"""A measured run's engine arguments and requests -> a servesim scenario (a plain dict).

The workload is the measured requests themselves, written as a JSONL trace (``arrival_s``,
``input_toks``, ``output_toks`` and ``input_tok_ids`` when known, so prefix caching sees the real
prompts). Arrivals, two ways:
- ``replay`` (default): when the engine got each request. For a bench file run with
  ``--max-concurrency`` these are the send times *after* the client's semaphore, so replaying them
  open loop gives the engine exactly the arrivals it saw; the client's feedback (a slower server
  sends later) is then not simulated.
- ``closed-loop``: when the client generated each request (send time minus its semaphore wait),
  with the bench's ``max_concurrency`` enforced by the simulator: the feedback is simulated, the
  HTTP round trip between one finish and the next send is not.
- ``auto`` (default): closed-loop for a bench file run with ``--max-concurrency`` (and its queue
  times), else replay. Replaying a closed loop open loop lets a simulation only slightly slower
  than the server receive requests before the ones they replaced finish: the batch then grows past
  the concurrency and the extra prefills stall every decode (vLLM-CPU c16: TPOT +7.5% replayed,
  -2.9% closed).

Engine arguments keep vLLM's names; engine_settings.py chooses each (recorded, given or derived).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from simulator.validate.engine_settings import (RebuildOptions, Setting, engine_section, resolve_async_scheduling,
                                                resolve_hardware, scheduler_section)
from simulator.validate.measured import MeasuredRun

__all__ = ["RebuildOptions", "TRACE_FILE", "arrivals_note", "rebuild_scenario", "resolve_arrivals",
           "resolve_async_scheduling", "resolve_hardware", "write_trace"]
TRACE_FILE = "trace.jsonl"
SCHEDULER_NAME = "simulated"


def resolve_arrivals(measured: MeasuredRun, mode: str) -> str:
    """``replay`` or ``closed-loop``; ``auto`` closes the loop where the bench recorded one."""
    if mode != "auto":
        return mode
    closed = measured.max_concurrency is not None and measured.client_arrival_s is not None
    return "closed-loop" if closed else "replay"


def write_trace(measured: MeasuredRun, path: Path, arrivals: str = "replay") -> Path:
    """The measured requests as a JSONL trace; arrival times round-trip exactly (JSON floats)."""
    times = _arrival_times_s(measured, arrivals)
    ids = measured.prompt_token_ids
    with open(path, "w", encoding="utf-8") as f:
        for i in range(len(measured)):
            row = {"arrival_s": float(times[i]), "input_toks": int(measured.num_prompt_tokens[i]),
                   "output_toks": int(measured.num_output_tokens[i])}
            if ids is not None:
                row["input_tok_ids"] = list(ids[i])
            f.write(json.dumps(row) + "\n")
    return path


def arrivals_note(measured: MeasuredRun, arrivals: str) -> str:
    if arrivals == "replay":
        return "arrivals replayed open loop as the engine received them (--arrivals replay)"
    return (f"arrivals: the client's, before its semaphore, with max_concurrency {measured.max_concurrency} "
            f"simulated (--arrivals closed-loop)")


def _arrival_times_s(measured: MeasuredRun, arrivals: str) -> np.ndarray:
    if arrivals == "replay":
        return np.maximum(measured.arrival_s, 0.0)
    if measured.client_arrival_s is None or measured.max_concurrency is None:
        raise ValueError("--arrivals: closed-loop needs a bench file run with --max-concurrency "
                         "(and its queue_times); use replay")
    return np.maximum(measured.client_arrival_s, 0.0)   # float rounding can dip below the start


def rebuild_scenario(measured: MeasuredRun, options: RebuildOptions,
                     trace_path: Path) -> tuple[dict, list[Setting]]:
    """The scenario dict (validate it with ``validate_scenario``) and where each engine knob came
    from (``engine_settings.resolved`` fills in the counts derived when it is prepared)."""
    engine, engine_settings = engine_section(measured, options)
    scheduler, scheduler_settings = scheduler_section(measured, options, SCHEDULER_NAME)
    workload: dict[str, Any] = {"arrival": {"kind": "trace", "path": str(trace_path)}}
    if options.arrivals == "closed-loop":
        workload["max_concurrency"] = int(measured.max_concurrency)
    scenario = {
        "name": _name(measured.name), "description": f"rebuilt from {measured.source}",
        "model": options.model, "hardware": options.hardware, "cost_model": dict(options.cost_model),
        "engine": engine, "workload": workload, "schedulers": [scheduler],
        "metrics": {"percentiles": [50.0, 90.0, 95.0, 99.0]}}
    return scenario, engine_settings + scheduler_settings


def _name(run_name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", run_name).strip("-.") or "run"
    return f"validate-{cleaned}"
