"""A compact fitted step-cost form: a handful of coefficients times the step's work counts.

    time = step_overhead_s
         + linear_s_per_token * max(knee_tokens, tokens)   # weights read once, then GEMM-bound
         + token_s * tokens                                # per-token work (norms, activations, RoPE)
         + decode_ctx_s_per_token * sum(ctx over decodes)   # reading the decodes' KV cache
         + decode_s_per_seq * num_decodes
         + prefill_pair_s * sum over prefills new*(ctx + (new+1)/2)   # causal attention pairs
         + prefill_ctx_s_per_token * sum(ctx over prefills)             # reading cached context
         + prefill_s_per_seq * num_prefills
         + sample_s_per_seq * num_sampled                  # lm_head row, logits, sampler
         + seq_sqrt_s * sqrt(num_seqs)                     # per-sequence work that gets cheaper
                                                           # per sequence as the batch grows

``max(knee_tokens, tokens)`` is the roofline's knee in one term: below the knee a step costs the time
to stream the weights (``linear_s_per_token * knee_tokens``) whatever its size. Every coefficient
is non-negative (fitted by NNLS), so the form extrapolates monotonically past the fitted range.
``step_overhead_s`` is the per-step time no kernel accounts for (scheduler, input preparation,
launches, the host sync of sampled tokens); its source is recorded in the model file.

``seq_sqrt_s`` is the one concave term. On a CPU the second sequence of a decode step costs more
than the sixteenth (vLLM-CPU logs: +6 to +11 ms from 1 to 2 decodes, +3.7 ms per decode from 4 to 16):
small-batch GEMMs and per-request engine work grow sub-linearly with the batch, which no sum of
linear terms above a flat knee can follow. Files written before it existed load with it at 0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

# FittedRange and the work counts serve the table form too (cost_models/profiled.py); they live in
# their own module so that a table model's run does not create this module's class.
from cost_models.fitted_range import (FittedRange, PricedByCounts, decode_counts,  # noqa: F401 (re-exported)
                                      step_counts)


# Linear terms in the order of the feature vector after the knee term.
TERMS = ("step_overhead_s", "linear_s_per_token", "token_s", "decode_ctx_s_per_token",
         "decode_s_per_seq", "prefill_pair_s", "prefill_ctx_s_per_token", "prefill_s_per_seq",
         "sample_s_per_seq", "seq_sqrt_s")
# Terms added after the first files were written: a file without one means the term is 0.
LATER_TERMS = ("seq_sqrt_s",)


def design_matrix(counts: np.ndarray, knee_tokens: float) -> np.ndarray:
    """Feature matrix for an array of step counts (rows from step_counts)."""
    c = np.asarray(counts, float)
    tokens = c[:, 0]
    return np.column_stack([np.ones(len(c)), np.maximum(knee_tokens, tokens), tokens, c[:, 1], c[:, 2],
                            c[:, 3], c[:, 4], c[:, 5], c[:, 6], np.sqrt(c[:, 7])])


@dataclass(frozen=True)
class ParametricCostModel(PricedByCounts):
    """time = sum of TERMS coefficients x work counts; see the module docstring."""
    coefficients: dict[str, float]
    knee_tokens: float
    fitted_range: FittedRange | None = None
    name: str = "parametric"
    _coef: np.ndarray = field(init=False, repr=False, compare=False)
    _warned: list = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        later = {t: 0.0 for t in LATER_TERMS if t not in self.coefficients}
        object.__setattr__(self, "coefficients", {**self.coefficients, **later})
        missing = [t for t in TERMS if t not in self.coefficients]
        if missing:
            raise ValueError(f"coefficients.{missing[0]}: missing (a parametric model needs {', '.join(TERMS)})")
        for term in TERMS:
            value = self.coefficients[term]
            if not isinstance(value, (int, float)) or not np.isfinite(value) or value < 0:
                raise ValueError(f"coefficients.{term}: {value!r} is not a non-negative number")
        object.__setattr__(self, "_coef", np.array([float(self.coefficients[t]) for t in TERMS]))
        object.__setattr__(self, "_warned", [self.fitted_range is None])

    @property
    def step_overhead_s(self) -> float:
        """The per-step CPU time (what every pipeline stage pays: cost_models/pipeline.py)."""
        return self.coefficients["step_overhead_s"]

    @property
    def weight_read_s(self) -> float:
        """The floor a small step pays for the knee term: the fitted weight-streaming time."""
        return self.coefficients["linear_s_per_token"] * self.knee_tokens

    def _time_s(self, counts: tuple) -> float:
        c = self._coef
        tokens = counts[0]
        return float(c[0] + c[1] * max(self.knee_tokens, tokens) + c[2] * tokens + c[3] * counts[1]
                + c[4] * counts[2] + c[5] * counts[3] + c[6] * counts[4] + c[7] * counts[5]
                + c[8] * counts[6] + c[9] * math.sqrt(counts[7]))
