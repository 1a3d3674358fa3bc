"""The batch shapes the harness times: prefill-only, decode-only and mixed steps.

The full grid is the one ``../shared/reference/h200/steps.csv`` was measured on, so our timings join
that reference shape for shape. Shape columns use the reference's names (``chunk, prefill_ctx,
n_decode, decode_ctx, tokens``).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

# Decode shapes with more KV than this are left out, as in the reference (batch x context <= 2^20).
MAX_DECODE_KV_TOKENS = 2 ** 20

FULL_DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
FULL_DECODE_CONTEXTS = (128, 512, 2048, 8192)
# The reference steps.csv has these eight chunks (no 32 or 128).
FULL_PREFILL_CHUNKS = (16, 64, 256, 512, 1024, 2048, 4096, 8192)
FULL_PREFILL_CONTEXTS = (0, 1024, 4096)
FULL_MIXED_CHUNKS = (256, 1024, 2048)
FULL_MIXED_DECODES = (8, 32, 128)
FULL_MIXED_DECODE_CONTEXT = 1024

# Small enough that a tiny model on two CPU cores times the whole grid in well under a minute, yet
# 26 shapes: after holding out every 5th there are still the 20 distinct shapes a parametric fit of
# its 10 terms needs (cost_models/fit/parametric_fit.py), and each family keeps a held-out shape.
QUICK_DECODE_BATCHES = (1, 2, 4, 8, 16, 32)
QUICK_DECODE_CONTEXTS = (128, 512)
QUICK_PREFILL_CHUNKS = (16, 32, 64, 128, 256)
QUICK_PREFILL_CONTEXTS = (0, 256)
QUICK_MIXED_CHUNKS = (32, 64)
QUICK_MIXED_DECODES = (4, 16)
QUICK_MIXED_DECODE_CONTEXT = 256

# The limits of the vLLM-CPU reference runs (../shared/reference/vllm-cpu: max_num_seqs 32,
# max_num_batched_tokens 2048): sized for tiny-llama on one CPU core, 2.5 minutes with 3
# repetitions after 1 warm-up on a shared 2-core machine.
CPU_DECODE_BATCHES = (1, 2, 4, 8, 16, 32)
CPU_DECODE_CONTEXTS = (128, 256, 512, 1024, 2048)
CPU_PREFILL_CHUNKS = (16, 64, 128, 256, 512, 1024, 2048)
CPU_PREFILL_CONTEXTS = (0, 1024)
CPU_MIXED_CHUNKS = (256, 1024)
CPU_MIXED_DECODES = (4, 16)
CPU_MIXED_DECODE_CONTEXT = 1024

GRIDS = ("full", "quick", "cpu")

KINDS = ("decode", "prefill", "mixed")


@dataclass(frozen=True)
class SeqGroup:
    """Sequences of one step that share (new tokens, context): one attention call covers them."""
    num_seqs: int
    new_tokens: int
    context_tokens: int

    @property
    def kv_tokens(self) -> int:
        """KV slots the group needs: its context plus the tokens written this step."""
        return self.num_seqs * (self.context_tokens + self.new_tokens)


@dataclass(frozen=True)
class StepShape:
    """One step: an optional prefill chunk over ``prefill_ctx`` cached tokens plus ``n_decode``
    decodes at ``decode_ctx`` tokens of context each. Every decode samples, and so does the last
    token of the chunk (a chunk that completes its prompt)."""
    kind: str
    chunk: int = 0
    prefill_ctx: int = 0
    n_decode: int = 0
    decode_ctx: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind: {self.kind!r} is not one of {', '.join(KINDS)}")
        has_chunk, has_decodes = self.chunk > 0, self.n_decode > 0
        expected = {"decode": (False, True), "prefill": (True, False), "mixed": (True, True)}
        if (has_chunk, has_decodes) != expected[self.kind]:
            raise ValueError(f"shape: kind {self.kind!r} does not fit chunk={self.chunk}, "
                             f"n_decode={self.n_decode}")
        if min(self.chunk, self.prefill_ctx, self.n_decode, self.decode_ctx) < 0:
            raise ValueError(f"shape: negative size in {self}")

    @property
    def tokens(self) -> int:
        return self.chunk + self.n_decode

    @property
    def groups(self) -> tuple[SeqGroup, ...]:
        """Decodes first, then the chunk; the token order of the step follows this order."""
        groups = []
        if self.n_decode:
            groups.append(SeqGroup(self.n_decode, 1, self.decode_ctx))
        if self.chunk:
            groups.append(SeqGroup(1, self.chunk, self.prefill_ctx))
        return tuple(groups)

    @property
    def kv_tokens(self) -> int:
        return sum(g.kv_tokens for g in self.groups)

    @property
    def num_sampled(self) -> int:
        return self.n_decode + (1 if self.chunk else 0)

    @property
    def max_position(self) -> int:
        """Largest RoPE position + 1 the step touches."""
        return max(g.context_tokens + g.new_tokens for g in self.groups)

    @property
    def label(self) -> str:
        return (f"{self.kind}:chunk={self.chunk},prefill_ctx={self.prefill_ctx},"
                f"n_decode={self.n_decode},decode_ctx={self.decode_ctx}")

    def columns(self) -> dict[str, int | str]:
        """The shape columns of timings.csv (and of the reference steps.csv)."""
        return {**asdict(self), "tokens": self.tokens}


def decode_shapes(batches, contexts) -> list[StepShape]:
    return [StepShape("decode", n_decode=b, decode_ctx=c)
            for b in batches for c in contexts if b * c <= MAX_DECODE_KV_TOKENS]


def prefill_shapes(chunks, contexts) -> list[StepShape]:
    return [StepShape("prefill", chunk=n, prefill_ctx=c) for n in chunks for c in contexts]


def mixed_shapes(chunks, decodes, decode_ctx: int) -> list[StepShape]:
    return [StepShape("mixed", chunk=n, n_decode=d, decode_ctx=decode_ctx)
            for n in chunks for d in decodes]


def full_grid() -> tuple[StepShape, ...]:
    """The reference grid: 38 decode, 24 prefill and 9 mixed shapes."""
    return tuple(decode_shapes(FULL_DECODE_BATCHES, FULL_DECODE_CONTEXTS)
                 + prefill_shapes(FULL_PREFILL_CHUNKS, FULL_PREFILL_CONTEXTS)
                 + mixed_shapes(FULL_MIXED_CHUNKS, FULL_MIXED_DECODES, FULL_MIXED_DECODE_CONTEXT))


def quick_grid() -> tuple[StepShape, ...]:
    return tuple(decode_shapes(QUICK_DECODE_BATCHES, QUICK_DECODE_CONTEXTS)
                 + prefill_shapes(QUICK_PREFILL_CHUNKS, QUICK_PREFILL_CONTEXTS)
                 + mixed_shapes(QUICK_MIXED_CHUNKS, QUICK_MIXED_DECODES,
                                QUICK_MIXED_DECODE_CONTEXT))


def cpu_grid() -> tuple[StepShape, ...]:
    """30 decode, 14 prefill and 4 mixed shapes within the vLLM-CPU runs' limits."""
    return tuple(decode_shapes(CPU_DECODE_BATCHES, CPU_DECODE_CONTEXTS)
                 + prefill_shapes(CPU_PREFILL_CHUNKS, CPU_PREFILL_CONTEXTS)
                 + mixed_shapes(CPU_MIXED_CHUNKS, CPU_MIXED_DECODES, CPU_MIXED_DECODE_CONTEXT))


def named_grid(name: str) -> tuple[StepShape, ...]:
    """The grid called ``name`` (one of GRIDS)."""
    grids = {"full": full_grid, "quick": quick_grid, "cpu": cpu_grid}
    if name not in grids:
        raise ValueError(f"grid: {name!r} is not one of {', '.join(GRIDS)}")
    return grids[name]()


def preflight_grid() -> tuple[StepShape, ...]:
    """The full grid's smallest and largest shapes of each kind (most tokens, most KV): checks
    memory and CUDA-graph capture in seconds before a long capture."""
    full = full_grid()
    picks: list[StepShape] = []
    for kind in KINDS:
        shapes = [s for s in full if s.kind == kind]
        for key in (lambda s: (s.tokens, s.kv_tokens), lambda s: (s.kv_tokens, s.tokens)):
            picks += [min(shapes, key=key), max(shapes, key=key)]
    return tuple(dict.fromkeys(picks))
