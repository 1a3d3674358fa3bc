"""What one forward pass computes: ``{request: num_scheduled_tokens}`` as in vLLM V1.

Stored as parallel lists (request, new tokens, context before the step) because the engine builds
one per simulated step: a dict view is available for readability and tests.
"""
from __future__ import annotations

from cost_models.batch_shape import BatchShape
from simulator.request import Request


class Batch:
    __slots__ = ("requests", "new_tokens", "context_tokens", "samples", "num_preempted",
                 "num_padding_rows", "cohort_rows")

    def __init__(self) -> None:
        self.requests: list[Request] = []      # in the order the scheduler picked them
        self.new_tokens: list[int] = []
        # Context is captured at schedule time: schedulers advance num_computed_tokens as they
        # schedule (vLLM V1 does the same), so it cannot be read back afterwards.
        self.context_tokens: list[int] = []
        # Whether each request samples a token at the end of this step (its last prefill chunk
        # or a decode), decided at schedule time: with async scheduling, a later schedule()
        # advances num_computed_tokens before this step's outputs are known.
        self.samples: list[bool] = []
        self.num_preempted = 0                 # preemptions decided while forming this batch
        self.num_padding_rows = 0              # static (HF) batching: finished rows still computed
        # A decode cohort's rows (simulator/decode_cohort.py), not listed: (count, total
        # context, longest context) of its members, each decoding one token ahead of the
        # listed requests (BatchShape.decode_rows).
        self.cohort_rows: tuple[int, int, int] | None = None

    def add(self, request: Request, num_tokens: int) -> None:
        computed = request.num_computed_tokens
        self.requests.append(request)
        self.new_tokens.append(num_tokens)
        self.context_tokens.append(computed)
        self.samples.append(computed + num_tokens >= request.num_prompt_tokens
                            + request.num_output_tokens + request.num_output_placeholders)

    def remove(self, request: Request) -> int:
        i = self.requests.index(request)
        del self.requests[i], self.context_tokens[i], self.samples[i]
        return self.new_tokens.pop(i)

    def __contains__(self, request: Request) -> bool:
        return any(r is request for r in self.requests)  # rare: rollbacks and partial prefills

    @property
    def num_cohort_rows(self) -> int:
        return 0 if self.cohort_rows is None else self.cohort_rows[0]

    def __len__(self) -> int:
        return len(self.requests) + self.num_cohort_rows

    def __bool__(self) -> bool:
        return bool(self.requests) or self.num_cohort_rows > 0

    @property
    def num_scheduled_tokens(self) -> dict[Request, int]:
        return dict(zip(self.requests, self.new_tokens))

    @property
    def total_tokens(self) -> int:
        return sum(self.new_tokens)

    def shape(self) -> BatchShape:
        """The features a cost model needs; padded rows decode one discarded token."""
        shape = BatchShape.from_lists(self.new_tokens, self.context_tokens, self.samples,
                                      self.cohort_rows or (0, 0, 0))
        return shape.with_padding_rows(self.num_padding_rows) if self.num_padding_rows else shape
