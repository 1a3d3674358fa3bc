"""The ``lengths:`` block: vLLM's joint ``--dataset-name random`` lengths."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Literal

import numpy as np

from cost_models.options import OPTIONS_CONFIG, Constraint
from simulator.workload.lengths import NonNegativeInt, PositiveInt, invalid, require_int

RangeRatio = Annotated[float, Constraint(strict=True, ge=0.0, lt=1.0)]


@dataclass(frozen=True)
class RangeRatios:
    """Per-dimension ``--random-range-ratio '{"input": r_in, "output": r_out}'`` (newer vLLM)."""

    input: RangeRatio
    output: RangeRatio
    __pydantic_config__ = OPTIONS_CONFIG

    def __post_init__(self) -> None:
        for name in ("input", "output"):
            _check_ratio(f"VllmRandomLengths.range_ratio.{name}", getattr(self, name))


def _check_ratio(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise invalid(name, value, "a number in [0, 1)")


@dataclass(frozen=True)
class VllmRandomLengths:
    """``vllm bench serve --dataset-name random`` lengths (semantics section 7, rules 1-4).

    Per request, from ``rng`` and in vLLM's order (`vllm/benchmarks/datasets` ``get_sampling_params``):
    all input lengths, then all output lengths, then (only when ``vocab_size`` is set) the token offsets
    and the shared prefix. A fresh ``np.random.default_rng(seed)`` therefore gives the same lengths as
    vLLM's ``--seed seed``.

    ``num_special_tokens`` (``tokenizer.num_special_tokens_to_add()``, 1 for Llama's BOS) is taken off
    before sampling as vLLM does, and added back to ``num_prompt_tokens``: the server's tokenizer adds
    those tokens again, so the engine computes them. ``prefix_len`` (``--random-prefix-len``) tokens
    are shared by every prompt. Token ids (only with ``vocab_size``) follow vLLM's scheme,
    ``(offset + i + arange(len)) % vocab``, with the whole vocabulary allowed and id 0 standing in
    for each special token; re-tokenisation drift (rule 5) is not modelled.
    """

    kind: Literal["vllm_random"] = field(default="vllm_random", kw_only=True)
    input_len: NonNegativeInt = 1024
    output_len: NonNegativeInt = 128
    range_ratio: RangeRatio | RangeRatios = 0.0
    num_special_tokens: NonNegativeInt = 0
    prefix_len: NonNegativeInt = 0
    vocab_size: PositiveInt | None = None
    __pydantic_config__ = OPTIONS_CONFIG

    def __post_init__(self) -> None:
        for name in ("input_len", "output_len", "num_special_tokens", "prefix_len"):
            require_int("VllmRandomLengths", name, getattr(self, name), 0)
        if self.vocab_size is not None:
            require_int("VllmRandomLengths", "vocab_size", self.vocab_size, 1)
        if not isinstance(self.range_ratio, RangeRatios):
            _check_ratio("VllmRandomLengths.range_ratio", self.range_ratio)
        if self.prefix_len + self.input_bounds[0] < 1:
            raise ValueError(f"VllmRandomLengths.input_len: {self.input_len} is too small; with "
                             f"num_special_tokens {self.num_special_tokens}, range_ratio {self.range_ratio} "
                             f"and prefix_len {self.prefix_len} a prompt could have 0 tokens")

    @property
    def ratios(self) -> tuple[float, float]:
        """(r_in, r_out)."""
        r = self.range_ratio
        return (r.input, r.output) if isinstance(r, RangeRatios) else (float(r), float(r))

    @property
    def input_bounds(self) -> tuple[int, int]:
        """Inclusive range of the sampled input part: [floor(I'(1-r_in)), ceil(I'(1+r_in))]."""
        real = max(0, self.input_len - self.num_special_tokens)
        r_in = self.ratios[0]
        return math.floor(real * (1 - r_in)), math.ceil(real * (1 + r_in))

    @property
    def output_bounds(self) -> tuple[int, int]:
        """Inclusive output range: [max(1, floor(O(1-r_out))), max(1, ceil(O(1+r_out)))]."""
        r_out = self.ratios[1]
        low = math.floor(self.output_len * (1 - r_out))
        high = math.ceil(self.output_len * (1 + r_out))
        return max(1, low), max(1, high)

    def sample(self, n: int, rng: np.random.Generator
               ) -> tuple[np.ndarray, np.ndarray, tuple[tuple[int, ...], ...] | None]:
        """(num_prompt_tokens, max_output_tokens, prompt_token_ids or None) for ``n`` requests."""
        in_lo, in_hi = self.input_bounds
        out_lo, out_hi = self.output_bounds
        input_lens = rng.integers(in_lo, in_hi + 1, size=n, dtype=np.int64)
        output_lens = rng.integers(out_lo, out_hi + 1, size=n, dtype=np.int64)
        prompt_lens = input_lens + (self.prefix_len + self.num_special_tokens)
        token_ids = None if self.vocab_size is None else self._token_ids(input_lens, rng)
        return prompt_lens, output_lens, token_ids

    def _token_ids(self, input_lens: np.ndarray, rng: np.random.Generator) -> tuple[tuple[int, ...], ...]:
        vocab = self.vocab_size
        offsets = rng.integers(0, vocab, size=input_lens.size, dtype=np.int64)
        head = [0] * self.num_special_tokens + rng.integers(0, vocab, size=self.prefix_len).tolist()
        return tuple(tuple(head + ((offset + i + np.arange(length)) % vocab).tolist())
                     for i, (offset, length) in enumerate(zip(offsets.tolist(), input_lens.tolist())))
