"""Multi-turn chat sessions: conversations whose every turn resends the whole history.

``workload.sessions`` turns a workload into conversations. Sessions arrive by ``arrival`` (open
loop) and ``num_requests`` counts them (or ``duration_s`` bounds their starts). A session has
``num_turns`` turns (a length distribution); turn k's prompt is turn k-1's prompt, its answer and
a new user message of ``prompt_len`` tokens (the first turn: an optional shared system prompt and
the first message), and turn k is sent ``think_time_s`` after turn k-1's answer ends (closed loop
within the session). Answers are the deterministic ids the prefix cache hashes
(simulator/kv/block_hashes.py), so a later turn shares the blocks of its history.

Draw order: turns per session, then every turn's user and answer lengths (session by session),
then the session starts, then the system prompt and user messages' token ids.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import numpy as np

from typing import Union

from cost_models.options import OPTIONS_CONFIG, Constraint, NonNegativeInt
from simulator.kv.block_hashes import answer_key, answer_token_ids
from simulator.workload.lengths import FixedLength, UniformLength

USER_VOCAB = 32_000   # user messages' token ids, drawn uniformly (a Llama-2-sized vocabulary)


@dataclass(frozen=True, eq=False)
class SessionColumns:
    """Per request of a session workload, in the trace's order (session by session)."""
    turn: np.ndarray      # int64, 1 for a session's first turn
    parent: np.ndarray    # int64, the request whose answer this turn follows; -1 for a first turn
    think_s: np.ndarray   # float64, delay after the parent's last token before this turn is sent

    def __len__(self) -> int:
        return int(self.turn.size)


@dataclass(frozen=True)
class SessionsSpec:
    """``num_turns``: fixed or uniform (a count >= 1); ``think_time_s``: the user's
    pause between an answer and the next message; ``system_prompt_len``: tokens every session's
    first prompt starts with (shared, so cached once)."""
    num_turns: Annotated[Union[FixedLength, UniformLength], Constraint(discriminator="kind")]
    think_time_s: Annotated[float, Constraint(strict=True, ge=0, allow_inf_nan=False)] = 0.0
    system_prompt_len: NonNegativeInt = 0
    __pydantic_config__ = OPTIONS_CONFIG

    def __post_init__(self) -> None:
        if not math.isfinite(self.think_time_s) or self.think_time_s < 0:
            raise ValueError(f"SessionsSpec.think_time_s: {self.think_time_s!r} must be a finite "
                             f"number >= 0")


@dataclass(frozen=True, eq=False)
class SessionRows:
    """Every turn of every session, as the trace's columns (``prompt_token_ids`` None where a
    prompt outgrows the limit the rows were made for: such a workload is refused, unbuilt)."""
    starts_s: np.ndarray
    num_prompt_tokens: np.ndarray
    prompt_token_ids: tuple[tuple[int, ...], ...] | None
    max_output_tokens: np.ndarray
    columns: SessionColumns


def session_prompt_lens(system_len: int, num_turns: np.ndarray, user_lens: np.ndarray,
                        output_lens: np.ndarray) -> np.ndarray:
    """Each turn's prompt length: the system prompt, the session's messages so far and the
    answers before this turn (turn k resends turn k-1's prompt and answer)."""
    first = np.repeat(np.cumsum(num_turns) - num_turns, num_turns)   # each row's session start
    users = np.cumsum(user_lens)
    users = users - (users[first] - user_lens[first])                  # messages up to each row
    answers = np.cumsum(output_lens) - output_lens                     # answers before each row
    answers = answers - answers[first]
    return (system_len + users + answers).astype(np.int64)


def session_rows(spec: SessionsSpec, num_turns: np.ndarray, user_lens: np.ndarray,
                 output_lens: np.ndarray, starts_s: np.ndarray, rng: np.random.Generator,
                 max_prompt_tokens: int | None = None) -> SessionRows:
    """The turns of sessions starting at ``starts_s`` with ``num_turns`` turns each; ``user_lens``
    and ``output_lens`` give every turn, session by session. Past ``max_prompt_tokens`` (the
    model's context) no prompt's token ids are built: resent histories grow with the square of
    the turns, and no engine runs such a workload."""
    system = tuple(rng.integers(0, USER_VOCAB, spec.system_prompt_len).tolist())
    flat = rng.integers(0, USER_VOCAB, int(user_lens.sum())).tolist()
    lens = session_prompt_lens(spec.system_prompt_len, num_turns, user_lens, output_lens)
    build = max_prompt_tokens is None or lens.max(initial=0) <= max_prompt_tokens
    ids, turn, parent, arrival, used = [], [], [], [], 0
    row = 0
    for session, count in enumerate(num_turns.tolist()):
        prompt = system
        for k in range(count):
            n_user = int(user_lens[row])
            message = tuple(flat[used:used + n_user])
            used += n_user
            if build:
                if k:
                    previous = ids[-1]
                    prompt = previous + answer_token_ids(answer_key(previous), 0,
                                                         int(output_lens[row - 1]))
                ids.append(prompt + message)
            turn.append(k + 1)
            parent.append(row - 1 if k else -1)
            arrival.append(starts_s[session])
            row += 1
    turn_arr = np.asarray(turn, np.int64)
    think = np.where(turn_arr > 1, float(spec.think_time_s), 0.0)
    columns = SessionColumns(turn_arr, np.asarray(parent, np.int64), think)
    return SessionRows(np.asarray(arrival, np.float64), lens, tuple(ids) if build else None,
                       np.asarray(output_lens, np.int64), columns)
