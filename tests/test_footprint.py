"""The pre-run memory check of a workload's request columns (issue 22: memory without bound)."""
import pytest

from simulator.results import footprint
from simulator.results.columns import REQUEST_FIELDS


def test_bytes_per_request_are_the_columns_a_request_fills():
    # 8 bytes for each result-table field and each workload field (arrival, prompt, output,
    # priority): a lower bound, since Python objects of requests in flight come on top.
    assert footprint.BYTES_PER_REQUEST == 8 * (len(REQUEST_FIELDS) + 4) == 144


def test_a_workload_beyond_available_memory_is_refused_by_field(monkeypatch):
    monkeypatch.setattr(footprint, "available_bytes", lambda: 1_000_000)
    footprint.check_requests_fit_memory(6944)        # 999,936 bytes: fits
    footprint.check_requests_fit_memory(None)        # by duration: drawn first, not checked here
    with pytest.raises(ValueError) as error:
        footprint.check_requests_fit_memory(6945)    # 1,000,080 bytes
    assert str(error.value) == ("workload.num_requests: 6945 needs at least 0.001 GB for its request "
                                "columns (144 bytes each); this machine has 0.001 GB available")


def test_unknown_available_memory_checks_nothing(monkeypatch):
    monkeypatch.setattr(footprint, "available_bytes", lambda: None)
    footprint.check_requests_fit_memory(2 ** 62)


def test_available_memory_is_read_on_this_machine():
    have = footprint.available_bytes()
    assert have is None or have > 0


def test_identified_blocks_cost_at_least_the_lower_bound():
    # The bound must never refuse a pool that fits: it stays below what the pool really takes.
    import tracemalloc

    from simulator.kv.prefix_cache import PrefixCachingKVCache
    tracemalloc.start()
    try:
        pool = PrefixCachingKVCache(100_001, 16)
        measured = tracemalloc.get_traced_memory()[0] / 100_000
    finally:
        tracemalloc.stop()
    assert pool.num_total_blocks == 100_000
    assert PrefixCachingKVCache.TABLE_BYTES_PER_BLOCK == 76 <= measured


def test_too_many_blocks_for_a_prefix_cache_are_refused_before_any_folder(tmp_path):
    # Issue 22: num_gpu_blocks 1e12 failed with MemoryError after 4 of 5 scheduler folders
    # were written; now the whole file is refused before any run.
    from click.testing import CliRunner

    from simulator.cli import main
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: s\nmodel: llama-2-7b\nhardware: a100-80gb\ncost_model: {kind: unit}\n"
        "engine: {num_gpu_blocks: 1000000000000, max_model_len: 256}\n"
        "workload: {arrival: {kind: inf}, prompt_len: {kind: fixed, value: 16},\n"
        "           output_len: {kind: fixed, value: 8}, num_requests: 4}\n"
        "schedulers: [{preset: orca}, {preset: vllm_v0}, {preset: sarathi}, {preset: static},\n"
        "             {preset: vllm_v1}]\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["run", str(scenario), "--no-plots", "-o", str(out)])
    assert result.exit_code == 2
    assert ("engine.num_gpu_blocks: 1000000000000 needs at least 7.6e+04 GB for vllm_v1's "
            "prefix-cache block table (76 bytes a block)") in result.output
    assert not out.exists()


def test_every_replica_holds_its_own_block_table(monkeypatch):
    monkeypatch.setattr(footprint, "available_bytes", lambda: 76 * 1000 * 4)
    footprint.check_blocks_fit_memory(1000, 76, "vllm_v1", num_replicas=4)
    with pytest.raises(ValueError, match=r"engine.num_gpu_blocks: 1000 x 5 replicas needs at least "
                                         r"0.00038 GB for vllm_v1's prefix-cache block table"):
        footprint.check_blocks_fit_memory(1000, 76, "vllm_v1", num_replicas=5)


def test_the_limit_is_max_memory_gb_when_given_else_what_is_available(monkeypatch):
    monkeypatch.setattr(footprint, "available_bytes", lambda: 3_000_000_000)
    assert footprint.MemoryLimit.of(0.5) == footprint.MemoryLimit(500_000_000, "--max-memory-gb is 0.5")
    assert footprint.MemoryLimit.of() == footprint.MemoryLimit(3_000_000_000,
                                                               "this machine has 3 GB available")


def _need_bytes(num_requests: int, output_tokens: int, keep_gaps: bool) -> int:
    """The drawn workload's bytes as check_run_fits_memory counts them, worked by hand."""
    gaps = num_requests * (output_tokens - 1) if keep_gaps else 0
    return (num_requests * footprint.BYTES_PER_REQUEST + output_tokens * footprint.STEP_ROW_BYTES
            + gaps * footprint.BYTES_PER_GAP)


def test_kept_inter_token_gaps_that_tip_the_limit_name_record_itl_gaps():
    import numpy as np
    outputs = np.full(10, 5)
    need = _need_bytes(10, 5, keep_gaps=True)
    assert need == 10 * 144 + 5 * footprint.STEP_ROW_BYTES + 40 * 40
    fits, short = footprint.MemoryLimit(need, "limit"), footprint.MemoryLimit(need - 1, "limit")
    footprint.check_run_fits_memory(10, outputs, True, fits)
    footprint.check_run_fits_memory(10, outputs, False, short)   # without gaps it fits
    with pytest.raises(ValueError) as error:
        footprint.check_run_fits_memory(10, outputs, True, short)
    assert str(error.value).startswith(
        f"metrics.record_itl_gaps: true keeps up to 40 inter-token gaps (40 bytes each), "
        f"{need / 1e9:.3g} GB with the request columns and step log; limit; set it to false")
    with pytest.raises(ValueError, match="workload: 10 requests need at least"):
        footprint.check_run_fits_memory(10, outputs, False, footprint.MemoryLimit(100, "limit"))


def test_max_memory_gb_refuses_a_run_before_any_folder(tmp_path):
    from click.testing import CliRunner

    from simulator.cli import main
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: s\nmodel: tiny-llama\nhardware: a100-80gb\ncost_model: {kind: unit}\n"
        "engine: {num_gpu_blocks: 64, max_model_len: 256}\n"
        "workload: {arrival: {kind: inf}, prompt_len: {kind: fixed, value: 16},\n"
        "           output_len: {kind: fixed, value: 100}, num_requests: 50}\n"
        "schedulers: [{preset: orca}]\n")
    need_gb = _need_bytes(50, 100, keep_gaps=True) / 1e9
    out = tmp_path / "out"
    args = ["run", str(scenario), "--no-plots", "-o", str(out), "--max-memory-gb"]
    result = CliRunner().invoke(main, [*args, f"{need_gb * 0.99:.9f}"])
    assert result.exit_code == 2 and not out.exists()
    assert "error: metrics.record_itl_gaps: true keeps up to 4950 inter-token gaps" in result.output
    assert CliRunner().invoke(main, [*args, f"{need_gb * 1.01:.9f}"]).exit_code == 0
