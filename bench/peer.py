"""Time `servesim run` of the peer workload as a whole process, per scheduler and size.

    python bench/peer.py [--repeat 5] [--sizes 1000,10000] [--scheduler vllm_v0] [SCENARIO]

For each scheduler of SCENARIO (default bench/peer_vidur.yaml) and each size, runs
`python -m simulator.cli run SCENARIO --scheduler X --no-plots -o TMP --set workload.num_requests=N`
REPEAT times in a fresh process (start-up, validation, simulation and result files all count) and
prints one line:

    peer scheduler=vllm_v0 requests=1000 runs=5 wall_s=0.61 wall_min_s=0.58 wall_max_s=0.70
    peak_rss_mb=90 req_per_s=1639 steps_per_s=18390 sim_over_wall=1660 sim_s=1013.2 steps=11218
    mean_ttft_ms=... p99_ttft_ms=... mean_tpot_ms=... p99_tpot_ms=... mean_e2el_ms=... p99_e2el_ms=...
    target_s=0.5 wall_over_target=1.22 vidur_s=14.7 vidur_over_wall=24.1

wall_s is the median over the runs; peak_rss_mb the largest resident set of one run's process; the
latency figures come from the summary.json the last run wrote. The runs are interleaved, run r of
every (scheduler, size) before run r + 1 of any (whole_process.time_interleaved): this VM
alternates between a fast and a slow state every few seconds, and five runs of one cell back to
back would often fall in one state; the lines are printed once all runs are done. Issue 6's
targets and Vidur's own timings of this workload are printed as ratios where they exist (NA
elsewhere).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from simulator.scenario import load_scenario  # noqa: E402
from whole_process import line, time_interleaved  # noqa: E402

TARGET_S = {1000: 0.5, 10000: 1.6}          # issue 6: median whole-process wall per scheduler
# Vidur's wall time on the same workload (issue 6), by our scheduler label.
VIDUR_S = {("vllm_v0", 1000): 14.7, ("sarathi", 1000): 12.7,
           ("vllm_v0", 10000): 81.0, ("sarathi", 10000): 83.0}


def bench_line(label: str, num_requests: int, fields: dict) -> str:
    return line("peer", {"scheduler": label, **fields, **_ratios(float(fields["wall_s"]), label,
                                                                 num_requests)})


def _ratios(wall_s: float, label: str, num_requests: int) -> dict[str, str]:
    target, vidur = TARGET_S.get(num_requests), VIDUR_S.get((label, num_requests))
    return {"target_s": target or "NA",
            "wall_over_target": f"{wall_s / target:.2f}" if target else "NA",
            "vidur_s": vidur or "NA",
            "vidur_over_wall": f"{vidur / wall_s:.1f}" if vidur else "NA"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("scenario", nargs="?", type=Path, default=ROOT / "bench" / "peer_vidur.yaml")
    ap.add_argument("--repeat", type=int, default=5, help="runs per line (median wall time)")
    ap.add_argument("--sizes", default="1000,10000", help="comma-separated num_requests values")
    ap.add_argument("--scheduler", action="append", default=[],
                    help="a scheduler label of the file (repeatable; default: all)")
    args = ap.parse_args()
    labels = args.scheduler or [o.label for o in load_scenario(args.scenario).scheduler_options()]
    cells = [(label, int(n)) for n in args.sizes.split(",") for label in labels]
    results = time_interleaved([(args.scenario.resolve(), label, [f"workload.num_requests={n}"])
                                for label, n in cells], args.repeat)
    for (label, num_requests), (fields, _) in zip(cells, results):
        print(bench_line(label, num_requests, fields), flush=True)


if __name__ == "__main__":
    main()
