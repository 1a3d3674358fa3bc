"""A batch as a cost model sees it. The single place a batch becomes features.

Lives in cost_models (not simulator) so that the calibration harness and the fitters can use it
without the event loop: the dependency direction is calibration -> cost_models <- simulator.
"""
from __future__ import annotations

import numpy as np


class BatchShape:
    """The batch as a cost model sees it: per-sequence new tokens, prior context, sampling flag.

    This is the single place where a batch is turned into features; cost models and the
    calibration harness share it. ``decode_rows`` = (count, total context, longest context)
    summarises further sequences that each decode and sample one token, without arrays (a
    decode cohort's rows, simulator/fastpath/cohort.py): every figure below includes them, and
    cost models read the figures, not the arrays, for decodes.

    The per-sequence values may be given as arrays or as plain lists; lists become arrays only
    when an array is read (the engine builds a shape every step, and most cost models read only
    ``work_counts``). A shape is not changed after it is made.
    """
    __slots__ = ("_new", "_ctx", "_samples", "decode_rows", "_counts")

    def __init__(self, new_tokens, context_tokens, samples,
                 decode_rows: tuple[int, int, int] = (0, 0, 0)):
        self._new, self._ctx, self._samples = new_tokens, context_tokens, samples
        self.decode_rows = decode_rows
        self._counts: tuple | None = None

    @classmethod
    def of(cls, new_tokens, context_tokens, samples=None) -> "BatchShape":
        new = np.asarray(new_tokens, dtype=np.int64)
        ctx = np.asarray(context_tokens, dtype=np.int64)
        smp = np.ones(len(new), bool) if samples is None else np.asarray(samples, bool)
        return cls(new, ctx, smp)

    @classmethod
    def of_decode_rows(cls, count: int, context_sum: int, longest: int) -> "BatchShape":
        """A step of ``count`` summarised decode rows and nothing else (a decode run's step)."""
        shape = cls((), (), (), (count, context_sum, longest))
        shape._counts = (count, context_sum, count, 0.0, 0, 0, count, count)
        return shape

    @classmethod
    def from_lists(cls, new_tokens: list[int], context_tokens: list[int], samples: list[bool],
                   decode_rows: tuple[int, int, int] = (0, 0, 0)) -> "BatchShape":
        """A shape from the scheduler's lists (not copied: the caller no longer changes them),
        its work counts taken from the lists directly (a step lists few sequences once its
        decoders are a cohort: plain sums beat numpy's)."""
        shape = cls(new_tokens, context_tokens, samples, decode_rows)
        shape._counts = work_counts_of(new_tokens, context_tokens, samples, decode_rows)
        return shape

    @property
    def new_tokens(self) -> np.ndarray:
        """int64, tokens computed this step per listed sequence."""
        if type(self._new) is not np.ndarray:
            self._new = np.array(self._new, np.int64)
        return self._new

    @property
    def context_tokens(self) -> np.ndarray:
        """int64, tokens already in KV before this step per listed sequence."""
        if type(self._ctx) is not np.ndarray:
            self._ctx = np.array(self._ctx, np.int64)
        return self._ctx

    @property
    def samples(self) -> np.ndarray:
        """bool, whether each listed sequence samples a token at the end of this step."""
        if type(self._samples) is not np.ndarray:
            self._samples = np.array(self._samples, bool)
        return self._samples

    def with_padding_rows(self, pad: int) -> "BatchShape":
        """Static (HF) batching computes finished rows too: each decodes one discarded token over
        the batch's longest context."""
        if not pad:
            return self
        pad_ctx = self.longest_context
        return BatchShape(np.concatenate([self.new_tokens, np.ones(pad, np.int64)]),
                          np.concatenate([self.context_tokens, np.full(pad, pad_ctx, np.int64)]),
                          np.concatenate([self.samples, np.ones(pad, bool)]), self.decode_rows)

    @property
    def work_counts(self) -> tuple:
        """(tokens, decode_ctx, num_decodes, prefill_pairs, prefill_ctx, num_prefills,
        num_sampled, num_seqs), computed once per shape (work_counts_of): the engine's step
        log and the cost models read them (cost_models.parametric.step_counts)."""
        if self._counts is None:
            self._counts = work_counts_of(_as_list(self._new), _as_list(self._ctx),
                                          _as_list(self._samples), self.decode_rows)
        return self._counts

    @property
    def num_seqs(self) -> int:
        return self.work_counts[7]

    @property
    def num_tokens(self) -> int:
        return self.work_counts[0]

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
        listed = max(_as_list(self._ctx), default=0)
        return max(listed, self.decode_rows[2]) if self.decode_rows[0] else listed

    @property
    def longest_sequence(self) -> int:
        """The longest context + new tokens of any sequence (0 for none)."""
        listed = max(map(sum, zip(_as_list(self._ctx), _as_list(self._new))), default=0)
        return max(listed, self.decode_rows[2] + 1) if self.decode_rows[0] else listed

    @property
    def longest_decode_context(self) -> int:
        """The longest context among the decodes (0 for none)."""
        listed = max((c for n, c in zip(_as_list(self._new), _as_list(self._ctx)) if n == 1), default=0)
        return max(listed, self.decode_rows[2]) if self.decode_rows[0] else listed

    @property
    def kind(self) -> str:
        """decode | prefill | mixed: the families fitted models report errors by."""
        n_dec = self.num_decode_seqs
        if n_dec == self.num_seqs:
            return "decode"
        return "prefill" if n_dec == 0 else "mixed"


