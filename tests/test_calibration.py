"""The calibration harness: grid, per-request attention, quick end-to-end runs (CPU; CUDA if any)."""
from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from calibration.grid import MAX_DECODE_KV_TOKENS, StepShape, full_grid, quick_grid

REFERENCE = Path(__file__).resolve().parents[1] / ".." / "shared" / "reference"
REPO = Path(__file__).resolve().parents[1]

TIMINGS_COLUMNS = ["model", "kind", "chunk", "prefill_ctx", "n_decode", "decode_ctx", "tokens",
                   "mode", "rep", "time_ms"]
META_KEYS = {"model", "model_config", "device", "device_name", "driver", "cuda", "torch", "dtype",
             "tp", "repeats", "warmup", "grid", "date", "kv_cache", "host", "cuda_graph",
             "completed", "budget_exhausted", "shapes_skipped", "all_reduce_included"}

# A two-layer GQA model with QK-norm: small enough that the quick grid runs in seconds.
SMALL_CONFIG = {"model_type": "qwen3", "num_hidden_layers": 2, "hidden_size": 64,
                "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 2048}


# -- grid (no torch needed) ---------------------------------------------------------------------

def test_full_grid_respects_the_decode_kv_limit():
    decodes = [s for s in full_grid() if s.kind == "decode"]
    assert all(s.n_decode * s.decode_ctx <= MAX_DECODE_KV_TOKENS for s in decodes)
    assert StepShape("decode", n_decode=128, decode_ctx=8192) in decodes    # exactly 2**20
    assert StepShape("decode", n_decode=256, decode_ctx=8192) not in decodes


def test_full_grid_has_the_reference_counts():
    kinds = [s.kind for s in full_grid()]
    assert (kinds.count("decode"), kinds.count("prefill"), kinds.count("mixed")) == (38, 24, 9)


def test_full_grid_matches_the_h200_reference_shapes():
    steps = REFERENCE / "h200" / "steps.csv"
    if not steps.is_file():
        pytest.skip(f"H200 reference not found at {steps}")
    with open(steps, newline="") as f:
        ref = {(r["kind"], int(r["chunk"]), int(r["prefill_ctx"]), int(r["n_decode"]),
                int(r["decode_ctx"]), int(r["tokens"])) for r in csv.DictReader(f)}
    ours = {tuple(s.columns().values()) for s in full_grid()}
    assert ours == ref


def test_mixed_shape_groups_decodes_then_chunk():
    shape = StepShape("mixed", chunk=256, n_decode=8, decode_ctx=1024)
    assert shape.tokens == 264
    assert [(g.num_seqs, g.new_tokens, g.context_tokens) for g in shape.groups] == \
        [(8, 1, 1024), (1, 256, 0)]
    assert shape.kv_tokens == 8 * 1025 + 256
    assert shape.num_sampled == 9


def test_shape_rejects_a_kind_that_does_not_fit():
    with pytest.raises(ValueError, match="kind 'decode'"):
        StepShape("decode", chunk=16, n_decode=1, decode_ctx=128)


# -- options (no torch needed) ------------------------------------------------------------------

def test_options_reject_cuda_graph_on_cpu(tmp_path):
    from calibration.options import CalibrationOptions
    with pytest.raises(ValueError, match="cuda_graph: 'all' needs device 'cuda'"):
        CalibrationOptions(model="tiny-llama", out_dir=tmp_path, cuda_graph="all")


def test_options_reject_unknown_dtype(tmp_path):
    from calibration.options import CalibrationOptions
    with pytest.raises(ValueError, match="dtype: 'int8' is not one of bf16, fp16, fp32"):
        CalibrationOptions(model="tiny-llama", out_dir=tmp_path, dtype="int8")


def test_importing_calibration_cli_does_not_import_torch():
    code = ("import sys, calibration.cli, calibration.compare_reference; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, check=True)
    assert out.stdout.strip() == "False"


# -- compare_reference (stdlib only) ------------------------------------------------------------

def _write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def test_compare_reference_joins_medians_on_shape_and_mode(tmp_path):
    from calibration.compare_reference import compare, our_medians, reference_medians, summarize
    shape = ["decode", 0, 0, 8, 512, 8]
    _write_csv(tmp_path / "timings.csv", TIMINGS_COLUMNS,
               [["m", *shape, "cuda_graph", rep, ms] for rep, ms in enumerate([9.0, 11.0, 40.0])]
               + [["m", "prefill", 16, 0, 0, 0, 16, "eager", 0, 30.0]])
    ref_header = ["run", "model", *TIMINGS_COLUMNS[1:8], "median_ms", "min_ms", "max_ms"]
    _write_csv(tmp_path / "steps.csv", ref_header,
               [[1, "ref", *shape, "cuda_graph", 8.0, 7, 9],
                [2, "ref", *shape, "cuda_graph", 12.0, 11, 13],
                [1, "ref", "prefill", 16, 0, 0, 0, 16, "cuda_graph", 5.0, 4, 6]])
    rows = compare(our_medians(tmp_path / "timings.csv", model="ref"),
                   reference_medians(tmp_path / "steps.csv"))
    # ours: median(9, 11, 40) = 11; reference: median of runs (8, 12) = 10; eager prefill has no match
    assert len(rows) == 1
    assert (rows[0]["ours_ms"], rows[0]["ref_ms"], rows[0]["ratio"], rows[0]["error_pct"]) == \
        (11.0, 10.0, 1.1, 10.0)
    summary = summarize(rows)
    assert summary == [{"kind": "decode", "mode": "cuda_graph", "n": 1, "median_ratio": 1.1,
                        "mape_pct": 10.0, "max_abs_error_pct": 10.0}]


# -- torch from here on -------------------------------------------------------------------------

def _torch():
    return pytest.importorskip("torch",
                               reason="torch not installed (pip install servesim[calibration])")


def _padded_attention(torch, q, k_ctx, v_ctx, k_new, v_new, seqs):
    """Reference: every sequence padded to the longest, explicit masks, K/V heads repeated."""
    heads, kv_heads = q.shape[1], k_new.shape[1]
    max_new, max_kv = max(n for n, _ in seqs), max(n + c for n, c in seqs)
    out, tok = [], 0
    for i, (new, ctx) in enumerate(seqs):
        keys = torch.cat([k_ctx[i][:ctx], k_new[tok:tok + new]])
        vals = torch.cat([v_ctx[i][:ctx], v_new[tok:tok + new]])
        pad_k = torch.zeros(max_kv, kv_heads, q.shape[2]); pad_k[:ctx + new] = keys
        pad_v = torch.zeros(max_kv, kv_heads, q.shape[2]); pad_v[:ctx + new] = vals
        pad_q = torch.zeros(max_new, heads, q.shape[2]); pad_q[:new] = q[tok:tok + new]
        pad_k = pad_k.repeat_interleave(heads // kv_heads, dim=1)
        pad_v = pad_v.repeat_interleave(heads // kv_heads, dim=1)
        scores = torch.einsum("qhd,khd->hqk", pad_q, pad_k) / math.sqrt(q.shape[2])
        row = torch.arange(max_new)[:, None]
        col = torch.arange(max_kv)[None, :]
        visible = (col < ctx + new) & (col <= ctx + row)
        scores = scores.masked_fill(~visible, float("-inf"))
        probs = torch.nan_to_num(torch.softmax(scores, dim=-1))
        out.append(torch.einsum("hqk,khd->qhd", probs, pad_v)[:new])
        tok += new
    return torch.cat(out).reshape(tok, heads * q.shape[2])


def _attention_case(torch, device, dtype):
    """Groups of different (new, context): decodes at two contexts, a chunk on cached context and
    a chunk from scratch. Returns (ours, padded reference), both fp32 on the CPU."""
    from calibration.attention import attend, plan_groups
    from calibration.grid import SeqGroup
    gen = torch.Generator().manual_seed(0)
    heads, kv_heads, dim = 4, 2, 16
    groups = (SeqGroup(2, 1, 5), SeqGroup(3, 1, 2), SeqGroup(1, 4, 3), SeqGroup(1, 3, 0))
    seqs = [(g.new_tokens, g.context_tokens) for g in groups for _ in range(g.num_seqs)]
    tokens = sum(n for n, _ in seqs)
    q = torch.randn(tokens, heads, dim, generator=gen)
    k_new = torch.randn(tokens, kv_heads, dim, generator=gen)
    v_new = torch.randn(tokens, kv_heads, dim, generator=gen)
    k_ctx = [torch.randn(c, kv_heads, dim, generator=gen) for _, c in seqs]
    v_ctx = [torch.randn(c, kv_heads, dim, generator=gen) for _, c in seqs]
    # Cache layout: each sequence's context then its new slots, sequences back to back.
    k_cache = torch.full((sum(n + c for n, c in seqs), kv_heads, dim), float("nan"))
    v_cache = k_cache.clone()
    slot = 0
    for i, (new, ctx) in enumerate(seqs):
        k_cache[slot:slot + ctx], v_cache[slot:slot + ctx] = k_ctx[i], v_ctx[i]
        slot += ctx + new
    on = [t.to(device, dtype) for t in (q, k_new, v_new, k_cache, v_cache)]
    got = attend(*on[:3], plan_groups(groups, torch.device(device)), *on[3:])
    assert not torch.isnan(on[3]).any()   # every new key was written into its slot
    want = _padded_attention(torch, q, k_ctx, v_ctx, k_new, v_new, seqs)
    return got.float().cpu(), want


def test_attention_per_request_matches_a_padded_reference():
    torch = _torch()
    got, want = _attention_case(torch, "cpu", torch.float32)
    assert got.shape == want.shape == (12, 4 * 16)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_attention_per_request_on_cuda_bf16_matches_a_padded_reference():
    torch = _torch()
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    got, want = _attention_case(torch, "cuda", torch.bfloat16)
    torch.testing.assert_close(got, want, rtol=3e-2, atol=3e-2)


def test_moe_layer_sums_the_top_k_experts_of_each_token():
    torch = _torch()
    from calibration.decoder import _moe, _swiglu
    gen = torch.Generator().manual_seed(1)
    experts, hidden, inter, top_k, tokens = 4, 8, 6, 2, 5
    w = {"router": torch.randn(experts, hidden, generator=gen),
         "w13": torch.randn(experts, 2 * inter, hidden, generator=gen),
         "w2": torch.randn(experts, hidden, inter, generator=gen)}
    h = torch.randn(tokens, hidden, generator=gen)
    want = torch.zeros_like(h)
    for t in range(tokens):
        probs = torch.softmax(h[t] @ w["router"].T, dim=-1)
        top = torch.topk(probs, top_k)
        for p, e in zip(top.values / top.values.sum(), top.indices):
            want[t] += p * _swiglu(h[t:t + 1], w["w13"][e], w["w2"][e])[0]
    torch.testing.assert_close(_moe(h, w, top_k), want, rtol=1e-5, atol=1e-5)


def _small_model(tmp_path: Path) -> str:
    path = tmp_path / "small" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(SMALL_CONFIG))
    return str(path)


def _read_timings(out_dir: Path) -> list[dict]:
    with open(out_dir / "timings.csv", newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == TIMINGS_COLUMNS
        return list(reader)


def _run_quick(tmp_path: Path, **kw) -> Path:
    from calibration.harness import CalibrationOptions, run_calibration
    options = CalibrationOptions(model=_small_model(tmp_path), out_dir=tmp_path / "out",
                                 quick=True, repeats=2, warmup=1, **kw)
    return run_calibration(options)


def test_quick_cpu_run_writes_one_row_per_repetition(tmp_path):
    _torch()
    out = _run_quick(tmp_path)
    rows = _read_timings(out)
    assert len(rows) == 2 * len(quick_grid())
    assert {r["kind"] for r in rows} == {"decode", "prefill", "mixed"}
    assert {r["mode"] for r in rows} == {"eager"}
    assert all(math.isfinite(float(r["time_ms"])) and float(r["time_ms"]) > 0 for r in rows)
    assert sorted({r["rep"] for r in rows}) == ["0", "1"]
    assert {r["model"] for r in rows} == {"small"}
    assert not (out / "timings.csv.partial").exists()
    meta = json.loads((out / "meta.json").read_text())
    assert META_KEYS <= set(meta)
    # The device's ceilings, measured before the grid, in the H200 reference's device.csv form; a
    # CPU run's fp32 GEMM is no BF16 peak, so the importer keeps only its copy bandwidth.
    with open(out / meta["ceilings_file"], newline="") as f:
        ceilings = {r["test"]: float(r["value"]) for r in csv.DictReader(f) if r["run"] == "1"}
    assert set(ceilings) == {"copy_GBps", "gemm_fp32_TFLOPs"} and min(ceilings.values()) > 0
    from cost_models.importers.device_ceilings import read_device_ceilings
    read = read_device_ceilings(out / "timings.csv")
    assert read.memory_bandwidth_Bps == ceilings["copy_GBps"] * 1e9 and read.bf16_flops is None
    assert meta["completed"] is True and meta["model_config"]["qk_norm"] is True
    assert len(meta["grid"]) == len(quick_grid()) and meta["repeats"] == 2


def test_kv_pool_gives_each_layer_its_own_cache_only_where_it_fits():
    _torch()
    from calibration.kv_cache import plan_pool
    small = StepShape("decode", n_decode=1, decode_ctx=99)    # 100 KV slots
    large = StepShape("decode", n_decode=4, decode_ctx=99)    # 400 KV slots
    plan = plan_pool((small, large), num_layers=8, bytes_per_slot=10, budget_bytes=10 * 1000)
    assert plan.pool_tokens == 1000                      # the budget, below 8 layers x 400 slots
    assert (plan.num_slices(small), plan.num_slices(large)) == (8, 2)
    assert plan.layout((small,)) == "per_layer"
    assert plan.layout((small, large)) == "per_layer_when_fits"
    with pytest.raises(ValueError, match="kv_budget_bytes: 100 holds 10 KV slots"):
        plan_pool((small,), num_layers=8, bytes_per_slot=10, budget_bytes=100)


def test_kv_cache_is_shared_by_layers_when_the_budget_is_small(tmp_path):
    _torch()
    grid = (StepShape("decode", n_decode=4, decode_ctx=64),)
    slot_bytes = 2 * 2 * 16 * 4            # K+V, 2 KV heads, head_dim 16, fp32
    from calibration.harness import CalibrationOptions, run_calibration
    out = run_calibration(CalibrationOptions(
        model=_small_model(tmp_path), out_dir=tmp_path / "out", repeats=1, warmup=0, grid=grid,
        kv_budget_bytes=4 * 65 * slot_bytes))   # room for one layer's cache, not two
    meta = json.loads((out / "meta.json").read_text())
    assert meta["kv_cache"]["layout"] == "shared"
    assert meta["kv_cache"]["pool_tokens"] == 4 * 65


def test_time_budget_stops_taking_new_shapes(tmp_path):
    _torch()
    out = _run_quick(tmp_path, time_budget_s=1e-9)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["budget_exhausted"] is True and meta["shapes_timed"] == 0
    assert len(meta["shapes_skipped"]) == len(quick_grid())
    assert _read_timings(out) == []


def test_tp_shard_divides_heads_and_ffn():
    _torch()
    from calibration.decoder import shard
    from cost_models.model_spec import load_model
    rank = shard(load_model("llama-3.1-8b"), 4)
    assert (rank.num_heads, rank.num_kv_heads, rank.intermediate_size) == (8, 2, 3584)
    assert rank.vocab_size == 128256 // 4
    with pytest.raises(ValueError, match="tp: 3 must"):
        shard(load_model("llama-3.1-8b"), 3)


@pytest.mark.gpu
def test_quick_cuda_run_times_eager_and_cuda_graph(tmp_path):
    torch = _torch()
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    out = _run_quick(tmp_path, device="cuda", dtype="bf16", cuda_graph="all")
    rows = _read_timings(out)
    assert len(rows) == 2 * 2 * len(quick_grid())          # eager and cuda_graph, 2 reps each
    assert {r["mode"] for r in rows} == {"eager", "cuda_graph"}
    meta = json.loads((out / "meta.json").read_text())
    assert meta["graph_errors"] == [] and meta["device"] == "cuda"


def test_cli_writes_timings_and_meta(tmp_path):
    _torch()
    from click.testing import CliRunner
    from calibration.cli import calibrate
    out = tmp_path / "cli-out"
    result = CliRunner().invoke(calibrate, ["--model", _small_model(tmp_path), "--quick",
                                            "--repeats", "1", "--warmup", "0", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert len(_read_timings(out)) == len(quick_grid())
    assert json.loads((out / "meta.json").read_text())["dtype"] == "fp32"


def test_cli_names_the_bad_option():
    from click.testing import CliRunner
    from calibration.cli import calibrate
    result = CliRunner().invoke(calibrate, ["--model", "tiny-llama", "--cuda-graph", "all",
                                            "-o", "unused"])
    assert result.exit_code == 2
    assert "cuda_graph: 'all' needs device 'cuda'" in result.output


@pytest.mark.slow
def test_gpu_capture_script_dry_run_on_cpu(tmp_path):
    """The GPU script's own logic (two models, logs, compare) on CPU, so it cannot fail on the GPU
    for a silly reason."""
    _torch()
    models = tmp_path / "models"
    out = tmp_path / "out"
    paths = []
    for name in ("small-a", "small-b"):   # the dry run's own tiny-llama takes ~20 s here
        (models / name).mkdir(parents=True)
        (models / name / "config.json").write_text(json.dumps(SMALL_CONFIG))
        paths.append(str(models / name / "config.json"))
    env = {**os.environ, "OUT": str(out), "CALIBRATION_DRY_RUN": "1", "CAPTURE_REPEATS": "1",
           "CAPTURE_WARMUP": "0", "PYTHON": sys.executable, "CAPTURE_MODELS": " ".join(paths)}
    proc = subprocess.run(["bash", "calibration/gpu_capture.sh"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for name in ("small-a", "small-b"):
        assert len(_read_timings(out / name)) == len(quick_grid())
        assert json.loads((out / name / "meta.json").read_text())["completed"] is True
    files = [p.relative_to(out) for p in out.rglob("*") if p.is_file()]
    assert len(files) <= 8 and all(len(p.parts) <= 3 for p in files)
    # One device.csv for the capture, each model's ceilings a run; read from above either model's timings.
    with open(out / "device.csv", newline="") as f:
        assert sorted({r["run"] for r in csv.DictReader(f)}) == ["1", "2"]
    assert not list(out.glob("*/device.csv"))
    assert "done in" in (out / "capture.log").read_text()
