"""A vLLM server's per-step log (``--enable-logging-iteration-details``), cut down to one bench run.

Reads the raw server log or the ``*_iterations.csv`` that ``../shared/tools/vllm-cpu/parse_iterations.py``
makes of it (columns iter, ctx_reqs, ctx_tokens, gen_reqs, gen_tokens, elapsed_ms, kv_usage_pct,
log_time). One server log usually holds several bench runs, each after its own ready-check and
warm-up requests, so ``run_steps`` keeps only the steps of one run:

- the run ends at the bench file's ``date`` (``vllm bench serve`` stamps it just after the run, to
  the second; the log's timestamps are to the second too): the last step logged at or before it;
- walking back from there, the run's steps are the fewest that hold all of its prompt tokens
  (Σ ``input_lens`` of the bench file): warm-ups finish before the main run starts, so no step
  mixes the two. With prefix caching on, cached tokens are never logged and the cut lands early.

``elapsed_ms`` covers the forward pass and sampling only: ``schedule()`` and output processing run
outside it (they are sequential on CPU, where async scheduling is off). ``unlogged_step_time_s``
estimates that missing time per step from the time the engine held requests.
"""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

import numpy as np

CSV_COLUMNS = ("ctx_reqs", "ctx_tokens", "gen_reqs", "gen_tokens", "elapsed_ms")
_LINE = re.compile(
    r"Iteration\((\d+)\): (\d+) context requests, (\d+) context tokens, (\d+) generation requests, "
    r"(\d+) generation tokens, iteration elapsed time: ([\d.]+) ms( \(dummy\))?"
    r"(?:, \S+ KV cache usage: ([\d.]+)%)?")
_LOG_TIME = re.compile(r"(\d\d-\d\d \d\d:\d\d:\d\d)")
# vLLM's log lines carry no year: every time is read in one leap year, so only differences matter.
_YEAR = "2000"


@dataclass(frozen=True, eq=False)
class IterationSteps:
    """Engine steps in log order, as columns; ``log_time_s`` is NaN where the log had no time."""
    path: Path
    first_row: int              # index of the first step in the whole file
    ctx_reqs: np.ndarray
    ctx_tokens: np.ndarray
    gen_reqs: np.ndarray
    gen_tokens: np.ndarray
    elapsed_s: np.ndarray
    kv_usage: np.ndarray        # 0..1 fraction; NaN where not logged
    log_time_s: np.ndarray      # seconds (whole), comparable with ``bench_date_s``

    def __len__(self) -> int:
        return int(self.elapsed_s.size)

    def rows(self, start: int, stop: int) -> IterationSteps:
        cut = slice(start, stop)
        return replace(self, first_row=self.first_row + start, ctx_reqs=self.ctx_reqs[cut],
                       ctx_tokens=self.ctx_tokens[cut], gen_reqs=self.gen_reqs[cut],
                       gen_tokens=self.gen_tokens[cut], elapsed_s=self.elapsed_s[cut],
                       kv_usage=self.kv_usage[cut], log_time_s=self.log_time_s[cut])

    def write_csv(self, path: Path) -> Path:
        """The parse_iterations.py columns, which ``servesim fit --from-vllm-log`` reads."""
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(("iter", *CSV_COLUMNS, "kv_usage_pct"))
            for i in range(len(self)):
                kv = self.kv_usage[i]
                writer.writerow((self.first_row + i, int(self.ctx_reqs[i]), int(self.ctx_tokens[i]),
                                 int(self.gen_reqs[i]), int(self.gen_tokens[i]),
                                 repr(float(self.elapsed_s[i] * 1e3)),
                                 "" if np.isnan(kv) else repr(float(kv * 100))))
        return path


def read_iteration_log(path: str | Path) -> IterationSteps:
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--iteration-log: {str(path)!r} is not a file")
    rows = _csv_rows(path) if path.suffix == ".csv" else _log_rows(path)
    rows = [r for r in rows if not r["dummy"]]
    if not rows:
        raise ValueError(f"--iteration-log: {path} has no 'Iteration(N): ...' steps (start the server with "
                         f"--enable-logging-iteration-details, or give its parsed *_iterations.csv)")
    column = lambda name, dtype: np.array([r[name] for r in rows], dtype=dtype)  # noqa: E731
    return IterationSteps(path, 0, column("ctx_reqs", np.int64), column("ctx_tokens", np.int64),
                          column("gen_reqs", np.int64), column("gen_tokens", np.int64),
                          column("elapsed_ms", np.float64) / 1e3, column("kv_pct", np.float64) / 100,
                          column("log_time_s", np.float64))


