"""BatchShape.decode_rows: a decode cohort's rows summarised as (count, total context, longest)
must read exactly like the same rows listed one by one, for every figure and every cost model."""
from __future__ import annotations

import numpy as np
import pytest

from cost_models.batch_shape import BatchShape
from tests.test_cost_model_contract import shipped_cost_models


def listed_and_summarised(rng, num_decodes: int, prefill_chunks: list[int]):
    ctx = rng.integers(1, 3000, num_decodes)
    chunk_ctx = rng.integers(0, 2000, len(prefill_chunks))
    listed = BatchShape.of(np.concatenate((np.ones(num_decodes, np.int64), prefill_chunks)),
                           np.concatenate((ctx, chunk_ctx)),
                           np.concatenate((np.ones(num_decodes, bool), np.ones(len(prefill_chunks), bool))))
    summarised = BatchShape(np.array(prefill_chunks, np.int64), chunk_ctx,
                            np.ones(len(prefill_chunks), bool),
                            (num_decodes, int(ctx.sum()), int(ctx.max()) if num_decodes else 0))
    return listed, summarised


CASES = [(97, []), (97, [512]), (26, [300, 40]), (1, [8]), (3, []), (2, [1024])]


@pytest.mark.parametrize("num_decodes,chunks", CASES)
def test_summarised_decode_rows_give_the_same_figures(num_decodes, chunks):
    listed, summarised = listed_and_summarised(np.random.default_rng(num_decodes), num_decodes, chunks)
    assert summarised.work_counts == listed.work_counts
    for name in ("num_seqs", "num_tokens", "num_decode_seqs", "num_prefill_seqs", "num_prefill_tokens",
                 "num_sampled", "longest_context", "longest_sequence", "longest_decode_context", "kind"):
        assert getattr(summarised, name) == getattr(listed, name), name


@pytest.mark.parametrize("num_decodes,chunks", CASES)
def test_every_cost_model_prices_summarised_rows_to_the_bit(num_decodes, chunks):
    listed, summarised = listed_and_summarised(np.random.default_rng(7 + num_decodes), num_decodes, chunks)
    import warnings
    for name, model in shipped_cost_models():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            assert model.step_time_s(summarised) == model.step_time_s(listed), name


def test_padding_keeps_summarised_rows_and_pads_at_the_longest_context():
    shape = BatchShape(np.array([1], np.int64), np.array([10], np.int64), np.ones(1, bool), (2, 90, 50))
    padded = shape.with_padding_rows(2)
    assert padded.decode_rows == (2, 90, 50)
    assert padded.context_tokens.tolist() == [10, 50, 50] and padded.num_seqs == 5


def _numpy_counts(new: np.ndarray, ctx: np.ndarray, samples: np.ndarray) -> tuple:
    """The counts as array arithmetic states them (an independent formulation)."""
    is_decode = new == 1
    decode_ctx = int(ctx[is_decode].sum())
    pairs = float((new * (ctx + (new + 1) / 2)).sum()) - float((ctx[is_decode] + 1).sum())
    return (int(new.sum()), decode_ctx, int(is_decode.sum()), pairs, int(ctx[~is_decode].sum()),
            int((~is_decode).sum()), int(samples.sum()), len(new))


def test_work_counts_match_array_arithmetic_on_random_batches():
    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(1, 40))
        new = np.where(rng.random(n) < 0.7, 1, rng.integers(1, 2048, n)).astype(np.int64)
        ctx = rng.integers(0, 8192, n).astype(np.int64)
        samples = rng.random(n) < 0.8
        counts = BatchShape(new, ctx, samples).work_counts
        reference = _numpy_counts(new, ctx, samples)
        assert counts[:3] == reference[:3] and counts[4:] == reference[4:]
        assert counts[3] == pytest.approx(reference[3], rel=1e-12, abs=1e-9)
        assert BatchShape.from_lists(new.tolist(), ctx.tolist(), samples.tolist()).work_counts == counts
