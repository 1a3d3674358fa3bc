"""Non-negative least squares (Lawson-Hanson active set) in numpy: scipy is not a dependency.

Every term of the parametric step-cost form is a cost that work adds, so a negative coefficient
would be a fitting artefact that extrapolates to negative time; NNLS rules that out.
"""
from __future__ import annotations

import numpy as np


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """argmin ||a x - b|| subject to x >= 0 (Lawson & Hanson 1974, chapter 23)."""
    a = np.asarray(a, float)
    b = np.asarray(b, float)
    num_cols = a.shape[1]
    # Columns differ by many orders of magnitude (seconds per token vs per pair): scale them to
    # unit norm so the active-set tolerance means the same for each, then undo the scaling.
    scale = np.linalg.norm(a, axis=0)
    scale[scale == 0] = 1.0
    a = a / scale
    x = np.zeros(num_cols)
    passive = np.zeros(num_cols, bool)
    tol = 10 * np.finfo(float).eps * max(a.shape) * max(1.0, np.abs(a).max())
    for _ in range(3 * num_cols + 10):
        gradient = a.T @ (b - a @ x)
        candidates = ~passive & (gradient > tol)
        if not candidates.any():
            break
        passive[np.argmax(np.where(candidates, gradient, -np.inf))] = True
        x = _inner_loop(a, b, x, passive)
    return x / scale


def _inner_loop(a: np.ndarray, b: np.ndarray, x: np.ndarray, passive: np.ndarray) -> np.ndarray:
    """Solve on the passive set; step back towards x while any passive coefficient goes negative."""
    while True:
        z = np.zeros_like(x)
        z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
        if (z[passive] > 0).all():
            return z
        negative = passive & (z <= 0)
        alpha = np.min(x[negative] / (x[negative] - z[negative]))
        x = x + alpha * (z - x)
        passive &= x > 1e-15
        if not passive.any():
            return np.zeros_like(x)
