"""The A100 and H100 physics files from Vidur's profiles (cost_models/fit/physics_sources.py
from_vidur, from_vidur_attention): the legacy attention rows, pricing an unseen model, the files'
leave-one-model-out figures."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from cost_models.batch_shape import BatchShape
from cost_models.build_profiles import physics_jobs
from cost_models.factory import make_cost_model
from cost_models.hardware import load_hardware
from cost_models.model_spec import load_model
from cost_models.physics import TERMS
from cost_models.profiles import PROFILES_DIR
from cost_models.roofline_defaults import roofline_defaults

REFERENCE = Path(__file__).resolve().parents[1] / ".." / "shared" / "reference"
ATTENTION = REFERENCE / "vidur-profiles" / "legacy" / "a100" / "attention.csv"


def _need(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"{path} absent: the shared Vidur profiles are not on this machine")


def _shipped(name: str) -> dict:
    return json.loads((PROFILES_DIR / f"{name}.json").read_text())


def test_the_legacy_attention_rows_are_one_layers_kernel_times_the_layers():
    _need(ATTENTION)
    from cost_models.fit.physics_sources import ATTENTION_TERMS, from_vidur_attention
    from cost_models.importers import read_vidur_attention
    tables = read_vidur_attention(ATTENTION)
    assert len(tables.attention[4]) == 14658 and tables.tensor_parallel_size == 2
    assert tables.notes["shape"] == {"hidden_size": 8192, "num_attention_heads": 64, "num_kv_heads": 8}
    decodes, prefills = from_vidur_attention(ATTENTION)
    assert (decodes.part, prefills.part, decodes.spec.name, decodes.hardware.name) == (
        "attention: decodes", "attention: prefills", "llama-2-70b", "a100-80gb")
    assert len(decodes.shapes) == 128 * 79 and len(prefills.shapes) == 4206   # repeated grid points averaged

    def row(samples, counts):
        return samples.time_s[[i for i, s in enumerate(samples.shapes) if s.work_counts[:6] == counts][0]]
    # By hand from the CSV (attn_decode / attn_prefill medians, ms, x 80 layers):
    # one decode at kv_cache_size 32: 0.015; 64 decodes at 1024: 0.122 twice;
    assert row(decodes, (1, 32, 1, 0.0, 0, 0)) == pytest.approx(80 * 0.015e-3, rel=1e-12)
    assert row(decodes, (64, 64 * 1024, 64, 0.0, 0, 0)) == pytest.approx(80 * 0.122e-3, rel=1e-12)
    # a 4096-token chunk from an empty cache: 2.314 and 2.316; a 1024 chunk after 1024 cached:
    # 0.32, 0.319, 0.314, 0.316 (pairs 1024 x (1024 + 1025 / 2)).
    assert row(prefills, (4096, 0, 0, 4096 * 4097 / 2, 0, 1)) == pytest.approx(80 * 2.315e-3, rel=1e-12)
    assert row(prefills, (1024, 0, 0, 1024 * (1024 + 512.5), 1024, 1)) == pytest.approx(
        80 * (0.32 + 0.319 + 0.314 + 0.316) / 4 * 1e-3, rel=1e-12)
    # Each part is fitted on the attention terms alone.
    for samples in (decodes, prefills):
        used = {TERMS[i] for i in np.flatnonzero(samples.features(1.0).any(axis=0))}
        assert used <= set(ATTENTION_TERMS) and {"layer_launch", "layer_seq"} <= used


@pytest.mark.parametrize("gpu", ["a100", "h100"])
def test_a_shipped_vidur_file_prices_an_unseen_model_from_its_config(gpu):
    # Llama-2-13B was profiled by neither; its config lies inside the fitted models' spans.
    name, hardware = f"physics-{gpu}-kernels", load_hardware({"a100": "a100-80gb", "h100": "h100-sxm"}[gpu])
    data, spec = _shipped(name), load_model("llama-2-13b")
    assert spec.name not in data["fitted_on"]["models"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = make_cost_model("physics", {"profile": name}, spec, hardware, 2)
    filled = ["lm_head", "logits"] + (["prefill_attention", "decode_kv_read", "prefill_kv_read"] if gpu == "h100" else [])
    assert list(data["filled_terms"]) == filled
    assert [str(w.message) for w in caught] == [
        f"cost model {name!r}: {', '.join(filled)} not measured by its sources, priced by rule (filled_terms): "
        + "; ".join(f"{t}: {h}" for t, h in data["filled_terms"].items())]
    c = data["coefficients"]
    assert (c["lm_head"], c["logits"]) == (c["gemm"], c["activation_traffic"])   # the fill rules
    if gpu == "h100":   # attention as the roofline prices it on the H100 (roofline_defaults.json)
        defaults = roofline_defaults("h100-sxm")
        assert c["decode_kv_read"] == pytest.approx(1 / defaults["bandwidth_efficiency"], rel=1e-3)
        assert c["prefill_attention"] == pytest.approx(1 / defaults["compute_efficiency"], rel=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # the H100 file saw one sequence a step
        short, long = (model.step_time_s(BatchShape.of([1] * 64, [c] * 64)) for c in (32, 1024))
        prefill = model.step_time_s(BatchShape.of([2048], [0]))
    # The decodes' KV read, at the file's coefficient: 64 x 992 more keys of 40 layers x 40 / 2 heads.
    kv_s = 64 * 992 * spec.kv_bytes_per_token(2) / hardware.memory_bandwidth_Bps
    assert long - short == pytest.approx(data["coefficients"]["decode_kv_read"] * kv_s, rel=1e-9)
    assert long > short
    assert prefill > long > 0


@pytest.mark.parametrize("name", ["physics-a100-kernels", "physics-h100-kernels"])
def test_a_vidur_files_leave_one_model_out_figures_are_a_refits(name):
    _, sources, mode, hardware = {job[0]: job for job in physics_jobs(REFERENCE)}[name]
    for path in sources:
        _need(path)
    from cost_models.fit.physics_fit import leave_one_model_out
    from cost_models.fit.physics_sources import read_physics_sources
    data = _shipped(name)
    lomo = leave_one_model_out(read_physics_sources(sources, mode, hardware))
    assert lomo == data["leave_one_model_out"]
    assert set(lomo) == set(data["fitted_on"]["models"]) and "phi-2" not in lomo
