"""The batch shapes a fitted cost model has seen, and the work counts both fitted forms (parametric
and tables) price a step by."""
from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass

from cost_models.base import decode_steps_time_s
from cost_models.batch_shape import BatchShape
from cost_models.decode_skew import skewed_time_s


@dataclass(frozen=True)
class FittedRange:
    """The batch shapes a fitted model has seen, so a run can say when it extrapolates."""
    max_tokens: int          # new tokens in one step
    max_seqs: int            # sequences in one step
    max_context: int         # context + new tokens of any one sequence

    def outside(self, shape: BatchShape | None, counts: tuple, longest: int | None = None) -> str | None:
        """A one-phrase description of how the shape leaves the range, or None if it is inside.
        ``longest`` (context + new tokens of the longest sequence) stands in for ``shape``."""
        tokens, num_seqs = counts[0], counts[-1]
        if tokens > self.max_tokens:
            return f"{tokens} tokens > fitted {self.max_tokens}"
        if num_seqs > self.max_seqs:
            return f"{num_seqs} sequences > fitted {self.max_seqs}"
        if num_seqs and counts[1] + counts[4] + tokens > self.max_context:  # else no sequence can be
            if longest is None:
                longest = shape.longest_sequence
            if longest > self.max_context:
                return f"a sequence of {longest} tokens > fitted {self.max_context}"
        return None

    def warn_once(self, model_name: str, shape: BatchShape, counts: tuple, warned: list) -> None:
        """One RuntimeWarning per model instance, naming the first shape outside the range."""
        problem = self.outside(shape, counts)
        if problem:
            warned[0] = True
            warnings.warn(f"cost model {model_name!r}: batch shape outside the fitted range "
                          f"({problem}); the time is extrapolated (further shapes are not reported)",
                          RuntimeWarning, stacklevel=3)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "FittedRange":
        return cls(int(data["max_tokens"]), int(data["max_seqs"]), int(data["max_context"]))

    @classmethod
    def of_shapes(cls, shapes: list[BatchShape]) -> "FittedRange":
        return cls(max_tokens=max(s.num_tokens for s in shapes),
                   max_seqs=max(s.num_seqs for s in shapes),
                   max_context=max(s.longest_sequence for s in shapes if s.num_seqs))


class PricedByCounts:
    """What a fitted form that prices a step from its work counts alone shares (the parametric
    and physics models): one warning outside ``fitted_range``, and runs of decode steps. The
    form gives ``name``, ``fitted_range``, ``_warned`` ([True] when nothing is to be warned of)
    and ``_time_s(counts)``; a form whose decodes of unequal context cost more sets ``decode_skew``
    (cost_models/decode_skew.py)."""
    decode_skew = 0.0

    def step_time_s(self, shape: BatchShape) -> float:
        counts = self._step_counts(shape)
        if not self._warned[0]:
            self.fitted_range.warn_once(self.name, shape, counts, self._warned)
        if self.decode_skew and counts[2] > 1:
            return self._skewed_time_s(counts, shape.longest_decode_context)
        return self._time_s(counts)

    def _step_counts(self, shape: BatchShape) -> tuple:
        """The counts the form prices ``shape`` by (step_counts; a form may count more finely)."""
        return step_counts(shape)

    def _skewed_time_s(self, counts: tuple, longest: int) -> float:
        """_time_s of a step whose decodes differ in context: the skew rule over its decode context."""
        def time_at(mean_context: float) -> float:
            return self._time_s((counts[0], mean_context * counts[2], *counts[2:]))
        return skewed_time_s(time_at, counts[2], counts[1], longest, self.decode_skew)

    def decode_steps_time_s(self, num_seqs: int, context_sum: int, longest: int,
                            num_steps: int) -> list[float]:
        """step_time_s of a run of decode steps with the same rows (cost_models.base): _time_s of
        each step's counts; step by step through step_time_s when a step may leave the fitted
        range, so the warning names the first such step."""
        last = num_steps - 1
        if not self._warned[0] and self.fitted_range.outside(
                None, decode_counts(num_seqs, context_sum + last * num_seqs), longest + last + 1):
            return decode_steps_time_s(self, num_seqs, context_sum, longest, num_steps)
        if self.decode_skew and num_seqs > 1:
            return [self._skewed_time_s(decode_counts(num_seqs, context_sum + i * num_seqs), longest + i)
                    for i in range(num_steps)]
        return [self._time_s(decode_counts(num_seqs, context_sum + i * num_seqs))
                for i in range(num_steps)]


def step_counts(shape: BatchShape) -> tuple[float, ...]:
    """(tokens, decode_ctx, num_decodes, prefill_pairs, prefill_ctx, num_prefills, num_sampled,
    num_seqs): BatchShape.work_counts (computed once per shape)."""
    return shape.work_counts


def decode_counts(num_seqs: int, context_sum: int) -> tuple[float, ...]:
    """step_counts of a step in which every sequence decodes and samples one token."""
    return (num_seqs, context_sum, num_seqs, 0.0, 0, 0, num_seqs, num_seqs)
