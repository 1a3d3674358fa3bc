"""Operator tables (LLMServingSim, Vidur) -> a TableCostModel, measured on held-out grid points.

Every ``holdout_every``-th point of each table is left out of the model and predicted from the
rest, so the reported error is that of the model that is written out.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cost_models.batch_shape import BatchShape
from cost_models.fit.report import errors, holdout_mask
from cost_models.importers.forms import OperatorTables
from cost_models.parametric import step_counts
from cost_models.attention_grid import AttentionGrid, GridTable
from cost_models.moe import ExpertTable
from cost_models.profiled import Table1D

_EXPONENTS = np.linspace(1.0, 4.0, 61)


@dataclass(frozen=True)
class TableFit:
    layer: Table1D
    whole_model: Table1D | None
    sequence: Table1D | None
    attention: AttentionGrid | None
    allreduce: Table1D | None
    moe: ExpertTable | None
    holdout_errors: dict   # component -> errors(); attention also per family
    attention_holdout: tuple | None = None  # (predicted_s, measured_s, families) of the held-out rows


def fit_tables(tables: OperatorTables, holdout_every: int = 5,
               routing: tuple[int, int] | None = None) -> TableFit:
    """``routing``: (num_experts, top_k) of an MoE model, which its moe.csv is read with."""
    report = {}
    layer, report["dense_layer"] = _summed_table(tables.layer_ops, holdout_every)
    whole_model, sequence = None, None
    if tables.model_ops:
        whole_model, report["whole_model_ops"] = _summed_table(tables.model_ops, holdout_every)
    if tables.sequence_ops:
        sequence, report["lm_head_and_sampler"] = _summed_table(tables.sequence_ops, holdout_every)
    attention, points = None, None
    if tables.attention is not None:
        attention, report["attention"], points = fit_attention(*tables.attention, holdout_every=holdout_every)
    allreduce = None
    if tables.allreduce is not None:
        allreduce, report["allreduce"] = _single_table(*tables.allreduce, holdout_every)
    moe = None
    if tables.moe is not None:
        moe, report["moe_experts"] = _expert_table(*tables.moe, routing, holdout_every)
    return TableFit(layer, whole_model, sequence, attention, allreduce, moe, report, points)


def _expert_table(tokens, activated, time_s, routing, holdout_every: int) -> tuple[ExpertTable, dict]:
    """The expert table from moe.csv with every ``holdout_every``-th point held out, as long as its
    token row keeps two points (a row is a line in the activated experts) and it is not in the
    first or last row (they bound the table)."""
    if routing is None:
        raise ValueError("moe.csv: the profile times MoE experts but the model has none (num_experts 0)")
    held = holdout_mask(len(time_s), holdout_every)
    held[np.isin(tokens, [tokens.min(), tokens.max()])] = False
    for t in np.unique(tokens):
        row = np.nonzero(tokens == t)[0]
        if (~held[row]).sum() < 2:
            held[row] = False
    train = ExpertTable(tokens[~held], activated[~held], time_s[~held], *routing)
    predicted = np.array([train.time_at(t, a) for t, a in zip(tokens[held], activated[held])])
    return train, errors(predicted, time_s[held])


def _summed_table(ops: dict, holdout_every: int) -> tuple[Table1D, dict]:
    """One table: the sum of the operators at each x of the first operator's grid."""
    x = next(iter(ops.values()))[0]
    y = sum(np.interp(x, ox, oy) for ox, oy in ops.values())
    return _single_table(x, y, holdout_every)


def _single_table(x: np.ndarray, y: np.ndarray, holdout_every: int) -> tuple[Table1D, dict]:
    held = holdout_mask(len(x), holdout_every)
    held[0] = held[-1] = False  # the ends bound the table; only inner points are held out
    table = Table1D(x[~held], y[~held])
    predicted = np.array([table(v) for v in x[held]])
    return table, errors(predicted, y[held])


def fit_attention(chunk, cached, n_decode, context, time_s, holdout_every: int = 5):
    """The three compact attention tables and the overlap exponent from profiled grid rows."""
    held = holdout_mask(len(time_s), holdout_every)
    train = ~held
    is_prefill, is_decode = (n_decode == 0) & (chunk > 0), (chunk == 0) & (n_decode > 0)
    prefill = _grid([chunk, cached], train & is_prefill, time_s)
    decode = _grid([n_decode, context], train & is_decode, time_s)
    base_s = float(prefill(float(chunk[chunk > 0].min()), 0.0))
    mixed_rows = (chunk > 0) & (n_decode > 0)
    prefill_part = np.array([prefill(c, k) for c, k in zip(chunk, cached)])
    extra = np.where(mixed_rows, time_s - prefill_part, np.nan)
    mixed = _grid([chunk, n_decode, context], train & mixed_rows & (cached == 0), extra)
    extra_part = np.array([max(mixed(c, n, x), 0.0) if m else 0.0
                           for c, n, x, m in zip(chunk, n_decode, context, mixed_rows)])
    exponent = _exponent_table(chunk, n_decode, train & mixed_rows, prefill_part, extra_part, time_s, base_s)
    grid = AttentionGrid(prefill, decode, mixed, base_s, exponent)
    predicted = np.array([_predict(grid, *row) for row in zip(chunk[held], cached[held], n_decode[held], context[held])])
    families = np.where(is_prefill, "prefill", np.where(is_decode, "decode", "mixed"))[held]
    report = {f: errors(predicted[families == f], time_s[held][families == f]) for f in ("prefill", "decode", "mixed")}
    report["all"] = errors(predicted, time_s[held])
    return grid, report, (predicted, time_s[held], families)


