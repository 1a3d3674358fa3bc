"""Mixture of experts: how many experts a step's tokens touch, and a measured expert layer read there.

Each of a step's T tokens is routed to its top-k of E experts. Taking every token's k experts as
a uniform draw without repeats, independent across tokens, a given expert is missed by one token
with probability 1 - k/E and by all T with (1 - k/E)^T, so the expected number of distinct
experts the step reads is

    E x (1 - (1 - k/E)^T)

which is k for one token and tends to E as T grows: a decode step of a few sequences reads a
fraction of the experts, a long prefill all of them. Real routers are skewed towards popular
experts, which touches fewer distinct experts than this; the uniform draw is the upper bound the
weight reads follow without a routing trace.

Expert FLOPs follow the routed tokens (T x k expert passes), not the distinct experts. Tensor
parallelism splits every expert N ways, so each rank does 1/N of the passes and reads 1/N of each
touched expert. Expert parallelism (vLLM's --enable-expert-parallel, docs/expert-parallel-semantics.md)
places E/N whole experts on each rank instead, and a layer waits for its busiest rank: the
expected most passes and most distinct experts over the ranks (expert_load), which the mean-field
count of tensor parallelism never exceeds.
"""
from __future__ import annotations

import functools
import math
from bisect import bisect_right

import numpy as np


def expected_distinct_experts(num_routed_tokens, num_experts: int, top_k: int):
    """E (1 - (1 - k/E)^T): the expected distinct experts T tokens touch, each routed to k of E; 0
    for no tokens. ``num_routed_tokens`` is a number or a numpy column of them (the physics fit's)."""
    if num_experts <= 0:
        return 0.0 * num_routed_tokens
    miss = (1.0 - top_k / num_experts) ** num_routed_tokens
    return num_experts * (1.0 - miss) * (num_routed_tokens > 0)


def expert_load(num_tokens: int, num_experts: int, top_k: int,
                expert_parallel_ranks: int = 1) -> tuple[float, float]:
    """The (routed tokens, distinct experts) one MoE layer's experts are priced at: a rank does
    top_k x routed tokens expert passes and reads distinct experts, each at one expert's size over
    the tensor-parallel degree.

    Experts split over the ranks (tensor parallel; ``expert_parallel_ranks`` 1): the T tokens and
    E (1 - (1 - k/E)^T) experts. Experts whole on N ranks: a rank's passes are Binomial(T k, 1/N)
    and its touched experts Binomial(E/N, 1 - (1 - k/E)^T), taken as independent across ranks; the
    layer waits for the busiest, so N x the expected maximum of each (the passes over k, as tokens).
    """
    ranks = expert_parallel_ranks
    distinct = expected_distinct_experts(num_tokens, num_experts, top_k)
    if ranks <= 1 or num_tokens <= 0:
        return num_tokens, distinct
    hit = distinct / num_experts
    return (ranks * expected_max_binomial(num_tokens * top_k, 1.0 / ranks, ranks) / top_k,
            ranks * expected_max_binomial(num_experts // ranks, hit, ranks))


@functools.lru_cache(maxsize=1 << 14)
def expected_max_binomial(trials: int, p: float, draws: int) -> float:
    """E[max of ``draws`` independent Binomial(trials, p)] = sum over x >= 1 of 1 - F(x - 1)^draws,
    F the binomial CDF, summed where it is neither 0 nor 1 (12 standard deviations about the mean;
    the mass beyond is below 1e-30)."""
    if trials <= 0 or p <= 0.0:
        return 0.0
    if p >= 1.0 or draws == 1:
        return trials * p
    mean, sd = trials * p, math.sqrt(trials * p * (1.0 - p))
    lo, hi = max(0, math.floor(mean - 12 * sd)), min(trials, math.ceil(mean + 12 * sd))
    x = np.arange(lo, hi + 1)
    log_pmf = (math.lgamma(trials + 1) - np.array([math.lgamma(k + 1) + math.lgamma(trials - k + 1) for k in x])
               + x * math.log(p) + (trials - x) * math.log1p(-p))
    cdf = np.minimum(np.cumsum(np.exp(log_pmf)), 1.0)   # F(lo) .. F(hi)
    return lo + float(np.sum(1.0 - cdf[:-1] ** draws))  # x <= lo: certain; x > hi: none


class ExpertTable:
    """One MoE layer's measured time against (tokens, activated experts), read at a step's tokens
    and its expected distinct experts (LLMServingSim's ``moe.csv``).

    Within a token row the time is linear in the activated experts (each one more expert's weights
    read), extended past the row's last points the same way; between rows it is linear in the
    tokens; past the last row it grows in proportion to the tokens, as ``profiled.Table1D`` does.
    """

    def __init__(self, tokens, activated, seconds, num_experts: int, top_k: int):
        rows: dict[float, list[tuple[float, float]]] = {}
        for t, a, s in zip(tokens, activated, seconds):
            rows.setdefault(float(t), []).append((float(a), float(s)))
        if len(rows) < 2 or num_experts <= 0 or not 0 < top_k <= num_experts:
            raise ValueError(f"moe table: needs >= 2 token rows and 0 < top_k <= num_experts "
                             f"(got {len(rows)} rows, top_k {top_k}, {num_experts} experts)")
        self.tokens = sorted(rows)
        self.rows = [sorted(rows[t]) for t in self.tokens]
        self.num_experts, self.top_k = num_experts, top_k

    def time_s(self, num_tokens: int) -> float:
        """One layer's expert time for a step of ``num_tokens`` routed tokens."""
        if num_tokens <= 0:
            return 0.0
        return self.time_at(num_tokens, expected_distinct_experts(num_tokens, self.num_experts, self.top_k))

    def time_at(self, num_tokens: float, activated: float) -> float:
        """One layer's expert time at ``num_tokens`` tokens that activate ``activated`` experts."""
        ts = self.tokens
        if num_tokens >= ts[-1]:
            return _row_time(self.rows[-1], activated) * num_tokens / ts[-1]
        i = bisect_right(ts, num_tokens)
        if i == 0:
            return _row_time(self.rows[0], activated)
        t0, t1 = ts[i - 1], ts[i]
        y0, y1 = _row_time(self.rows[i - 1], activated), _row_time(self.rows[i], activated)
        return y0 + (y1 - y0) * (num_tokens - t0) / (t1 - t0)

    def to_json(self) -> dict:
        points = [(t, a, s) for t, row in zip(self.tokens, self.rows) for a, s in row]
        return {"tokens": [p[0] for p in points], "activated_experts": [p[1] for p in points],
                "seconds": [p[2] for p in points], "num_experts": self.num_experts, "top_k": self.top_k}

    @classmethod
    def from_json(cls, entry: dict) -> "ExpertTable":
        return cls(entry["tokens"], entry["activated_experts"], entry["seconds"],
                   int(entry["num_experts"]), int(entry["top_k"]))


def _row_time(row: list[tuple[float, float]], activated: float) -> float:
    """A token row's time at ``activated`` experts: linear through its two nearest points."""
    if len(row) == 1:
        return row[0][1]
    i = min(max(bisect_right([a for a, _ in row], activated), 1), len(row) - 1)
    (a0, y0), (a1, y1) = row[i - 1], row[i]
    return y0 + (y1 - y0) * (activated - a0) / (a1 - a0)
