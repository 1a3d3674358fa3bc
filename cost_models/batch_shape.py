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
    calibration harness share it. ``decode_rows`` = (count, total context, longest context)
    summarises further sequences that each decode and sample one token, without arrays (a
    decode cohort's rows, simulator/decode_cohort.py): every figure below includes them, and
    cost models read the figures, not the arrays, for decodes.
    """
    new_tokens: np.ndarray      # int64, tokens computed this step per sequence
    context_tokens: np.ndarray  # int64, tokens already in KV before this step
    samples: np.ndarray         # bool, the sequence samples a token at the end of this step
    decode_rows: tuple[int, int, int] = (0, 0, 0)

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
        pad_ctx = self.longest_context
        return BatchShape(np.concatenate([self.new_tokens, np.ones(pad, np.int64)]),
                          np.concatenate([self.context_tokens, np.full(pad, pad_ctx, np.int64)]),
                          np.concatenate([self.samples, np.ones(pad, bool)]), self.decode_rows)

    @cached_property
    def work_counts(self) -> tuple:
        """(tokens, decode_ctx, num_decodes, prefill_pairs, prefill_ctx, num_prefills,
        num_sampled, num_seqs), computed once per shape (work_counts_of): the engine's step
        log and the cost models read them (cost_models.parametric.step_counts)."""
        return work_counts_of(self.new_tokens.tolist(), self.context_tokens.tolist(),
                              self.samples.tolist(), self.decode_rows)

    @classmethod
    def from_lists(cls, new_tokens: list[int], context_tokens: list[int], samples: list[bool],
                   decode_rows: tuple[int, int, int] = (0, 0, 0)) -> "BatchShape":
        """A shape from the scheduler's lists, its work counts taken from the lists directly
        (a step lists few sequences once its decoders are a cohort: plain sums beat numpy's)."""
        shape = cls(np.array(new_tokens, np.int64), np.array(context_tokens, np.int64),
                    np.array(samples, bool), decode_rows)
        shape.__dict__["work_counts"] = work_counts_of(new_tokens, context_tokens, samples, decode_rows)
        return shape

    @property
    def num_seqs(self) -> int:
        return self.work_counts[7]

    @property
    def num_tokens(self) -> int:
        return self.work_counts[0]

    @property
    def is_decode(self) -> np.ndarray:
        """Per listed sequence (decode_rows are decodes too)."""
        return self.new_tokens == 1

    @property
    def num_decode_seqs(self) -> int:
        return self.work_counts[2]

    @property
    def num_prefill_seqs(self) -> int:
        return self.work_counts[5]

    @property
    def num_prefill_tokens(self) -> int:
        counts = self.work_counts
        return counts[0] - counts[2]

    @property
    def num_sampled(self) -> int:
        return self.work_counts[6]

    @property
    def longest_context(self) -> int:
        """The longest context before this step of any sequence (0 for none)."""
        listed = int(self.context_tokens.max()) if len(self.context_tokens) else 0
        return max(listed, self.decode_rows[2]) if self.decode_rows[0] else listed

    @property
    def longest_sequence(self) -> int:
        """The longest context + new tokens of any sequence (0 for none)."""
        listed = int((self.context_tokens + self.new_tokens).max()) if len(self.new_tokens) else 0
        return max(listed, self.decode_rows[2] + 1) if self.decode_rows[0] else listed

    @property
    def longest_decode_context(self) -> int:
        """The longest context among the decodes (0 for none)."""
        is_decode = self.is_decode
        listed = int(self.context_tokens[is_decode].max()) if is_decode.any() else 0
        return max(listed, self.decode_rows[2]) if self.decode_rows[0] else listed

    @property
    def kind(self) -> str:
        """decode | prefill | mixed: the families fitted models report errors by."""
        n_dec = self.num_decode_seqs
        if n_dec == self.num_seqs:
            return "decode"
        return "prefill" if n_dec == 0 else "mixed"


def work_counts_of(new: list[int], ctx: list[int], samples: list[bool],
                   decode_rows: tuple[int, int, int] = (0, 0, 0)) -> tuple:
    """BatchShape.work_counts from plain lists (integers are exact, so any order of summing
    gives the same counts).

    A decode is a sequence with one new token; the causal attention pairs of a sequence are
    new x (ctx + (new + 1) / 2), and the prefill pairs are the total minus the decodes' ctx + 1
    each. ``decode_rows`` (count, total context, longest) adds summarised decodes.
    """
    rows, rows_ctx, _ = decode_rows
    num_seqs = len(new)
    if num_seqs == 0:
        return (rows, rows_ctx, rows, 0.0, 0, 0, rows, rows)
    tokens, ctx_sum, num_sampled = sum(new), sum(ctx), sum(samples) + rows
    if tokens == num_seqs:  # all-decode steps are most steps: skip the prefill sums
        return (tokens + rows, ctx_sum + rows_ctx, num_seqs + rows, 0.0, 0, 0, num_sampled,
                num_seqs + rows)
    num_decodes = decode_ctx = new_ctx = new_new = 0
    for n, c in zip(new, ctx):
        if n == 1:
            num_decodes += 1
            decode_ctx += c
        new_ctx += n * c
        new_new += n * n
    pairs = float(new_ctx) + (float(new_new) + tokens) / 2 - decode_ctx - num_decodes
    return (tokens + rows, decode_ctx + rows_ctx, num_decodes + rows, pairs, ctx_sum - decode_ctx,
            num_seqs - num_decodes, num_sampled, num_seqs + rows)
