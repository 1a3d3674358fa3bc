"""Measured vs simulated: one table computed by the same code from per-request arrays on both sides.

Definitions are ``vllm bench serve``'s (semantics §7): TTFT and E2E from each request's start; TPOT
= (E2E - TTFT)/(out - 1) over requests with out > 1 only; statistics are ``np.mean``,
``np.median`` and ``np.percentile`` (linear). The run starts at t = 0 on both sides, so makespan
= max(arrival + E2E) (vLLM's ``duration``) and throughputs are per makespan.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from simulator.results.summary import latency_arrays_s
from simulator.validate.measured import MeasuredRun

STATISTICS = (("mean", None), ("median", 50.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0))
LATENCIES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2el", "E2E"))
RATES = (("output_throughput", "output throughput", "tok/s"),
         ("request_throughput", "request throughput", "req/s"), ("makespan_s", "makespan", "s"))


@dataclass(frozen=True, eq=False)
class RunLatencies:
    """Finished requests of one side: start (s from the run start), output tokens, TTFT, E2E."""
    arrival_s: np.ndarray
    num_output_tokens: np.ndarray
    ttft_s: np.ndarray
    e2el_s: np.ndarray

    @classmethod
    def of_measured(cls, run: MeasuredRun) -> RunLatencies:
        return cls(run.arrival_s, run.num_output_tokens, run.ttft_s, run.e2el_s)

    @classmethod
    def of_table(cls, requests) -> RunLatencies:
        """The finished requests of a run's RequestTable (simulator/results/request_table.py)."""
        t = requests.arrays()
        ttft_s, _, e2el_s = latency_arrays_s(t["arrival_s"], t["first_token_s"], t["last_token_s"],
                                             t["num_output_tokens"])
        return cls(t["arrival_s"], t["num_output_tokens"], ttft_s, e2el_s)

    def plus_client_s(self, client_s: float) -> RunLatencies:
        """With a client round trip in TTFT and E2E, as ``vllm bench serve`` times them (TPOT unchanged)."""
        if not client_s:
            return self
        return RunLatencies(self.arrival_s, self.num_output_tokens, self.ttft_s + client_s, self.e2el_s + client_s)

    @property
    def tpot_s(self) -> np.ndarray:
        many = self.num_output_tokens > 1
        return (self.e2el_s[many] - self.ttft_s[many]) / (self.num_output_tokens[many] - 1)

    @property
    def makespan_s(self) -> float:
        return float((self.arrival_s + self.e2el_s).max()) if self.arrival_s.size else 0.0


def figures(run: RunLatencies) -> dict[str, float]:
    """``mean_ttft_ms`` ... ``p99_e2el_ms``, throughputs and makespan (vLLM's names where it has one)."""
    values = {"ttft": run.ttft_s, "tpot": run.tpot_s, "e2el": run.e2el_s}
    out: dict[str, float] = {}
    for metric, _ in LATENCIES:
        x = values[metric] if values[metric].size else np.zeros(1)   # vLLM: empty gives zeros
        for stat, p in STATISTICS:
            out[f"{stat}_{metric}_ms"] = float((np.mean(x) if p is None else np.percentile(x, p)) * 1000)
    makespan = run.makespan_s
    out["output_throughput"] = float(run.num_output_tokens.sum()) / makespan if makespan else 0.0
    out["request_throughput"] = run.arrival_s.size / makespan if makespan else 0.0
    out["makespan_s"] = makespan
    return out


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    unit: str
    measured: float
    simulated: float

    @property
    def error_pct(self) -> float:
        if self.measured == 0:
            return 0.0 if self.simulated == 0 else math.nan
        return (self.simulated - self.measured) / abs(self.measured) * 100

    def to_json(self) -> dict:
        return {"metric": self.key, "label": self.label, "unit": self.unit, "measured": self.measured,
                "simulated": self.simulated, "error_pct": self.error_pct}


def compare(measured: RunLatencies, simulated: RunLatencies) -> list[Row]:
    m, s = figures(measured), figures(simulated)
    rows = [Row(f"{stat}_{metric}_ms", f"{label} {stat}", "ms", m[f"{stat}_{metric}_ms"], s[f"{stat}_{metric}_ms"])
            for metric, label in LATENCIES for stat, _ in STATISTICS]
    rows += [Row(key, label, unit, m[key], s[key]) for key, label, unit in RATES]
    return rows


def format_table(rows: Sequence[Row]) -> str:
    header = ("metric", "unit", "measured", "simulated", "error %")
    cells = [header] + [(r.label, r.unit, _num(r.measured), _num(r.simulated), _pct(r.error_pct)) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
             for row in cells]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def _num(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 1000 else f"{value:.0f}"


def _pct(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:+.1f}"
