"""bench/peer.py: one parseable key=value line per (scheduler, size), whole processes (not timed)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse(line: str) -> dict[str, str]:
    head, *pairs = line.split(" ")
    assert head == "peer"
    return dict(pair.split("=", 1) for pair in pairs)


def test_peer_bench_prints_one_line_per_scheduler_and_size():
    proc = subprocess.run([sys.executable, "bench/peer.py", "--repeat", "1", "--sizes", "12,1000",
                           "--scheduler", "sarathi"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [parse(line) for line in proc.stdout.splitlines()]
    assert [(f["scheduler"], f["requests"]) for f in lines] == [("sarathi", "12"), ("sarathi", "1000")]
    small, peer = lines
    assert (small["target_s"], small["vidur_s"], small["vidur_over_wall"]) == ("NA", "NA", "NA")
    assert (peer["target_s"], peer["vidur_s"]) == ("0.5", "12.7")   # issue 6's figures at 1k
    assert abs(float(peer["wall_over_target"]) - float(peer["wall_s"]) / 0.5) < 0.01
    for fields in lines:
        assert float(fields["wall_min_s"]) <= float(fields["wall_s"]) <= float(fields["wall_max_s"])
        assert int(fields["steps"]) > 0 and float(fields["peak_rss_mb"]) > 0
        assert float(fields["mean_ttft_ms"]) <= float(fields["p99_ttft_ms"])