def _as_list(values) -> list:
    return values.tolist() if type(values) is np.ndarray else list(values)


def work_counts_of(new: list[int], ctx: list[int], samples: list[bool],
                   decode_rows: tuple[int, int, int] = (0, 0, 0)) -> tuple:
    """BatchShape.work_counts from plain lists (integers are exact, so any order of summing
    gives the same counts).

    A decode is a sequence with one new token; every other sequence is a prefill chunk, whose
    causal attention pairs are chunk_pairs'. ``decode_rows`` (count, total context, longest) adds
    summarised decodes.
    """
    rows, rows_ctx, _ = decode_rows
    num_seqs = len(new)
    if num_seqs == 0:
        return (rows, rows_ctx, rows, 0.0, 0, 0, rows, rows)
    tokens, ctx_sum, num_sampled = sum(new), sum(ctx), sum(samples) + rows
    if tokens == num_seqs:  # all-decode steps are most steps: skip the prefill sums
        return (tokens + rows, ctx_sum + rows_ctx, num_seqs + rows, 0.0, 0, 0, num_sampled,
                num_seqs + rows)
    num_decodes = decode_ctx = pairs = 0
    for n, c in zip(new, ctx):
        if n == 1:
            num_decodes += 1
            decode_ctx += c
        else:
            pairs += chunk_pairs(n, c)
    return (tokens + rows, decode_ctx + rows_ctx, num_decodes + rows, float(pairs), ctx_sum - decode_ctx,
            num_seqs - num_decodes, num_sampled, num_seqs + rows)


def chunk_pairs(new: int, ctx: int, tile: int = 1) -> int:
    """The (query, key) pairs an attention kernel computes for a prefill chunk of ``new`` tokens on
    ``ctx`` cached ones when it takes the queries in tiles of ``tile`` rows: each tile's rows attend
    over the keys up to its last row's, padded rows included. Tile 1 gives the causal pairs,
    new x (ctx + (new + 1) / 2)."""
    tiles = -(-new // tile)
    return tile * (tiles * ctx + tile * tiles * (tiles - 1) // 2 + new)


def prefill_pairs_at_tile(new: list[int], ctx: list[int], tile: int) -> float:
    """chunk_pairs of every prefill chunk of a step (its sequences of more than one new token)."""
    return float(sum(chunk_pairs(n, c, tile) for n, c in zip(new, ctx) if n > 1))


def work_counts_at_tile(shape: BatchShape, tile: int) -> tuple:
    """``shape``'s work_counts with its prefill pairs as a kernel of ``tile`` query rows a tile
    computes them (prefill_pairs_at_tile): what the physics features read."""
    counts = shape.work_counts
    if tile == 1 or not counts[5]:
        return counts
    pairs = prefill_pairs_at_tile(_as_list(shape.new_tokens), _as_list(shape.context_tokens), tile)
    return (*counts[:3], pairs, *counts[4:])
