"""The request-level rules every policy and every fast path calls (scheduler-semantics.md).

Each rule is one function here, called at run time through this module (``rules.samples(...)``),
so a test can change a rule in this one place and see every path follow. Policies combine them
with their own step rules (Phase A/B, decode-first, prefill-only steps); the decode cohort and its
multi-step runs (simulator/fastpath/) batch their arithmetic over many requests but compute it from
these functions, never from a copy.
"""
from __future__ import annotations

from simulator.core.request import Request


def tokens_wanted(request: Request) -> int:
    """Tokens a request asks for before it samples again: num_tokens_with_spec (+ tokens in
    flight under async scheduling) - C (rule 1.2 A1; drafts: speculative rule S1). A decode is
    the case 1, a decode with k drafts 1 + k."""
    return (request.num_prompt_tokens + request.num_output_tokens + request.num_output_placeholders
            + request.num_spec_tokens - request.num_computed_tokens)


def scheduled_spec_tokens(request: Request, computed_before: int, num_new_tokens: int) -> int:
    """Drafts a step verifies: the scheduled tokens past num_tokens, at most the drafts held
    (speculative rule S2: under budget pressure a decode verifies only the drafts it got)."""
    past = (computed_before + num_new_tokens - request.num_prompt_tokens - request.num_output_tokens
            - request.num_output_placeholders)
    return min(past, request.num_spec_tokens) if past > 0 else 0


def samples(request: Request, computed_after: int) -> bool:
    """Whether a step that brings C to ``computed_after`` samples a token for the request at its
    end: its prefill (or re-prefill, or decode) is complete (rule 1.3.1, trap 1). Decided at
    schedule time, since async scheduling advances C before this step's outputs exist."""
    return computed_after >= (request.num_prompt_tokens + request.num_output_tokens
                              + request.num_output_placeholders)


def output_limit(request: Request, max_model_len: int) -> int:
    """The output count at which a request stops (rule 1.3.2 with ignore_eos): max_tokens, or
    the output that fills the context (num_tokens >= max_model_len); at least one, since a
    prompt that fills the context (vLLM V0 admits one) still samples its first token."""
    wanted, room = request.max_output_tokens, max_model_len - request.num_prompt_tokens
    return wanted if wanted <= room else (room if room > 1 else 1)   # no call: a hot path


def is_stopped(request: Request, max_model_len: int) -> bool:
    """The stop test after a token is appended (rule 1.3.2)."""
    return request.num_output_tokens >= output_limit(request, max_model_len)


def kv_tokens_needed(computed: int, num_new_tokens: int, num_hit_tokens: int,
                     max_model_len: int | None) -> int:
    """Tokens whose KV slots a request must hold to compute ``num_new_tokens`` more after C =
    ``computed`` and ``num_hit_tokens`` prefix hits (allocate_slots, rule 2.2 step 1); the newest
    sampled token gets its slot one step later (trap 2)."""
    need = computed + num_hit_tokens + num_new_tokens
    return need if max_model_len is None or need < max_model_len else max_model_len


def decodes_next(request: Request) -> bool:
    """The request's next step is a steady decode: one token wanted, which it samples, with no
    token in flight (the condition for a decode cohort's member; a 1-token last prefill chunk
    is not a decode)."""
    return (request.num_output_tokens > 0 and not request.num_output_placeholders
            and tokens_wanted(request) == 1 and samples(request, request.num_computed_tokens + 1))
