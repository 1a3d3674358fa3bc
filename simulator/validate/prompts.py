"""Prompt token ids for a measured run, so the simulated prefix cache sees the real prompts.

A prompts file is JSONL, one request a line, holding its token ids as ``input_tok_ids``
(LLMServingSim's workload files, e.g. the dataset the bench replayed) or ``prompt_token_ids``.
Lines are the dataset's requests in order, so a request's line is its index in the workload it
was sent from: LLMServingSim's ``bench-<i>`` request ids, or a bench file's result index (``vllm
bench serve`` lists results in the order of its dataset, failed requests included). Every matched
prompt must have the length the run measured; a longer file is fine (a bench may send its first N).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np

ID_KEYS = ("input_tok_ids", "prompt_token_ids")


def read_prompts(path: Path, option: str = "--prompts") -> list[tuple[int, ...] | None]:
    """Each line's token ids (None where the line holds none)."""
    if not path.is_file():
        raise ValueError(f"{option}: {str(path)!r} is not a file")
    prompts = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{option}: {path} line {number} is not JSON ({exc})") from None
        ids = next((row[k] for k in ID_KEYS if isinstance(row, dict) and k in row), None)
        prompts.append(None if ids is None else _token_ids(ids, option, path, number))
    return prompts


def _token_ids(ids, option: str, path: Path, number: int) -> tuple[int, ...]:
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise ValueError(f"{option}: {path} line {number}: token ids must be a list of integers")
    return tuple(ids)


def match_prompts(prompts: Sequence[tuple[int, ...] | None], num_prompt_tokens: np.ndarray,
                  index: np.ndarray | None, what: str) -> tuple[tuple[int, ...], ...]:
    """Request i's prompt is ``prompts[index[i]]`` (``index`` None: ``prompts[i]``); a missing
    prompt or a length that disagrees with the run is a ValueError naming the first one."""
    lines = np.arange(len(num_prompt_tokens)) if index is None else index
    if lines.size and int(lines.max()) >= len(prompts):
        raise ValueError(f"{what}: holds {len(prompts)} prompts, the run needs {int(lines.max()) + 1} "
                         f"(one per request, in the dataset's order)")
    matched = []
    for request, line in enumerate(lines.tolist()):
        ids, measured = prompts[line], int(num_prompt_tokens[request])
        if ids is None or len(ids) != measured:
            found = "no token ids" if ids is None else f"{len(ids)} token ids"
            raise ValueError(f"{what}: prompt {line} has {found} but the run's request {request} "
                             f"had {measured} prompt tokens (prompts are matched in the dataset's order)")
        matched.append(ids)
    return tuple(matched)
