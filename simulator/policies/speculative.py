"""Speculative decoding as vLLM V1 schedules it (docs/speculative-decoding-semantics.md).

A request that sampled holds k drafts (``Request.num_spec_tokens``); its next step asks for them
with its own token (``rules.tokens_wanted``, rule S1); the step verifies the drafts it scheduled
(rule S2); after it, one draw from the run's generator says how many were accepted, C drops by
the rejected ones and 1 + accepted tokens are emitted as one chunk, none past the stop (S3, S4).
A preemption drops the drafts with the KV (S5, ``Request.reset_for_recompute``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from cost_models.options import NonNegativeFloat, PositiveInt, options_config
from simulator.core import rules
from simulator.core.request import Request

# vLLM allocates KV for the drafter's next proposals ahead of time for these methods
# (Scheduler.num_lookahead_tokens: use_eagle() or uses_draft_model()); ngram proposes on the CPU.
_LOOKAHEAD_METHODS = ("draft_model", "eagle", "mtp")
MAX_SPEC_TOKENS = 64   # per-position counters and per-pass pricing grow with k


def _invalid(name: str, value, allowed: str) -> ValueError:
    return ValueError(f"SpeculativeOptions.{name}: {value!r} is not allowed; must be {allowed}")


@options_config
@dataclass(frozen=True)
class SpeculativeOptions:
    """``engine.speculative``: vLLM's speculative_config, with the acceptance the run assumes."""
    method: Literal["ngram", "draft_model", "eagle", "mtp"]
    num_speculative_tokens: PositiveInt
    # vLLM's per-position acceptance rates (the fraction of drafts whose position i was accepted,
    # so non-increasing), or its mean acceptance length (1 + accepted per draft): give one.
    acceptance_rates: tuple[float, ...] | None = None
    mean_acceptance_length: float | None = None
    draft_model: str | None = None          # method draft_model: the drafter's catalog name
    proposer_cpu_s: NonNegativeFloat = 0.0  # CPU time of each step that proposes (ngram's cost)

    def __post_init__(self) -> None:
        k = self.num_speculative_tokens
        if isinstance(k, int) and k > MAX_SPEC_TOKENS:
            raise _invalid("num_speculative_tokens", k, f"at most {MAX_SPEC_TOKENS}")
        if (self.acceptance_rates is None) == (self.mean_acceptance_length is None):
            raise _invalid("acceptance_rates", self.acceptance_rates,
                           "given alone, or mean_acceptance_length instead (one of the two)")
        if self.acceptance_rates is not None:
            self._check_rates(k)
        elif not 1.0 <= self.mean_acceptance_length <= 1.0 + k:
            raise _invalid("mean_acceptance_length", self.mean_acceptance_length,
                           f"between 1 and 1 + num_speculative_tokens ({1 + k})")
        if (self.method == "draft_model") != (self.draft_model is not None):
            raise _invalid("draft_model", self.draft_model,
                           "a model name with method draft_model, and only then")

    def _check_rates(self, k: int) -> None:
        rates = self.acceptance_rates
        if len(rates) != k:
            raise _invalid("acceptance_rates", list(rates),
                           f"one rate per draft position ({k} of them)")
        if any(not 0.0 <= r <= 1.0 for r in rates) or any(b > a for a, b in zip(rates, rates[1:])):
            raise _invalid("acceptance_rates", list(rates),
                           "rates in [0, 1], non-increasing (position i + 1 is accepted only "
                           "after position i)")

    @property
    def position_rates(self) -> tuple[float, ...]:
        """P(at least i + 1 drafts accepted) per position i: given, or from the mean acceptance
        length as i.i.d. per-token acceptance a (rates a, a², ...; rule S3)."""
        if self.acceptance_rates is not None:
            return tuple(float(r) for r in self.acceptance_rates)
        a = _iid_rate(self.mean_acceptance_length - 1.0, self.num_speculative_tokens)
        return tuple(a ** (i + 1) for i in range(self.num_speculative_tokens))

    @property
    def num_lookahead_tokens(self) -> int:
        return self.num_speculative_tokens if self.method in _LOOKAHEAD_METHODS else 0


