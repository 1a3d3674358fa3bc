"""What one forward pass computes: ``{request: num_scheduled_tokens}`` as in vLLM V1.

Stored as parallel lists (request, new tokens, context before the step, whether it samples)
because the engine builds one per simulated step; a dict view is there for readability and tests.
A decode cohort (simulator/fastpath/cohort.py) adds its members as summarised decode rows.
"""
from __future__ import annotations

from cost_models.batch_shape import BatchShape
from simulator.core.request import Request
from simulator.core import rules


class Batch:
    __slots__ = ("requests", "new_tokens", "context_tokens", "samples", "decode_rows",
                 "num_preempted", "num_padding_rows", "num_discarded")

    def __init__(self) -> None:
        self.requests: list[Request] = []      # in the order the scheduler picked them
        self.new_tokens: list[int] = []
        # Context is captured at schedule time: schedulers advance num_computed_tokens as they
        # schedule (vLLM V1 does the same), so it cannot be read back afterwards.
        self.context_tokens: list[int] = []
        # Whether each request samples at the end of this step (rules.samples), decided at
        # schedule time: with async scheduling a later schedule() advances C before this step's
        # outputs are known.
        self.samples: list[bool] = []
        # Rows that each decode and sample one token, not listed: (count, total context, longest
        # context) of a decode cohort's members (BatchShape.decode_rows).
        self.decode_rows: tuple[int, int, int] | None = None
        self.num_preempted = 0                 # preemptions decided while forming this batch
        self.num_padding_rows = 0              # static (HF) batching: finished rows still computed
        # Sampling rows whose token was thrown away at the step's end (async: scheduled before a
        # preemption): a step that samples only these makes no progress.
        self.num_discarded = 0

    def add(self, request: Request, num_tokens: int) -> None:
        """Schedule ``num_tokens`` of the request, C advancing at schedule time (rule 1.2)."""
        computed = request.num_computed_tokens
        self.requests.append(request)
        self.new_tokens.append(num_tokens)
        self.context_tokens.append(computed)
        self.samples.append(rules.samples(request, computed + num_tokens))
        request.num_computed_tokens = computed + num_tokens

    def remove(self, request: Request) -> int:
        """Take a request out again (a preemption's rollback); returns its tokens."""
        i = self.requests.index(request)
        del self.requests[i], self.context_tokens[i], self.samples[i]
        return self.new_tokens.pop(i)

    def __contains__(self, request: Request) -> bool:
        return any(r is request for r in self.requests)  # rare: rollbacks and partial prefills

    @property
    def num_decode_rows(self) -> int:
        return 0 if self.decode_rows is None else self.decode_rows[0]

    def __len__(self) -> int:
        return len(self.requests) + self.num_decode_rows

    def __bool__(self) -> bool:
        return bool(self.requests) or self.num_decode_rows > 0

    @property
    def num_scheduled_tokens(self) -> dict[Request, int]:
        return dict(zip(self.requests, self.new_tokens))

    @property
    def total_tokens(self) -> int:
        """Tokens this step computes, decode rows included: what the token budget counts."""
        return sum(self.new_tokens) + self.num_decode_rows

    def shape(self) -> BatchShape:
        """The features a cost model needs; padded rows decode one discarded token."""
        shape = BatchShape.from_lists(self.new_tokens, self.context_tokens, self.samples,
                                      self.decode_rows or (0, 0, 0))
        return shape.with_padding_rows(self.num_padding_rows) if self.num_padding_rows else shape