def _predict(grid: AttentionGrid, chunk, cached, n_decode, context) -> float:
    new = ([int(chunk)] if chunk else []) + [1] * int(n_decode)
    ctx = ([int(cached)] if chunk else []) + [int(context)] * int(n_decode)
    new_a, ctx_a = np.array(new), np.array(ctx)
    return grid.time_s(new_a, ctx_a, step_counts(BatchShape.of(new_a, ctx_a)))


def _exponent_table(chunk, n_decode, rows, prefill_part, extra_part, measured, base_s) -> GridTable:
    """The overlap exponent per (chunk, n_decode): how far a step's decodes hide under its prefill.

    It depends on how many thread blocks each part launches against the GPU's SMs, which the chunk
    and the decode count set; one global exponent leaves ~8% error on the LLMServingSim grid, one
    per (chunk, n_decode) about 3%.
    """
    above = np.maximum(prefill_part - base_s, 0.0)
    best = np.full(len(chunk), np.nan)
    for c, n in set(zip(chunk[rows], n_decode[rows])):
        group = rows & (chunk == c) & (n_decode == n)
        losses = [np.abs((base_s + (above[group] ** p + extra_part[group] ** p) ** (1 / p)) / measured[group] - 1).mean()
                  for p in _EXPONENTS]
        best[group] = _EXPONENTS[int(np.argmin(losses))]
    return _grid([chunk, n_decode], rows, best)


def _grid(axes_values: list[np.ndarray], rows: np.ndarray, values: np.ndarray) -> GridTable:
    """A product grid over the values the rows take on each axis, gaps filled along the axes."""
    axes = [np.unique(a[rows]) for a in axes_values]
    table = np.full([len(a) for a in axes], np.nan)
    index = [np.searchsorted(a, v[rows]) for a, v in zip(axes, axes_values)]
    table[tuple(index)] = values[rows]
    return GridTable(axes, _fill(table, [np.asarray(a, float) for a in axes]))


def _fill(table: np.ndarray, axes: list[np.ndarray]) -> np.ndarray:
    """Fill NaN cells from their nearest profiled neighbours.

    Each pass fills the cells that known cells bracket on some axis, interpolating linearly in that
    axis's value, as GridTable does (attention work is affine in tokens and sequences between grid
    points; filling on log2 axes over-predicted held-out points: RTX PRO 6000 Llama-3.1-8B tp 1
    attention 5.25% -> 3.91% MAPE, and every LLMServingSim profile and family improves). The axis
    used is the one whose bracket is narrowest in octaves, a width that means the same on a token
    axis and a sequence axis. A pass that can bracket nothing copies the nearest known value along
    any axis (flat past the grid's ends), as the tables are flat below their first points anyway.
    """
    table = table.copy()
    octaves = [np.log2(a + 1) for a in axes]   # + 1: 0 is a valid grid point
    while np.isnan(table).any():
        filled = _fill_pass(table, axes, octaves, extrapolate=False)
        if not filled and not _fill_pass(table, axes, octaves, extrapolate=True):
            raise ValueError("attention grid: some cells have no profiled neighbour on any axis")
    return table


def _fill_pass(table: np.ndarray, axes: list[np.ndarray], octaves: list[np.ndarray], extrapolate: bool) -> int:
    updates = {}
    for cell in zip(*np.nonzero(np.isnan(table))):
        best = None
        for axis, (coord, octave) in enumerate(zip(axes, octaves)):
            line = table[cell[:axis] + (slice(None),) + cell[axis + 1:]]
            known = np.nonzero(~np.isnan(line))[0]
            if not len(known):
                continue
            i = cell[axis]
            below, above = known[known < i], known[known > i]
            if len(below) and len(above):
                lo, hi = below[-1], above[0]
                span = octave[hi] - octave[lo]
                value = line[lo] + (line[hi] - line[lo]) * (coord[i] - coord[lo]) / (coord[hi] - coord[lo])
            elif extrapolate:
                nearest = known[np.argmin(np.abs(octave[known] - octave[i]))]
                span, value = 1e9 + abs(octave[nearest] - octave[i]), line[nearest]
            else:
                continue
            if best is None or span < best[0]:
                best = (span, value)
        if best is not None:
            updates[cell] = best[1]
    for cell, value in updates.items():
        table[cell] = value
    return len(updates)
