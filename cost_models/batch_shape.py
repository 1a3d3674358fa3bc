"""A batch as a cost model sees it. The single place a batch becomes features.

Lives in cost_models (not simulator) so that the calibration harness and the fitters can use it
without the event loop: the dependency direction is calibration -> cost_models <- simulator.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class BatchShape:
    """The batch as a cost model sees it: per-sequence new tokens, prior context, sampling flag.

    This is the single place where a batch is turned into features; cost models and the
    calibration harness share it.
    """
    new_tokens: np.ndarray      # int64, tokens computed this step per sequence
    context_tokens: np.ndarray  # int64, tokens already in KV before this step
    samples: np.ndarray         # bool, the sequence samples a token at the end of this step

    @classmethod
    def of(cls, new_tokens, context_tokens, samples=None) -> "BatchShape":
        new = np.asarray(new_tokens, dtype=np.int64)
        ctx = np.asarray(context_tokens, dtype=np.int64)
        smp = np.ones(len(new), bool) if samples is None else np.asarray(samples, bool)
        return cls(new, ctx, smp)

    def with_padding_rows(self, pad: int) -> "BatchShape":
        """Static (HF) batching computes finished rows too: each decodes one discarded token over
        the batch's longest context."""
        if not pad:
            return self
        pad_ctx = int(self.context_tokens.max()) if len(self.context_tokens) else 0
        return BatchShape(np.concatenate([self.new_tokens, np.ones(pad, np.int64)]),
                          np.concatenate([self.context_tokens, np.full(pad, pad_ctx, np.int64)]),
                          np.concatenate([self.samples, np.ones(pad, bool)]))

    @cached_property
    def work_counts(self) -> tuple:
        """(tokens, decode_ctx, num_decodes, prefill_pairs, prefill_ctx, num_prefills,
        num_sampled, num_seqs), computed once per shape: the engine's step log and the fitted
        cost models both read them (cost_models.parametric.step_counts).

        A decode is a sequence with one new token (is_decode); the causal attention pairs of a
        sequence are new x (ctx + (new + 1) / 2), and the prefill pairs are the total minus the
        decodes' ctx + 1 each, which avoids boolean indexing on the hot path.
        """
        new, ctx = self.new_tokens, self.context_tokens
        num_seqs = len(new)
        if num_seqs == 0:
            return (0, 0, 0, 0.0, 0, 0, 0, 0)
        tokens = int(new.sum())
        ctx_sum = int(ctx.sum())
        num_sampled = int(np.count_nonzero(self.samples))
        if tokens == num_seqs:  # all-decode steps are most steps: skip the prefill sums
            return (tokens, ctx_sum, num_seqs, 0.0, 0, 0, num_sampled, num_seqs)
        is_decode = new == 1
        num_decodes = int(np.count_nonzero(is_decode))
        decode_ctx = int(ctx @ is_decode) if num_decodes else 0
        pairs = float(new @ ctx) + (float(new @ new) + tokens) / 2 - decode_ctx - num_decodes
        return (tokens, decode_ctx, num_decodes, pairs, ctx_sum - decode_ctx, num_seqs - num_decodes,
                num_sampled, num_seqs)

    @property
    def num_seqs(self) -> int:
        return len(self.new_tokens)

    @property
    def num_tokens(self) -> int:
        return int(self.new_tokens.sum())

    @property
    def is_decode(self) -> np.ndarray:
        return self.new_tokens == 1

    @property
    def num_decode_seqs(self) -> int:
        return int(self.is_decode.sum())

    @property
    def num_prefill_seqs(self) -> int:
        return self.num_seqs - self.num_decode_seqs

    @property
    def num_prefill_tokens(self) -> int:
        return int(self.new_tokens[~self.is_decode].sum())

    @property
    def num_sampled(self) -> int:
        return int(self.samples.sum())

    @property
    def kind(self) -> str:
        """decode | prefill | mixed: the families fitted models report errors by."""
        n_dec = self.num_decode_seqs
        if n_dec == self.num_seqs:
            return "decode"
        return "prefill" if n_dec == 0 else "mixed"