def _csv_rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in CSV_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"--iteration-log: {path} lacks column(s) {', '.join(missing)} "
                             f"(needs {', '.join(CSV_COLUMNS)})")
        return [_row(r, r.get("kv_usage_pct"), r.get("log_time"), False, f"{path}:{i}")
                for i, r in enumerate(reader, 2)]


def _log_rows(path: Path) -> list[dict]:
    rows = []
    with open(path, errors="replace") as f:
        for number, line in enumerate(f, 1):
            m = _LINE.search(line)
            if m:
                stamp = _LOG_TIME.search(line[:m.start()])
                values = dict(zip(CSV_COLUMNS, m.groups()[1:6]))
                rows.append(_row(values, m.group(8), stamp.group(1) if stamp else None,
                                 bool(m.group(7)), f"{path}:{number}"))
    return rows


def _row(values: dict, kv_pct: str | None, log_time: str | None, dummy: bool, where: str) -> dict:
    try:
        row = {name: int(float(values[name])) for name in CSV_COLUMNS[:4]}
        row["elapsed_ms"] = float(values["elapsed_ms"])
        row["kv_pct"] = float(kv_pct) if kv_pct not in (None, "") else float("nan")
    except (TypeError, ValueError):
        raise ValueError(f"--iteration-log: {where}: a step's counts or elapsed_ms are not numbers") from None
    row["log_time_s"] = log_time_s(log_time) if log_time else float("nan")
    row["dummy"] = dummy
    return row


def log_time_s(text: str) -> float:
    """vLLM's ``MM-DD hh:mm:ss`` as seconds (see ``_YEAR``)."""
    return datetime.strptime(f"{_YEAR}-{text.strip()}", "%Y-%m-%d %H:%M:%S").timestamp()


def bench_date_s(date: str) -> float:
    """``vllm bench serve``'s ``date`` (``YYYYMMDD-hhmmss``) on the same scale as ``log_time_s``."""
    return datetime.strptime(f"{_YEAR}{date[4:]}", "%Y%m%d-%H%M%S").timestamp()


def run_steps(steps: IterationSteps, num_prompt_tokens: int, end_s: float | None) -> IterationSteps:
    """The steps of the run that ended at ``end_s`` (bench ``date``) and prefilled ``num_prompt_tokens``."""
    stop = len(steps)
    if end_s is not None and not np.all(np.isnan(steps.log_time_s)):
        stop = int(np.searchsorted(steps.log_time_s, end_s, side="right"))
    prompt_before = np.cumsum(steps.ctx_tokens[:stop][::-1])
    reached = np.flatnonzero(prompt_before >= num_prompt_tokens)
    if not reached.size:
        where = f"up to the bench date ({stop} steps)" if stop < len(steps) else f"({stop} steps)"
        raise ValueError(f"--iteration-log: {steps.path} holds {int(prompt_before[-1]) if stop else 0} "
                         f"prompt tokens {where}, fewer than the run's {num_prompt_tokens}: is it the log "
                         f"of the server this bench file measured?")
    return steps.rows(stop - 1 - int(reached[0]), stop)


def unlogged_step_time_s(steps: IterationSteps, arrival_s: np.ndarray, e2el_s: np.ndarray) -> float:
    """Mean time per step that ``elapsed_ms`` misses (scheduling, output processing, streaming).

    The engine works whenever it holds a request, so the time the run's requests cover (the union
    of their [send, last token] spans: idle gaps between requests left out) is the run's steps
    back to back; less the logged time, per step. Requests the KV cache preempts sit out steps
    without changing this sum, unlike their inter-token gaps (a gap then spans the steps the
    request missed: 20 ms per step from gaps on our small-KV run, whose log gives 4.2 ms). Each
    busy span also holds one client round trip (send to engine, last token back), which this
    counts as engine time: ~12 ms per idle-to-busy start, < 0.1 ms per step on our runs.
    """
    return (_union_length_s(arrival_s, arrival_s + e2el_s) - float(steps.elapsed_s.sum())) / len(steps)


def _union_length_s(start_s: np.ndarray, end_s: np.ndarray) -> float:
    order = np.argsort(start_s, kind="stable")
    start_s, end_s = start_s[order], np.maximum.accumulate(end_s[order])
    # A span starts a new busy period where it begins after every earlier span has ended.
    new = np.concatenate(([True], start_s[1:] > end_s[:-1]))
    first, last = np.flatnonzero(new), np.concatenate((np.flatnonzero(new)[1:] - 1, [len(start_s) - 1]))
    return float((end_s[last] - start_s[first]).sum())
