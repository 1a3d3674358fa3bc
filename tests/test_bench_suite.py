"""bench/suite.py: capacity, bench and scaling lines a script can parse (whole processes; not timed)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
