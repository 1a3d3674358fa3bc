"""A session workload's figures turn by turn: what prefix caching buys a chat service as its
conversations grow (later turns resend their history, so their hit rate should climb)."""
from __future__ import annotations

import numpy as np


def by_turn(turn: np.ndarray, columns: dict[str, np.ndarray]) -> list[dict]:
    """Per turn (1 = a session's first message), over its finished requests: how many, their
    mean TTFT and the prefix-cache hit rate of their first admissions (cached over prompt
    tokens, as vLLM's prefix_cache_hits over queries)."""
    done = np.isfinite(columns["first_token_s"])
    rows = []
    for k in np.unique(turn).tolist():
        mine = (turn == k) & done
        prompt = int(columns["num_prompt_tokens"][mine].sum())
        cached = int(columns["num_cached_tokens"][mine].sum())
        ttft_s = columns["first_token_s"][mine] - columns["arrival_s"][mine]
        rows.append({"turn": int(k), "num_requests": int(mine.sum()),
                     "mean_ttft_ms": float(ttft_s.mean() * 1000) if mine.any() else None,
                     "prefix_cache_hit_rate": cached / prompt if prompt else 0.0})
    return rows
