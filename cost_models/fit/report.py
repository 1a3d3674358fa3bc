"""Held-out error per family (prefill, decode, mixed) and the parity plot of a fit."""
from __future__ import annotations

from pathlib import Path

import numpy as np

FAMILIES = ("prefill", "decode", "mixed")


def holdout_mask(num_rows: int, holdout_every: int) -> np.ndarray:
    """True for the rows held out: every ``holdout_every``-th row (the 5th, 10th, ... for 5); none for 0."""
    if holdout_every == 1 or holdout_every < 0:
        raise ValueError(f"holdout_every: {holdout_every} is not 0 (no hold-out) or an integer >= 2")
    if holdout_every == 0:
        return np.zeros(num_rows, bool)
    return np.arange(num_rows) % holdout_every == holdout_every - 1


def errors(predicted: np.ndarray, measured: np.ndarray) -> dict:
    """MAPE and max absolute relative error, in percent, with the number of points; and the signed
    error of the summed time (``total_error_pct``), which is what a simulated latency, a sum of
    step times, inherits."""
    if len(measured) == 0:
        return {"n": 0, "mape_pct": None, "max_error_pct": None, "total_error_pct": None}
    predicted, measured = np.asarray(predicted, float), np.asarray(measured, float)
    rel = np.abs(predicted / measured - 1) * 100
    total = (predicted.sum() / measured.sum() - 1) * 100
    return {"n": int(len(rel)), "mape_pct": round(float(rel.mean()), 3), "max_error_pct": round(float(rel.max()), 3),
            "total_error_pct": round(float(total), 3)}


def family_errors(predicted: np.ndarray, measured: np.ndarray, families: list[str] | np.ndarray,
                  mask: np.ndarray) -> dict:
    """errors() per family over the rows in mask, plus 'all'; families with no rows are left out."""
    families = np.asarray(families)
    out = {}
    for family in (*FAMILIES, *sorted(set(families) - set(FAMILIES))):
        rows = mask & (families == family)
        if rows.any():
            out[family] = errors(predicted[rows], measured[rows])
    out["all"] = errors(predicted[mask], measured[mask])
    return out


def format_errors(title: str, table: dict) -> str:
    lines = [title]
    for family, e in table.items():
        if e["n"]:
            lines.append(f"  {family:<10} n={e['n']:<6} MAPE {e['mape_pct']:7.2f}%   max {e['max_error_pct']:7.2f}%"
                         f"   total time {e['total_error_pct']:+7.2f}%")
    return "\n".join(lines)


def parity_plot(path: Path, predicted_s: np.ndarray, measured_s: np.ndarray, families, held_out: np.ndarray,
                title: str) -> Path:
    """Predicted against measured on log axes; held-out points coloured by family, training points grey."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families = np.asarray(families)
    pred_ms, meas_ms = np.asarray(predicted_s) * 1e3, np.asarray(measured_s) * 1e3
    fig, ax = plt.subplots(figsize=(5.5, 5.5))
    ax.scatter(meas_ms[~held_out], pred_ms[~held_out], s=6, c="0.75", label="fitted on")
    for family, colour in zip(FAMILIES, ("tab:blue", "tab:orange", "tab:green")):
        rows = held_out & (families == family)
        if rows.any():
            ax.scatter(meas_ms[rows], pred_ms[rows], s=12, c=colour, label=f"held out: {family}")
    lo, hi = float(min(meas_ms.min(), pred_ms.min())), float(max(meas_ms.max(), pred_ms.max()))
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel="measured (ms)", ylabel="predicted (ms)", title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
