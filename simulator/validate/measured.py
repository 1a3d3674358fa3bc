"""A measured vLLM run, read from either of the two layouts ``servesim validate`` accepts.

- LLMServingSim's ``vllm-runs/<name>/``: ``meta.json`` (``engine_kwargs``, and in newer runs
  ``resolved_config``, ``kv_cache``, ``hardware``: record.py reads them), ``requests.jsonl`` with
  engine timestamps (``queued_ts``, ``first_token_ts``, ``last_token_ts``), ``timeseries.csv`` at
  1-s ticks; prompt token ids from the workload file ``meta.json`` names, when it can be found.
- ``vllm bench serve --save-result --save-detailed`` JSON (per-request ``ttfts``, ``latencies``,
  ``start_times``, ``input_lens``, ``output_lens``, ``itls``), optionally with the same server's
  iteration log. The bench file records no engine arguments: the caller passes them
  (``--engine-args``), and ``load_measured`` refuses a bench file without them.

Times are seconds from the run's start: LLMServingSim's first ``queued_ts`` (the engine's clock);
for a bench file the start of its main run, ``max(start + latency) - duration``, as vLLM measures
``duration`` from there. Rows are sorted by arrival (stably) so row i is simulated request i.
"""
from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from simulator.validate.iteration_log import (IterationSteps, bench_date_s, read_iteration_log,
                                              run_steps)
from simulator.validate.prompts import match_prompts, read_prompts
from simulator.validate.record import EngineRecord, read_engine_record


@dataclass(frozen=True, eq=False)
class MeasuredSeries:
    """Engine state over time (seconds from the run start); None where the source has no column."""
    time_s: np.ndarray
    num_running: np.ndarray
    num_waiting: np.ndarray | None
    kv_usage: np.ndarray | None       # 0..1
    source: str


@dataclass(frozen=True, eq=False)
class MeasuredRun:
    name: str
    source: str
    arrival_s: np.ndarray             # when the engine (replay) received each request
    num_prompt_tokens: np.ndarray
    num_output_tokens: np.ndarray
    ttft_s: np.ndarray
    e2el_s: np.ndarray
    duration_s: float                 # run start to last token (vLLM's ``duration``)
    engine_args: dict[str, Any]       # vLLM's argument names (record.py; num_gpu_blocks per engine)
    prompt_token_ids: tuple[tuple[int, ...], ...] | None = None
    engine_sources: dict[str, str] = field(default_factory=dict)   # argument -> field it was read from
    workload_index: np.ndarray | None = None     # each request's line in the workload it was sent from
    prompts_note: str = ""                       # where the token ids came from, or why there are none
    client_arrival_s: np.ndarray | None = None   # before the client's --max-concurrency semaphore
    max_concurrency: int | None = None
    request_rate: float | None = None
    series: MeasuredSeries | None = None
    steps: IterationSteps | None = None          # this run's rows of the iteration log
    notes: tuple[str, ...] = ()

    def __len__(self) -> int:
        return int(self.arrival_s.size)


def load_measured(path: str | Path, iteration_log: str | Path | None = None,
                  engine: EngineRecord | None = None) -> MeasuredRun:
    """A run folder (LLMServingSim layout) or a bench JSON file, told apart by what the path is;
    ``engine``: the engine arguments a bench file needs (record.read_engine_record of a JSON)."""
    path = Path(path)
    if path.is_dir():
        if iteration_log is not None:
            raise ValueError("--iteration-log: only for a vllm bench JSON (a run folder has timeseries.csv)")
        return load_llmservingsim_run(path)
    if engine is None:
        raise ValueError("--engine-args: a vllm bench JSON records no engine arguments; pass --engine-args "
                         "FILE.json (the server's vLLM arguments, or a run's meta.json)")
    return load_vllm_bench(path, iteration_log, engine)


