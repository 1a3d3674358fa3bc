"""Token-length distributions for prompts and outputs, plus vLLM's joint ``--dataset-name random``.

Every distribution answers ``sample(n, rng) -> int64 array`` of lengths >= 1, drawing only from the
passed generator and in one vectorised call. The kinds drawn from the packaged ShareGPT table are
in sharegpt.py, on this module's empirical rule (``resample``).
"""
from __future__ import annotations

import csv
import functools
import math
import os
from dataclasses import dataclass, field
from typing import Annotated, Literal

import numpy as np

from cost_models.options import INT64_MAX, OPTIONS_CONFIG, Constraint, NonNegativeInt, PositiveInt
RangeRatio = Annotated[float, Constraint(strict=True, ge=0.0, lt=1.0)]


def invalid(name: str, value: object, allowed: str) -> ValueError:
    """The one-line error for bad input: the field, the value and what is allowed."""
    return ValueError(f"{name}: {value!r} is not allowed; must be {allowed}")


def _require_int(owner: str, name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise invalid(f"{owner}.{name}", value, f"an integer >= {minimum}")


def parse_length(text: str, where: str) -> int:
    """One token count from text ("512" or "512.0"); ``where`` names the file and line in errors."""
    try:
        number = int(text) if text.strip().lstrip("+-").isdigit() else float(text)  # ints exactly
    except ValueError:
        raise ValueError(f"{where}: {text.strip()!r} is not a token count") from None
    if not 1 <= number <= INT64_MAX or not float(number).is_integer():
        raise ValueError(f"{where}: {text.strip()!r} is not allowed; a token count must be an integer "
                         f">= 1 and <= {INT64_MAX}")
    return int(number)


@dataclass(frozen=True)
class FixedLength:
    """Every request gets ``value`` tokens. Draws nothing."""

    kind: Literal["fixed"] = field(default="fixed", kw_only=True)
    value: PositiveInt
    __pydantic_config__ = OPTIONS_CONFIG

    def __post_init__(self) -> None:
        _require_int("FixedLength", "value", self.value, 1)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.full(n, self.value, dtype=np.int64)


@dataclass(frozen=True)
class UniformLength:
    """Integers uniform on [low, high], both inclusive."""

    kind: Literal["uniform"] = field(default="uniform", kw_only=True)
    low: PositiveInt
    high: PositiveInt
    __pydantic_config__ = OPTIONS_CONFIG

    def __post_init__(self) -> None:
        _require_int("UniformLength", "low", self.low, 1)
        _require_int("UniformLength", "high", self.high, self.low)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(self.low, self.high + 1, size=n, dtype=np.int64)


@dataclass(frozen=True)
class LognormalLength:
    """``median * exp(sigma * Z)``, rounded half-to-even (``np.rint``), then clipped to [min, max]."""

    kind: Literal["lognormal"] = field(default="lognormal", kw_only=True)
    median: Annotated[float, Constraint(strict=True, gt=0, allow_inf_nan=False)]
    sigma: Annotated[float, Constraint(strict=True, ge=0, allow_inf_nan=False)]
    min: PositiveInt = 1
    max: PositiveInt | None = None
    __pydantic_config__ = OPTIONS_CONFIG

    def __post_init__(self) -> None:
        if not (math.isfinite(self.median) and self.median > 0):
            raise invalid("LognormalLength.median", self.median, "a finite number > 0")
        if not (math.isfinite(self.sigma) and self.sigma >= 0):
            raise invalid("LognormalLength.sigma", self.sigma, "a finite number >= 0")
        _require_int("LognormalLength", "min", self.min, 1)
        if self.max is not None:
            _require_int("LognormalLength", "max", self.max, self.min)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        draws = np.rint(rng.lognormal(math.log(self.median), self.sigma, size=n))
        upper = np.inf if self.max is None else self.max
        return np.clip(draws, self.min, upper).astype(np.int64)


@dataclass(frozen=True)
class EmpiricalLength:
    """Resample, with replacement, lengths read from a file: one integer per line (blank lines and
    ``#`` comments skipped), or, when ``column`` is given, that column of a CSV file with a header."""

    kind: Literal["empirical"] = field(default="empirical", kw_only=True)
    path: str
    column: str | None = None
    __pydantic_config__ = OPTIONS_CONFIG

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path:
            raise invalid("EmpiricalLength.path", self.path, "a file path")

    def values(self) -> np.ndarray:
        """The lengths in the file (read once per file version, then cached)."""
        try:
            stat = os.stat(self.path)
        except OSError:
            raise ValueError(f"EmpiricalLength.path: file {self.path!r} does not exist or cannot be read") \
                from None
        return _read_lengths(self.path, self.column, stat.st_mtime_ns, stat.st_size)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return resample(self.values(), n, rng)


def resample(rows: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """The empirical rule: ``n`` rows drawn with replacement, each equally likely, in one call to
    ``rng``; every table-driven kind (empirical, sharegpt) draws through it, so they agree."""
    return rows[rng.integers(0, len(rows), size=n)]


@functools.lru_cache(maxsize=32)
def _read_lengths(path: str, column: str | None, mtime_ns: int, size: int) -> np.ndarray:
    with open(path, newline="") as f:
        if column is None:
            values = [parse_length(line, f"EmpiricalLength.path: {path}:{i}")
                      for i, line in enumerate(f, 1) if line.strip() and not line.lstrip().startswith("#")]
        else:
            reader = csv.DictReader(f)
            if column not in (reader.fieldnames or []):
                raise ValueError(f"EmpiricalLength.column: {column!r} is not a column of {path}; "
                                 f"its columns are {reader.fieldnames}")
            values = [parse_length(row[column] or "", f"EmpiricalLength.path: {path}:{i}")
                      for i, row in enumerate(reader, 2)]
    if not values:
        raise ValueError(f"EmpiricalLength.path: {path} holds no lengths")
    array = np.asarray(values, dtype=np.int64)
    array.setflags(write=False)  # shared through the cache
    return array


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
            _require_int("VllmRandomLengths", name, getattr(self, name), 0)
        if self.vocab_size is not None:
            _require_int("VllmRandomLengths", "vocab_size", self.vocab_size, 1)
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
