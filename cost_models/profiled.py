"""Table-driven step cost from kernel profiles: operator tables in tokens, attention by step composition.

    step = num_layers x (layer ops(tokens) + experts(tokens) + attention(step) + 2 x all-reduce(tokens x hidden))
         + whole-model ops(tokens) + lm_head and sampler(sampled rows) + step_overhead_s

Kernel profiles contain no CPU work and no gaps between kernels, so ``step_overhead_s`` is the
explicit term for the engine time per step that is not kernel time: the CPU work (scheduling, input
preparation, output processing, kernel launches) where it is not hidden under the GPU's work. How
much is hidden depends on the engine: with vLLM's async scheduling the CPU work of step k+1 runs
while the GPU runs step k, and CUDA-graph replay launches a whole decode step at once, so only the
part of the CPU time longer than the GPU step adds (none for the LLMServingSim profiles' GPUs and
models: the GPU step is >= 11 ms there); a synchronous or eager engine adds all of it. The profile
file's ``step_overhead`` block records the value, the mechanism and its source; a scenario can
override it with ``cost_model.step_overhead_s``.

Attention comes from a profiled grid of one layer (LLMServingSim: one prefill chunk on cached
context plus n decodes of equal context) or, where the source has none (Vidur), from the roofline.
The grid is kept as three compact tables: prefill P(chunk, cached), decode-only D(n, context), and
the extra time decodes add to a prefill step at no cached context, X(chunk, n, context). A mixed
step costs ``base + ((P - base)^p + X^p)^(1/p)``: the two parts run in one kernel launch and overlap
partly, p fitted on the profile. Several prefill chunks add their P above the base; decodes enter
with their mean context (their KV reads add up, so the mean times n is the total).

Decodes of unequal context are slower than n decodes at their mean: the attention kernel gives each
sequence its own thread blocks, so a long one keeps some SMs busy after the rest finish. Where the
profile measured such batches (LLMServingSim's skew sweep, ``meta.yaml`` ``skew_fit``), the
attention is ``t(mean) + alpha x (t(max) - t(mean))``, t looked up with every decode at the mean or
at the longest context, alpha the profile's fitted value (``decode_skew``; 0 where not measured).

The grids interpolate linearly in each axis's own value, not in log2: attention work is affine in
the KV tokens and in the sequences between grid points, and on a doubling grid log-axis
interpolation over-predicts mid-octave by up to 6% (leave-one-out on the RTX PRO 6000 decode grid:
linear within 1% for n >= 16, log2 2-6% high).
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np

from cost_models.base import decode_steps_time_s
from cost_models.batch_shape import BatchShape
from cost_models.fitted_range import FittedRange, decode_counts, step_counts


class Table1D:
    """y(x) by linear interpolation; flat below the first point, proportional above the last."""

    def __init__(self, x, y):
        self.x, self.y = [float(v) for v in x], [float(v) for v in y]
        if len(self.x) < 2 or len(self.x) != len(self.y) or any(b <= a for a, b in zip(self.x, self.x[1:])):
            raise ValueError(f"table: needs >= 2 points with increasing x (got {len(self.x)})")

    def __call__(self, x: float) -> float:
        xs, ys = self.x, self.y
        if x >= xs[-1]:
            return ys[-1] * x / xs[-1]  # past the profile: time grows with the work
        i = bisect_right(xs, x)
        if i == 0:
            return ys[0]
        x0, x1 = xs[i - 1], xs[i]
        return ys[i - 1] + (ys[i] - ys[i - 1]) * (x - x0) / (x1 - x0)


class RooflineAttention:
    """Attention and lm_head from the datasheet roofline, where a profile has no such kernels (Vidur)."""
    per_layer = False   # its constants count every layer (AttentionGrid's: one layer's)

    def __init__(self, roofline):
        self.per_rank = roofline._k   # the roofline's per-rank constants and their formulas

    def time_s(self, new: np.ndarray, ctx: np.ndarray, counts: tuple, longest_decode: int = 0) -> float:
        attention_s = self.per_rank.attention_s
        tokens, decode_ctx, num_decodes, pairs, prefill_ctx = counts[:5]
        decode_pairs = decode_ctx + num_decodes
        prefill_tokens = tokens - num_decodes
        per_layer = attention_s(decode_pairs, decode_pairs, num_decodes)
        if pairs:
            per_layer += attention_s(pairs, prefill_ctx + prefill_tokens, prefill_tokens)
        return per_layer  # the roofline's constants already count every layer

    def sampling_s(self, num_sampled: int) -> float:
        return self.per_rank.sampling_s(num_sampled)


@dataclass(frozen=True, eq=False)   # its tables compare by identity anyway: no __eq__ to compile
class TableCostModel:
    num_layers: int
    layer: Table1D                  # one layer's non-attention kernels against tokens
    whole_model: Table1D | None     # embedding, final norm against tokens
    sequence: Table1D | None        # lm_head + sampler against sampled rows (None: roofline)
    attention: object               # AttentionGrid (per layer) or RooflineAttention (all layers)
    step_overhead_s: float
    allreduce: object = None        # one all-reduce against bytes: a measured Table1D or RingAllReduce
    allreduce_bytes_per_token: float = 0.0
    moe: object = None              # one MoE layer's experts against tokens (moe.ExpertTable)
    fitted_range: FittedRange | None = None
    name: str = "profiled"
    _warned: list = field(init=False, repr=False, compare=False)
    _by_tokens: dict = field(init=False, repr=False, compare=False)
    _grid: bool = field(init=False, repr=False, compare=False)
    _skew: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # What step_time_s asks of the attention at every step, asked once.
        object.__setattr__(self, "_grid", getattr(self.attention, "per_layer", False))
        object.__setattr__(self, "_skew", getattr(self.attention, "decode_skew", 0.0))
        object.__setattr__(self, "_warned", [self.fitted_range is None])
        # Table lookups by token and row counts, which repeat step after step (a decode run
        # keeps its rows): the same floats, computed once.
        object.__setattr__(self, "_by_tokens", {})

    def step_time_s(self, shape: BatchShape) -> float:
        counts = step_counts(shape)
        if counts[0] == 0:
            return self.step_overhead_s
        if not self._warned[0] and not self._surely_inside(counts):
            self.fitted_range.warn_once(self.name, shape, counts, self._warned)
        # The longest context among the decodes, for the skew term (0 with fewer than two).
        longest = shape.longest_decode_context if self._skew and counts[2] >= 2 else 0
        if counts[5] and self._grid:   # a grid reads the prompt chunks
            return self._time_s(counts, shape.new_tokens, shape.context_tokens, longest)
        return self._time_s(counts, None, None, longest)

    def decode_steps_time_s(self, num_seqs: int, context_sum: int, longest: int,
                            num_steps: int) -> list[float]:
        """step_time_s of a run of decode steps with the same rows (cost_models.base): where the
        attention is the roofline's, _time_s's operations in its order with the terms that only
        depend on the rows taken once; a grid's attention, or a step that may leave the fitted
        range (so the warning names the first such step), step by step through step_time_s."""
        last = num_steps - 1
        if not isinstance(self.attention, RooflineAttention) or (
                not self._warned[0] and self.fitted_range.outside(
                    None, decode_counts(num_seqs, context_sum + last * num_seqs), longest + last + 1)):
            return decode_steps_time_s(self, num_seqs, context_sum, longest, num_steps)
        per_layer, whole_s, sampling_s = self._terms(num_seqs, num_seqs)
        layers_s, attention_s = self.num_layers * per_layer, self.attention.per_rank.attention_s
        overhead_s = self.step_overhead_s
        times, pairs = [], context_sum + num_seqs
        for _ in range(num_steps):
            times.append(float(layers_s + attention_s(pairs, pairs, num_seqs) + overhead_s + whole_s
                               + sampling_s))
            pairs += num_seqs
        return times

    def _surely_inside(self, counts: tuple) -> bool:
        """A cheap sufficient test that a step lies inside the fitted range (FittedRange.outside:
        no sequence is longer than the context and new tokens of all of them)."""
        fitted = self.fitted_range
        return (counts[0] <= fitted.max_tokens and counts[-1] <= fitted.max_seqs
                and counts[1] + counts[4] + counts[0] <= fitted.max_context)

    def _terms(self, tokens: int, num_sampled: int) -> tuple:
        terms = self._by_tokens.get((tokens, num_sampled))
        if terms is None:
            terms = self._by_tokens[(tokens, num_sampled)] = self._token_terms(tokens, num_sampled)
        return terms

    def _time_s(self, counts: tuple, new, ctx, longest_decode: int) -> float:
        per_layer, whole_s, sampling_s = self._terms(counts[0], counts[6])
        attention = self.attention.time_s(new, ctx, counts, longest_decode)
        if self._grid:
            per_layer += attention
            attention = 0.0
        return float(self.num_layers * per_layer + attention + self.step_overhead_s + whole_s + sampling_s)

    def _token_terms(self, tokens: int, num_sampled: int) -> tuple:
        """(per-layer non-attention time, whole-model time, lm_head and sampler time), 0.0 if absent."""
        per_layer = self.layer(tokens)
        if self.allreduce is not None:
            per_layer += 2 * self.allreduce(tokens * self.allreduce_bytes_per_token)
        if self.moe is not None:
            per_layer += self.moe.time_s(tokens)
        whole_s = self.whole_model(tokens) if self.whole_model is not None else 0.0
        sampling_s = 0.0
        if num_sampled:
            sampling_s = self.sequence(num_sampled) if self.sequence is not None \
                else self.attention.sampling_s(num_sampled)
        return per_layer, whole_s, sampling_s