def _iid_rate(mean_accepted: float, k: int) -> float:
    """The per-token acceptance a with a + a² + ... + a^k = ``mean_accepted`` (bisection: the
    sum grows with a on [0, 1])."""
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if sum(mid ** (i + 1) for i in range(k)) < mean_accepted:
            lo = mid
        else:
            hi = mid
    return hi if mean_accepted >= k else lo


@dataclass
class SpecDecodingStats:
    """vLLM's SpecDecodingStats summed over the run (vllm/v1/spec_decode/metrics.py)."""
    num_spec_tokens: int
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_accepted_tokens_per_pos: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.num_accepted_tokens_per_pos = [0] * self.num_spec_tokens

    def observe_draft(self, num_draft_tokens: int, num_accepted_tokens: int) -> None:
        self.num_drafts += 1
        self.num_draft_tokens += num_draft_tokens
        self.num_accepted_tokens += num_accepted_tokens
        for i in range(num_accepted_tokens):
            self.num_accepted_tokens_per_pos[i] += 1

    def add(self, other: "SpecDecodingStats") -> None:
        self.num_drafts += other.num_drafts
        self.num_draft_tokens += other.num_draft_tokens
        self.num_accepted_tokens += other.num_accepted_tokens
        for i, n in enumerate(other.num_accepted_tokens_per_pos):
            self.num_accepted_tokens_per_pos[i] += n

    def summary(self) -> dict:
        """vLLM's counters (``vllm:spec_decode_*``) and the figures its logger derives."""
        drafts, drafted, accepted = self.num_drafts, self.num_draft_tokens, self.num_accepted_tokens
        return {
            "spec_decode_num_drafts": drafts,
            "spec_decode_num_draft_tokens": drafted,
            "spec_decode_num_accepted_tokens": accepted,
            "spec_decode_num_accepted_tokens_per_pos": list(self.num_accepted_tokens_per_pos),
            "spec_decode_acceptance_rate": accepted / drafted if drafted else None,
            "spec_decode_mean_acceptance_length": 1 + accepted / drafts if drafts else 1.0,
            "spec_decode_acceptance_rate_per_pos":
                [n / drafts if drafts else None for n in self.num_accepted_tokens_per_pos],
        }


class SpecDecoder:
    """A scheduler's speculative-decoding state: the acceptance draws and the stats."""

    def __init__(self, options: SpeculativeOptions, rng):
        self.num_spec_tokens = options.num_speculative_tokens
        self.num_lookahead_tokens = options.num_lookahead_tokens
        self._rates = options.position_rates
        self.rng = rng        # the run's generator, continued after the workload's draws
        self.stats = SpecDecodingStats(self.num_spec_tokens)

    def mark_scheduled(self, request: Request, num_new_tokens: int) -> None:
        """After ``batch.add``: the drafts this step verifies (rule S2); the rest are dropped,
        as vLLM empties spec_token_ids once a request is scheduled."""
        if request.num_spec_tokens:
            request.num_scheduled_spec_tokens = rules.scheduled_spec_tokens(
                request, request.num_computed_tokens - num_new_tokens, num_new_tokens)
            request.num_spec_tokens = 0

    def verify(self, request: Request) -> int:
        """The tokens a sampling step gives the request: 1 + its accepted drafts, from one draw;
        C drops by the rejected drafts, whose slots the next step's tokens reuse (rule S3)."""
        num_drafts = request.num_scheduled_spec_tokens
        if not num_drafts:
            return 1
        request.num_scheduled_spec_tokens = 0
        u, rates = self.rng.random(), self._rates
        accepted = 0
        while accepted < num_drafts and u < rates[accepted]:
            accepted += 1
        request.num_computed_tokens -= num_drafts - accepted
        self.stats.observe_draft(num_drafts, accepted)
        return 1 + accepted

    def propose(self, request: Request) -> None:
        """A request that sampled and goes on holds k new drafts for its next step (rule S1)."""
        request.num_spec_tokens = self.num_spec_tokens
