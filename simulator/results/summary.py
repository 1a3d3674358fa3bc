"""The run summary, with the field names and arithmetic of ``vllm bench serve --save-result``.

Per request (semantics 7, traps 14 and 15): start is the request's ``arrival_s``, which the engine
sets to when the client released it (inside any ``--max-concurrency`` semaphore, so client-side
queueing is excluded). TTFT = first token - start; E2EL = last token - start; TPOT = (E2EL -
TTFT)/(out - 1), only for out > 1. Statistics are vLLM's: ``np.mean``, ``np.median``, ``np.std``
(population) and ``np.percentile`` (linear) of seconds, times 1000; empty inputs give 0.0.

ITL pools every gap of every request. When the gaps were not kept, mean and std come from
each request's ``itl_sum_s``/``itl_sq_sum_s2`` (the mean exactly; the std as E[x²] - E[x]², equal
up to float rounding), and median and percentiles of ITL (and ``max_output_tokens_per_s``, which
needs every token time) are **None**: no summary of the sums bounds a quantile well enough to
report one. With every request's gaps kept, all ITL figures are vLLM's exactly.

``max_concurrent_requests`` is the exact in-flight peak over [start, last token), as newer vLLM
computes it (older vLLM counted requests touching the 1-s bucket of peak output, which can exceed
``--max-concurrency``). vLLM's setup fields (``date``, ``backend``, ``model_id``, ...) and, with
``--save-detailed``, its per-request lists (``ttfts``, ``itls``, ...) are results/bench_fields.py's;
that module lists every field vLLM saves and the version it was read from.
"""
from __future__ import annotations

import math
from itertools import accumulate, chain, compress, repeat
from typing import Mapping, Sequence

import numpy as np

from simulator.results.columns import STEP_FIGURES


GOODPUT_METRICS = ("ttft", "tpot", "e2el")


