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

Engine arguments keep vLLM's names; an argument the run did not record takes vLLM's default.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from cost_models.hardware import list_hardware
from cost_models.model_spec import load_model
from simulator.validate.measured import MeasuredRun

TRACE_FILE = "trace.jsonl"
SCHEDULER_NAME = "simulated"
# A CPU engine has no GPU to size: blocks are given, so only the placeholder's existence matters.
CPU_HARDWARE = {"name": "cpu", "memory_gib": 16, "memory_bandwidth_GBps": 20, "bf16_tflops": 1}
# Async scheduling became vLLM's default with PR #27614 (late 2025, semantics §1.6). The release
# boundary is our assumption, not checked against release notes: the first release after it.
_ASYNC_DEFAULT_SINCE = (0, 12)


@dataclass(frozen=True)
class RebuildOptions:
    cost_model: dict
    hardware: str | dict
    model: str
    num_gpu_blocks: int | None = None
    gpu_memory_utilization: float | None = None
    async_scheduling: Literal["on", "off", "auto"] = "auto"
    arrivals: Literal["replay", "closed-loop"] = "replay"


def resolve_model(measured: MeasuredRun, given: str | None) -> str:
    """``--model``, else the engine's model id mapped to a preset (``meta-llama/Llama-3.1-8B``)."""
    if given:
        load_model(given)
        return given
    recorded = str(measured.engine_args.get("model") or "")
    for candidate in filter(None, (recorded, recorded.rsplit("/", 1)[-1].lower())):
        try:
            return load_model(candidate).name
        except ValueError:
            continue
    raise ValueError(f"--model: the run's model {recorded!r} is not a preset (servesim models); "
                     f"pass --model NAME or a config.json path")


def resolve_hardware(measured: MeasuredRun, given: str | None, from_cost_model: str | None) -> str | dict:
    """``--hardware``; a CPU run's placeholder; the run's own GPU; the cost model's GPU."""
    if given:
        return given
    if measured.engine_args.get("device") == "cpu":
        return CPU_HARDWARE
    named = _squeezed(str(measured.engine_args.get("device_name") or ""))
    found = next((h.name for h in list_hardware() if named and _squeezed(h.name) == named), None)
    if found or from_cost_model:
        return found or from_cost_model
    raise ValueError("--hardware: the run does not name a known GPU and the cost model does not either; "
                     "pass --hardware NAME (servesim hardware)")


def _squeezed(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())   # RTXPRO6000 and rtx-pro-6000 alike


def resolve_async_scheduling(mode: str, engine: dict[str, Any]) -> tuple[bool | None, str]:
    """(value, why): ``auto`` follows what the recorded vLLM would have done."""
    if mode in ("on", "off"):
        return mode == "on", f"{mode} (--async-scheduling)"
    if engine.get("async_scheduling") is not None:
        return bool(engine["async_scheduling"]), "as recorded in the engine arguments"
    if engine.get("device") == "cpu":
        return False, "off: vLLM forces it off on CPU"
    version = _version(engine.get("vllm_version"))
    if version is None:
        return None, "left to the scheduler's default (vLLM version unknown)"
    on = version >= _ASYNC_DEFAULT_SINCE
    return on, f"{'on' if on else 'off'}: vLLM {engine['vllm_version']}'s default"


def _version(text: Any) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", str(text or ""))
    return (int(match.group(1)), int(match.group(2))) if match else None


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


def rebuild_scenario(measured: MeasuredRun, options: RebuildOptions, trace_path: Path) -> tuple[dict, list[str]]:
    """The scenario dict (validate it with ``validate_scenario``) and notes on each choice."""
    engine_args = measured.engine_args
    engine, notes = _engine(engine_args, options)
    scheduler, scheduler_notes = _scheduler(engine_args, options)
    workload: dict[str, Any] = {"arrival": {"kind": "trace", "path": str(trace_path)}}
    if options.arrivals == "closed-loop":
        workload["max_concurrency"] = int(measured.max_concurrency)
    scenario = {
        "name": _name(measured.name), "description": f"rebuilt from {measured.source}",
        "model": options.model, "hardware": options.hardware, "cost_model": dict(options.cost_model),
        "engine": engine, "workload": workload, "schedulers": [scheduler],
        "metrics": {"percentiles": [50.0, 90.0, 95.0, 99.0]}}
    return scenario, notes + scheduler_notes


def _engine(args: dict[str, Any], options: RebuildOptions) -> tuple[dict, list[str]]:
    engine: dict[str, Any] = {"tensor_parallel_size": int(args.get("tensor_parallel_size") or 1),
                              "block_size": int(args.get("block_size") or 16)}
    if args.get("max_model_len"):
        engine["max_model_len"] = int(args["max_model_len"])
    blocks = options.num_gpu_blocks or args.get("num_gpu_blocks_override") or args.get("num_gpu_blocks")
    utilization = options.gpu_memory_utilization or args.get("gpu_memory_utilization")
    if utilization is not None:
        engine["gpu_memory_utilization"] = float(utilization)
    if blocks:
        engine["num_gpu_blocks"] = int(blocks)
        return engine, [f"KV cache: {int(blocks)} blocks of {engine['block_size']} tokens (given)"]
    return engine, []   # derived from GPU memory: the pipeline reports the count


def _scheduler(args: dict[str, Any], options: RebuildOptions) -> tuple[dict, list[str]]:
    scheduler: dict[str, Any] = {"preset": "vllm_v1", "name": SCHEDULER_NAME,
                                 "enable_chunked_prefill": bool(args.get("enable_chunked_prefill", True)),
                                 "enable_prefix_caching": bool(args.get("enable_prefix_caching", True))}
    for knob in ("max_num_seqs", "max_num_batched_tokens"):
        if args.get(knob) is not None:
            scheduler[knob] = int(args[knob])
    value, why = resolve_async_scheduling(options.async_scheduling, args)
    if value is not None:
        scheduler["async_scheduling"] = value
    return scheduler, [f"async scheduling {why}"]


def _name(run_name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", run_name).strip("-.") or "run"
    return f"validate-{cleaned}"