# -- LLMServingSim ---------------------------------------------------------------------------------
def load_llmservingsim_run(run_dir: str | Path) -> MeasuredRun:
    run_dir = Path(run_dir)
    meta = _read_json(run_dir / "meta.json", "RUN")
    rows = _read_jsonl(run_dir / "requests.jsonl")
    rows.sort(key=lambda r: float(r["queued_ts"]))
    column = lambda key: np.array([float(r[key]) for r in rows])  # noqa: E731
    queued, first, last = column("queued_ts"), column("first_token_ts"), column("last_token_ts")
    t0 = float(queued[0])
    record = read_engine_record(meta, "meta.json")
    # Older runs do not record the GPU: the folder is named <GPU>-<model> (RTXPRO6000-Llama-3.1-8B).
    engine = {"device": "cuda", "device_name": run_dir.name.split("-", 1)[0], **record.values}
    prompt = np.array([int(r["input_toks"]) for r in rows])
    output = np.array([int(r["output_toks"]) for r in rows])
    index = _bench_indices(rows)
    ids, prompts_note = _workload_token_ids(run_dir, meta, prompt, index)
    notes = ("times from the engine's queued_ts (t=0 at the first request); "
             "TTFT and E2E from queued_ts, as the run's README defines them",)
    return MeasuredRun(
        name=run_dir.name, source=f"LLMServingSim vLLM run {run_dir}", arrival_s=queued - t0,
        num_prompt_tokens=prompt, num_output_tokens=output, ttft_s=first - queued, e2el_s=last - queued,
        duration_s=float(last.max() - t0), engine_args=engine, engine_sources=record.sources,
        prompt_token_ids=ids, workload_index=index, prompts_note=prompts_note,
        series=_timeseries(run_dir / "timeseries.csv"), notes=notes)


def _workload_token_ids(run_dir: Path, meta: dict, prompt_tokens: np.ndarray,
                        index: np.ndarray | None) -> tuple[tuple | None, str]:
    """The prompt token ids from the workload file ``meta.json`` names, when it is found and lines up."""
    name = meta.get("dataset_path")
    if not name:
        return None, "no dataset_path in meta.json: prompts without token ids (no prefix hits; see --prompts)"
    found = next((p for p in (run_dir / name, run_dir.parent.parent / name, run_dir.parent / name, Path(name))
                  if p.is_file()), None)
    if found is None:
        return None, (f"workload {name} not found near {run_dir}: prompts without token ids "
                      f"(no prefix hits; see --prompts)")
    if meta.get("dataset_hash") and hashlib.sha256(found.read_bytes()).hexdigest() != meta["dataset_hash"]:
        return None, f"workload {found} does not match meta.json's dataset_hash: token ids not used"
    try:
        ids = match_prompts(read_prompts(found, "workload"), prompt_tokens, index, f"workload {found}")
    except ValueError as exc:
        return None, f"{exc}: token ids not used"
    return ids, f"prompt token ids from {found} (prefix caching sees the real prompts)"


def _bench_indices(rows: list[dict]) -> np.ndarray | None:
    """Each row's ``bench-<i>``: its line in the workload; None unless every row has one."""
    suffixes = [str(r.get("request_id", "")).rpartition("-")[2] for r in rows]
    return np.array([int(s) for s in suffixes]) if all(s.isdigit() for s in suffixes) else None


def with_prompts(run: MeasuredRun, path: Path) -> MeasuredRun:
    """``--prompts FILE``: the run's prompt token ids from a JSONL trace (prompts.py matches them)."""
    prompts = read_prompts(path)
    ids = match_prompts(prompts, run.num_prompt_tokens, run.workload_index, f"--prompts: {path}")
    extra = len(prompts) - len(run)
    unused = f"; its last {extra} lines are not the run's" if extra > 0 else ""
    return replace(run, prompt_token_ids=ids, prompts_note=f"prompt token ids from {path} (--prompts: "
                                                           f"prefix caching sees the real prompts{unused})")


def _timeseries(path: Path) -> MeasuredSeries | None:
    if not path.is_file():
        return None
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return None
    col = lambda key: np.array([float(r[key]) for r in rows]) if key in rows[0] else None  # noqa: E731
    kv = col("kv_cache_pct")
    running = col("running")
    if kv is not None and not kv.any() and running is not None and running.any():
        kv = None   # all zero while requests ran: the run did not record KV usage
    return MeasuredSeries(col("t"), running, col("waiting"), None if kv is None else kv / 100,
                          f"{path.name} (1-s ticks)")


