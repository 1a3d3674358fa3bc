"""bench/suite.py: capacity, bench and scaling lines a script can parse (whole processes; not timed)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def parse(line: str) -> tuple[str, dict[str, str]]:
    head, *pairs = line.split(" ")
    return head, dict(pair.split("=", 1) for pair in pairs)


def test_suite_prints_capacity_then_a_line_per_size_and_the_fitted_exponent():
    proc = subprocess.run([sys.executable, "bench/suite.py", "--presets", "vllm_v0", "--arrivals",
                           "poisson", "--costs", "roofline", "--sizes", "30,60"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [parse(line) for line in proc.stdout.splitlines()]
    assert [head for head, _ in lines] == ["capacity", "bench", "bench", "scaling"]
    capacity, small, large, scaling = (fields for _, fields in lines)
    assert float(capacity["req_per_sim_s"]) > 0
    assert (small["requests"], large["requests"]) == ("30", "60")
    for fields in (small, large):
        assert (fields["preset"], fields["arrival"], fields["cost"]) == ("vllm_v0", "poisson", "roofline")
        assert int(fields["steps"]) > 0 and float(fields["peak_rss_mb"]) > 0
    # the exponent is the slope of log wall against log requests over the two sizes
    import math
    slope = math.log(float(large["wall_s"]) / float(small["wall_s"])) / math.log(2)
    assert abs(float(scaling["exponent"]) - slope) < 0.01


def test_fitted_exponent_is_one_for_linear_growth():
    sys.path.insert(0, str(ROOT / "bench"))
    from suite import fitted_exponent
    assert abs(fitted_exponent([10_000, 100_000, 1_000_000], [1.0, 10.0, 100.0]) - 1.0) < 1e-12
    assert abs(fitted_exponent([1, 2, 4], [1.0, 4.0, 16.0]) - 2.0) < 1e-12


def test_writers_bench_prints_a_line_per_writer_and_import():
    """70,000 rows: two chunks (65,536 rows each), so appending a chunk is exercised."""
    proc = subprocess.run([sys.executable, "bench/writers.py", "--rows", "70000", "--rounds", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [dict(pair.split("=", 1) for pair in line.split(" "))
             for line in proc.stdout.splitlines() if line.startswith(("writer=", "import="))]
    writers = {fields["writer"]: fields for fields in lines if "writer" in fields}
    assert {"pyarrow_csv", "pyarrow_parquet"} <= set(writers)
    assert "pyarrow.csv" in {fields["import"] for fields in lines if "import" in fields}
    for fields in writers.values():
        assert fields["rows"] == "70000" and float(fields["size_mb"]) > 0 and float(fields["wall_s"]) > 0
    if "polars_csv" in writers:   # both write shortest round-trip text: the same size to 0.1 MB
        assert writers["polars_csv"]["size_mb"] == writers["pyarrow_csv"]["size_mb"]


def test_the_allreduce_comparison_prints_a_row_per_gpu_ranks_and_size():
    reference = ROOT / ".." / "shared" / "reference"
    if not (reference / "vidur-profiles" / "network" / "h100_dgx" / "all_reduce.csv").is_file():
        pytest.skip("../shared/reference/vidur-profiles/network absent: the shared Vidur profiles are not on this machine")
    proc = subprocess.run([sys.executable, "bench/allreduce_vs_vidur.py", str(reference)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    shares, held_out, times = (block.splitlines()[1:] for block in proc.stdout.split("\n\n"))
    assert [line.split()[0] for line in shares] == ["nvlink", "pcie"]
    # Each of the 10 one-node configurations, held out by GPU; 2 GPUs x 3 rank counts x 3 sizes
    assert len(held_out) == 10 and len(times) == 18
    # At 64 MiB the DGX A100's rings are within 20% of the measurement at the shipped share
    a100 = [r.split() for r in times if r.startswith("a100-80gb") and r.split()[2] == "65536"]
    assert len(a100) == 3 and all(abs(float(r[6].rstrip("%"))) <= 20 for r in a100)
