"""Decodes of unequal context: the one rule both the kernel tables and the physics model price them by.

A step's decode attention is measured (LLMServingSim's skew sweep) to take
t(mean) + alpha x (t(longest) - t(mean)), t(c) its time with every decode at context c: the
longest sequence's work is the tail of the kernel. alpha is the profile's own pooled fit
(``meta.yaml`` ``skew_fit``, cost_models/importers/llmservingsim.py; its values are in
cost_models/profiles/README.md); 0 where nothing measured it.
"""
from __future__ import annotations

from collections.abc import Callable


def skewed_time_s(time_at: Callable[[float], float], num_decodes: float, context_sum: float,
                  longest: float, alpha: float) -> float:
    """t(mean) + alpha (t(longest) - t(mean)) of ``time_at`` (a time at one decode context)."""
    mean = context_sum / num_decodes if num_decodes else 0.0
    mean_s = time_at(mean)
    if alpha and num_decodes > 1 and longest > mean:
        return mean_s + alpha * (time_at(longest) - mean_s)
    return mean_s