# -- vllm bench serve --------------------------------------------------------------------------------
def load_vllm_bench(json_path: str | Path, iteration_log: str | Path | None = None,
                    engine: EngineRecord | dict | None = None) -> MeasuredRun:
    """A ``--save-detailed`` bench file; ``engine``: the server's recorded arguments (None: none,
    enough for reading latencies; ``load_measured`` refuses to simulate without them)."""
    json_path = Path(json_path)
    bench = _read_json(json_path, "--bench-json")
    missing = [k for k in ("ttfts", "latencies", "start_times", "input_lens", "output_lens", "duration")
               if k not in bench]
    if missing:
        raise ValueError(f"--bench-json: {json_path} lacks {', '.join(missing)}; save it with "
                         f"vllm bench serve --save-result --save-detailed")
    order = _successful_by_start(bench)
    pick = lambda key: np.array([bench[key][i] for i in order], dtype=float)  # noqa: E731
    start, latency = pick("start_times"), pick("latencies")
    t0 = float((start + latency).max()) - float(bench["duration"])   # the main run's start
    if not isinstance(engine, EngineRecord):   # a plain dict of vLLM arguments works too
        engine = read_engine_record(engine or {}, "engine arguments")
    queue = pick("queue_times") if "queue_times" in bench else None
    run = MeasuredRun(
        name=json_path.stem, source=f"vllm bench serve {json_path}", arrival_s=start - t0,
        num_prompt_tokens=pick("input_lens").astype(np.int64),
        num_output_tokens=pick("output_lens").astype(np.int64),
        ttft_s=pick("ttfts"), e2el_s=latency, duration_s=float(bench["duration"]),
        engine_args=dict(engine.values), engine_sources=dict(engine.sources),
        workload_index=np.array(order, dtype=np.int64),   # vLLM lists results in the dataset's order
        client_arrival_s=None if queue is None else start - queue - t0,
        max_concurrency=bench.get("max_concurrency"), request_rate=_rate(bench.get("request_rate")),
        prompts_note="a bench file holds no prompt token ids: no prefix hits (see --prompts)")
    if iteration_log is None:
        return run
    return _with_iteration_log(run, bench, iteration_log)


def _successful_by_start(bench: dict) -> list[int]:
    """Indices of the requests without an error, in send order (failed ones have no latencies)."""
    errors = bench.get("errors") or [""] * len(bench["ttfts"])
    return sorted((i for i, e in enumerate(errors) if not e), key=lambda i: bench["start_times"][i])


def _rate(value: Any) -> float | None:
    return None if value is None else float(value)   # "inf" reads as infinity


def _with_iteration_log(run: MeasuredRun, bench: dict, iteration_log: str | Path) -> MeasuredRun:
    whole = read_iteration_log(iteration_log)
    end_s = bench_date_s(bench["date"]) if bench.get("date") else None
    steps = run_steps(whole, int(run.num_prompt_tokens.sum()), end_s)
    notes = [f"iteration log {whole.path}: steps {steps.first_row}..{steps.first_row + len(steps) - 1} "
             f"of {len(whole)} are this run (ending at the bench date, holding its prompt tokens)"]
    logged, needed = int(steps.gen_reqs.sum()), int(np.maximum(run.num_output_tokens - 1, 0).sum())
    if logged != needed:
        notes.append(f"those steps decode {logged} tokens where the run's outputs need {needed}")
    return replace(run, steps=steps, series=steps_series(steps, run.duration_s), notes=run.notes + tuple(notes))


def steps_series(steps: IterationSteps, duration_s: float) -> MeasuredSeries | None:
    """Means per logged second: the last step's second is the run's end (``duration_s``)."""
    if np.all(np.isnan(steps.log_time_s)):
        return None
    seconds, index = np.unique(steps.log_time_s, return_inverse=True)
    counts = np.bincount(index)
    mean = lambda values: np.bincount(index, weights=values) / counts  # noqa: E731
    kv = None if np.all(np.isnan(steps.kv_usage)) else mean(np.nan_to_num(steps.kv_usage))
    return MeasuredSeries(seconds - seconds[-1] + duration_s, mean(steps.ctx_reqs + steps.gen_reqs),
                          None, kv, "iteration log (requests scheduled per step, mean per 1-s timestamp)")


# -- files -------------------------------------------------------------------------------------------
def _read_json(path: Path, what: str) -> dict:
    if not path.is_file():
        raise ValueError(f"{what}: {str(path)!r} is not a file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{what}: {path} is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{what}: {path} holds a {type(data).__name__}, not a JSON object")
    return data


def _read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        raise ValueError(f"RUN: {str(path)!r} is not a file (a run folder holds meta.json and requests.jsonl)")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not rows:
        raise ValueError(f"RUN: {path} holds no requests")
    need = ("input_toks", "output_toks", "queued_ts", "first_token_ts", "last_token_ts")
    lacking = [k for k in need if k not in rows[0]]
    if lacking:
        raise ValueError(f"RUN: {path} rows lack {', '.join(lacking)}")
    return rows
