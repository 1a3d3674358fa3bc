"""Each step's true shape from vLLM's iteration log and the requests' own lengths.

The log says per step only how many requests prefilled and decoded and how many tokens the
prefills computed. Knowing each request's prompt and output length, in arrival order, the schedule
is replayed: a first-come-first-served prefill queue (vLLM V1 schedules running requests before
waiting ones), so every prefill but the step's last takes the rest of its prompt and the last takes
what is left of the step's prefill tokens; a request whose prompt is done samples its first token
and decodes from then on, its context its prompt plus what it has generated, until its output
length. Chunk offsets are the request's tokens computed so far.

Prefix caching hides the cached tokens from the log: a request that starts with c cached tokens
computes only prompt - c. The next step's decode count says how many prefills finished; where one
more finished than the computed tokens could complete, the step's last prefill (which began this
step) finished, the rest of its prompt cached. Cached prompts of the step's other prefills cannot be
told from the log (their tokens would be read as the last one's chunk).
"""
from __future__ import annotations

from dataclasses import dataclass

from cost_models.batch_shape import BatchShape


@dataclass(frozen=True)
class LoggedStep:
    prefill_reqs: int
    prefill_tokens: int
    decode_reqs: int


@dataclass
class _Request:
    prompt_tokens: int
    output_tokens: int
    done_tokens: int = 0      # prompt tokens in the KV cache (computed or cached)
    generated: int = 0


def reconstruct_shapes(steps: list[LoggedStep], lengths: list[tuple[int, int]]) -> tuple[list[BatchShape], int]:
    """The BatchShape of every step, and the prompt tokens found cached; ``lengths`` is
    (prompt_tokens, output_tokens) of each request in arrival order."""
    waiting = [_Request(p, o) for p, o in lengths]
    waiting.reverse()   # pop() takes the earliest
    prefilling: list[_Request] = []
    decoding: list[_Request] = []
    shapes, cached_total = [], 0
    for i, step in enumerate(steps):
        if step.decode_reqs > len(decoding):
            raise ValueError(f"iteration log: step {i}: {step.decode_reqs} generation requests, but only "
                             f"{len(decoding)} requests have finished their prompt (preemption is not replayed)")
        while len(prefilling) < step.prefill_reqs:
            if not waiting:
                raise ValueError(f"iteration log: step {i}: {step.prefill_reqs} context requests, more than "
                                 f"the requests given")
            prefilling.append(waiting.pop())
        scheduled = prefilling[:step.prefill_reqs]
        chunks = _chunks(i, scheduled, step.prefill_tokens)
        following = steps[i + 1].decode_reqs if i + 1 < len(steps) else None
        cached_total += _infer_cached(scheduled, chunks, following, decoding, step.decode_reqs)
        new, ctx, samples = [], [], []
        for request, chunk in zip(scheduled, chunks):
            new.append(chunk)
            ctx.append(request.done_tokens)
            request.done_tokens += chunk
            samples.append(request.done_tokens == request.prompt_tokens)
        for request in decoding[:step.decode_reqs]:
            new.append(1)
            ctx.append(request.prompt_tokens + request.generated - 1)
            samples.append(True)
        shapes.append(BatchShape.of(new, ctx, samples))
        _advance(prefilling, decoding, step.decode_reqs)
    return shapes, cached_total


def _chunks(i: int, scheduled: list[_Request], tokens: int) -> list[int]:
    """Every prefill but the last computes the rest of its prompt; the last what the step has left."""
    if not scheduled:
        if tokens:
            raise ValueError(f"iteration log: step {i}: {tokens} context tokens and no context request")
        return []
    rest = [r.prompt_tokens - r.done_tokens for r in scheduled]
    last = tokens - sum(rest[:-1])
    if not 0 < last <= rest[-1]:
        raise ValueError(f"iteration log: step {i}: {tokens} context tokens do not fit the prompts being "
                         f"prefilled (their remaining tokens: {rest})")
    return rest[:-1] + [last]


def _infer_cached(scheduled: list[_Request], chunks: list[int], following: int | None,
                  decoding: list[_Request], num_decodes: int) -> int:
    """Cached prompt tokens of the step's last prefill, from the next step's decode count: one more
    decode than the computed tokens can finish means its prompt finished, the rest of it cached
    (put before its chunk: a cached prefix is the start of a prompt)."""
    if following is None or not scheduled:
        return 0
    leaving = sum(1 for r in decoding[:num_decodes] if r.generated + 1 >= r.output_tokens)
    finishing = sum(1 for r, c in zip(scheduled, chunks)
                    if r.done_tokens + c == r.prompt_tokens and r.output_tokens > 1)
    last = scheduled[-1]
    missing = last.prompt_tokens - last.done_tokens - chunks[-1]
    if following != len(decoding) - leaving + finishing + 1 or not missing or last.done_tokens \
            or last.output_tokens == 1:
        return 0
    last.done_tokens = missing
    return missing


def _advance(prefilling: list[_Request], decoding: list[_Request], num_decodes: int) -> None:
    """After a step: decodes generate one token each (leaving at their output length); finished
    prompts sample their first token and join the decodes."""
    for request in decoding[:num_decodes]:
        request.generated += 1
    decoding[:] = [r for r in decoding if r.generated < r.output_tokens]
    for request in [r for r in prefilling if r.done_tokens == r.prompt_tokens]:
        prefilling.remove(request)
        request.generated = 1
        if request.output_tokens > 1:
            decoding.append(request)