def latency_arrays_s(arrival_s: np.ndarray, first_token_s: np.ndarray, last_token_s: np.ndarray,
                     num_output: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(TTFT, TPOT, E2EL) of finished requests as vLLM's client measures them; TPOT is nan or
    inf where out <= 1 (dropped from TPOT statistics; goodput counts it as 0)."""
    ttft_s, e2el_s = first_token_s - arrival_s, last_token_s - arrival_s
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot_s = (e2el_s - ttft_s) / (num_output - 1)
    return ttft_s, tpot_s, e2el_s


def percentile_key(metric: str, p: float) -> str:
    """vLLM's key: ``p99_ttft_ms``, ``p99.9_itl_ms``."""
    p_word = str(int(p)) if int(p) == p else str(p)
    return f"p{p_word}_{metric}_ms"


def summarize(requests, duration_s: float | None = None, percentiles: Sequence[float] = (99,),
              goodput_slos_ms: Mapping[str, float] | None = None, steps=None,
              max_concurrency: int | None = None, request_rate: float | None = None) -> dict:
    """The summary dict (JSON-ready types) of a run's RequestTable (simulator/results/
    request_table.py) and, if given, its steps (a StepTable or its columns). ``duration_s``
    None: first arrival to last finish.

    ``duration_s`` should be the main run's start (the first release, or t=0 when the first
    request waits its own arrival gap) to the last completion, as vLLM measures it (trap 15).
    ``max_concurrency`` and ``request_rate`` (None: not given; ``math.inf``: all at once) are
    echoed as configured, like vLLM's fields. With ``max_concurrency`` set, client-side queueing
    is reported as vLLM does, and with a finite ``request_rate`` also E2EL including it.
    """
    pcts = _check_percentiles(percentiles)
    slos = _check_slos(goodput_slos_ms)
    lat = _Latencies(requests.arrays(), requests.gaps_of_finished())
    dur_s = _duration_s(lat, duration_s)
    result: dict = {"duration": dur_s, "completed": lat.num_done, "failed": 0,
                    "num_prompts": len(requests), "max_concurrency": max_concurrency,
                    "request_rate": request_rate,
                    "request_goodput": _per_s(lat.num_good(slos), dur_s) if slos else None}
    result.update(_throughputs(lat, dur_s))
    for metric, values in (("ttft", lat.ttft_s), ("tpot", lat.tpot_s), ("e2el", lat.e2el_s)):
        result.update(_stats_ms(metric, values, pcts))
    gaps_s = _pooled_gaps_s(lat)
    result.update(_stats_ms("itl", gaps_s, pcts) if gaps_s is not None
                  else _itl_stats_from_sums_ms(lat, pcts))
    result["max_output_tokens_per_s"] = _peak_output_tokens_per_s(lat)
    result["max_concurrent_requests"] = _peak_concurrency(lat)
    if max_concurrency is not None:
        with_e2el = request_rate is not None and math.isfinite(request_rate)
        result.update(_client_queue_stats_ms(lat, pcts, with_e2el))
    result.update(num_unfinished=len(requests) - lat.num_done,
                  num_preemptions=int(lat.arrays["num_preemptions"].sum()),
                  max_itl_ms=max(lat.arrays["max_itl_s"].tolist(), default=0.0) * 1000)
    result.update(_step_fields(steps))
    return result


class _Latencies:
    """Arrays over completed requests, in id order."""

    def __init__(self, arrays: dict[str, np.ndarray], gaps: list | None):
        self.arrays, self.gaps = arrays, gaps
        self.num_prompt, self.num_output = arrays["num_prompt_tokens"], arrays["num_output_tokens"]
        self.num_done = len(self.num_output)
        self.num_gaps = np.maximum(self.num_output - 1, 0)
        self.arrival_s = arrays["arrival_s"]
        self.ttft_s, all_tpot_s, self.e2el_s = latency_arrays_s(
            self.arrival_s, arrays["first_token_s"], arrays["last_token_s"], self.num_output)
        has_tpot = self.num_output > 1     # TPOT only for out > 1 ...
        self.tpot_s = all_tpot_s[has_tpot]
        # ... and goodput treats out <= 1 as TPOT 0 (vLLM's all_tpots).
        self.all_tpot_s = np.where(has_tpot, all_tpot_s, 0.0)

    def num_good(self, slos_ms: dict[str, float]) -> int:
        values = {"ttft": self.ttft_s, "tpot": self.all_tpot_s, "e2el": self.e2el_s}
        good = np.ones(len(self.ttft_s), dtype=bool)
        for metric, slo_ms in slos_ms.items():
            good &= values[metric] <= slo_ms / 1000   # vLLM compares in seconds, value <= SLO
        return int(good.sum())

    def gaps_of_requests_with_gaps(self) -> list | None:
        """Every kept gap list of a request with gaps, in id order; None if any was not kept."""
        has_gaps = (self.num_gaps > 0).tolist()
        if not any(has_gaps):
            return []
        if self.gaps is None:
            return None
        with_gaps = list(compress(self.gaps, has_gaps))
        return None if any(g is None for g in with_gaps) else with_gaps


def _check_percentiles(percentiles: Sequence[float]) -> tuple[float, ...]:
    for p in percentiles:
        if not 0 <= p <= 100:
            raise ValueError(f"percentiles: {p!r} must be within [0, 100]")
    return tuple(percentiles)


def _check_slos(slos_ms: Mapping[str, float] | None) -> dict[str, float]:
    slos = dict(slos_ms or {})
    for metric, slo in slos.items():
        if metric not in GOODPUT_METRICS:
            raise ValueError(f"goodput_slos_ms: key {metric!r} must be one of {GOODPUT_METRICS}")
        if not (isinstance(slo, (int, float)) and slo > 0):
            raise ValueError(f"goodput_slos_ms.{metric}: {slo!r} must be a positive number of ms")
    return slos


def _duration_s(lat: _Latencies, duration_s: float | None) -> float:
    if duration_s is None:
        if not lat.num_done:
            return 0.0
        return float(lat.arrays["finish_s"].max() - lat.arrival_s.min())
    if not (math.isfinite(duration_s) and duration_s >= 0) or (lat.num_done and duration_s == 0):
        raise ValueError(f"duration_s: {duration_s!r} must be finite and > 0 "
                         "(>= 0 with no completed request)")
    return float(duration_s)


def _per_s(count: float, duration_s: float) -> float:
    return count / duration_s if duration_s > 0 else 0.0


def _throughputs(lat: _Latencies, dur_s: float) -> dict:
    total_in, total_out = int(lat.num_prompt.sum()), int(lat.num_output.sum())
    return {"total_input_tokens": total_in, "total_output_tokens": total_out,
            "request_throughput": _per_s(len(lat.ttft_s), dur_s),
            "output_throughput": _per_s(total_out, dur_s),
            "total_token_throughput": _per_s(total_in + total_out, dur_s)}


def _stats_ms(metric: str, values_s: np.ndarray, pcts: tuple[float, ...]) -> dict:
    x = values_s if len(values_s) else 0   # vLLM's ``values or 0``: empty gives zeros
    stats = {f"mean_{metric}_ms": float(np.mean(x) * 1000),
             f"median_{metric}_ms": float(np.median(x) * 1000),
             f"std_{metric}_ms": float(np.std(x) * 1000)}
    for p in pcts:
        stats[percentile_key(metric, p)] = float(np.percentile(x, p) * 1000)
    return stats


def _pooled_gaps_s(lat: _Latencies) -> np.ndarray | None:
    """Every gap of every request in id order (vLLM's ``itls``); None if any was not kept."""
    with_gaps = lat.gaps_of_requests_with_gaps()
    if with_gaps is None:
        return None
    return np.fromiter(chain.from_iterable(with_gaps), np.float64, sum(map(len, with_gaps)))


def _itl_stats_from_sums_ms(lat: _Latencies, pcts: tuple[float, ...]) -> dict:
    """Pooled mean and population std from the per-request sums; quantiles unknown (None).
    The sums are Python's ``sum`` over the requests in id order."""
    n = int(lat.num_gaps.sum())
    t = lat.arrays
    itl_sums_s = (t["last_token_s"] - t["first_token_s"]).tolist()   # gaps telescope
    mean_s = sum(itl_sums_s) / n
    var_s2 = max(sum(t["itl_sq_sum_s2"].tolist()) / n - mean_s * mean_s, 0.0)
    stats = {"mean_itl_ms": mean_s * 1000, "median_itl_ms": None,
             "std_itl_ms": math.sqrt(var_s2) * 1000}
    stats.update({percentile_key("itl", p): None for p in pcts})
    return stats


def _peak_output_tokens_per_s(lat: _Latencies) -> float | None:
    """Most tokens in one 1-s bucket from the first start, as vLLM counts (needs the gaps)."""
    if not lat.num_done:
        return 0.0
    if lat.gaps_of_requests_with_gaps() is None:
        return None
    t0_s = float(lat.arrival_s.min())
    num_buckets = max(int(np.ceil(float((lat.arrival_s + lat.e2el_s).max()) - t0_s)) + 1, 1)
    # Token times as vLLM rebuilds them: start + ttft, then += each gap in turn (sequentially,
    # so the floats match bit for bit; accumulate() runs in C).
    times: list[float] = []
    kept = lat.gaps if lat.gaps is not None else repeat(None)
    for gaps, start_s, ttft_s in zip(kept, lat.arrival_s.tolist(), lat.ttft_s.tolist()):
        times.extend(accumulate(gaps or (), initial=start_s + ttft_s))
    buckets = (np.array(times, dtype=np.float64) - t0_s).astype(np.int64)
    in_range = buckets[(buckets >= 0) & (buckets < num_buckets)]
    if num_buckets <= max(len(in_range), 1 << 20):   # counters cost no more than the tokens do
        return float(np.bincount(in_range, minlength=num_buckets).max())
    # A long, sparse run: count only the seconds that hold tokens (the same maximum).
    counts = np.unique(in_range, return_counts=True)[1]
    return float(counts.max()) if counts.size else 0.0


def _peak_concurrency(lat: _Latencies) -> int:
    """Exact peak of requests in flight over half-open [start, start + E2EL) (newer vLLM)."""
    times = np.concatenate((lat.arrival_s, lat.arrival_s + lat.e2el_s))
    deltas = np.concatenate((np.ones(len(lat.arrival_s), np.int64),
                             -np.ones(len(lat.arrival_s), np.int64)))
    order = np.lexsort((deltas, times))   # at equal times a departure (-1) goes first
    in_flight = np.cumsum(deltas[order])
    return int(in_flight.max()) if len(in_flight) else 0


def _client_queue_stats_ms(lat: _Latencies, pcts: tuple[float, ...], with_e2el: bool) -> dict:
    """vLLM's extra blocks under ``--max-concurrency``: time held by the client's semaphore."""
    queue_s = lat.arrays["client_queue_s"]
    stats = _stats_ms("client_queue_time", queue_s, pcts)
    if with_e2el:
        stats.update(_stats_ms("e2el_including_client_queue", lat.e2el_s + queue_s, pcts))
    return stats


def _step_fields(steps) -> dict:
    """Engine figures over simulated steps (StepTable.stats); queue and KV means are weighted
    by step time."""
    if steps is None:
        return dict.fromkeys(STEP_FIGURES)
    return steps.stats()
