"""What one forward pass computes: ``{request: num_scheduled_tokens}`` as in vLLM V1."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cost_models.batch_shape import BatchShape
from simulator.request import Request


@dataclass
class Batch:
    # Insertion order is the order the scheduler picked requests. Each request's context (tokens
    # already in KV before this step) is captured at schedule time, since schedulers advance
    # num_computed_tokens as they schedule (vLLM V1 does the same).
    num_scheduled_tokens: dict[Request, int] = field(default_factory=dict)
    context_tokens: dict[Request, int] = field(default_factory=dict)
    num_preempted: int = 0          # preemptions decided while forming this batch
    num_padding_rows: int = 0       # static (HF) batching: finished rows still computed

    def add(self, request: Request, num_tokens: int) -> None:
        self.num_scheduled_tokens[request] = num_tokens
        self.context_tokens[request] = request.num_computed_tokens

    def remove(self, request: Request) -> int:
        self.context_tokens.pop(request)
        return self.num_scheduled_tokens.pop(request)

    def __len__(self) -> int:
        return len(self.num_scheduled_tokens)

    def __bool__(self) -> bool:
        return bool(self.num_scheduled_tokens)

    @property
    def total_tokens(self) -> int:
        return sum(self.num_scheduled_tokens.values())

    @property
    def requests(self) -> list[Request]:
        return list(self.num_scheduled_tokens)

    def shape(self) -> BatchShape:
        """The features a cost model needs; padded rows decode one discarded token."""
        n_real = len(self)
        new = np.fromiter(self.num_scheduled_tokens.values(), dtype=np.int64, count=n_real)
        ctx = np.fromiter(self.context_tokens.values(), dtype=np.int64, count=n_real)
        samples = np.fromiter((c + k >= r.num_tokens for (r, k), c in
                               zip(self.num_scheduled_tokens.items(), self.context_tokens.values())),
                              dtype=bool, count=n_real)
        if self.num_padding_rows:
            pad = self.num_padding_rows
            pad_ctx = int(ctx.max()) if n_real else 0
            new = np.concatenate([new, np.ones(pad, np.int64)])
            ctx = np.concatenate([ctx, np.full(pad, pad_ctx, np.int64)])
            samples = np.concatenate([samples, np.ones(pad, bool)])
        return BatchShape(new, ctx, samples)
