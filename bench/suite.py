"""The standard speed matrix as whole `servesim run` processes, and the 10k -> 1M scaling.

    python bench/suite.py                                     # 5 presets x Poisson/closed x roofline/profiled, 10k
    python bench/suite.py --presets vllm_v1 --arrivals poisson --costs roofline \\
        --sizes 10000,100000,1000000 --repeat 5               # issue 6's scaling run

Arrivals: ``poisson`` at ``--load`` (default 0.8) of the preset's capacity, measured first in
process as the throughput of 2,000 requests sent at once (a ``capacity`` line per preset and cost
model); ``closed``: ``--concurrency`` clients (default 64) sending back to back. Costs: ``roofline``
(H100 datasheet) or ``profiled`` (our H200 whole-step profile, hardware h200). One ``bench`` line
per run (see whole_process.time_run for the fields); with two or more sizes, a ``scaling`` line per
configuration with the exponent b of wall ~ requests^b (least squares on logs: 1.0 is linear).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from whole_process import line, time_run  # noqa: E402

SCENARIO = ROOT / "bench" / "standard.yaml"
PRESETS = ("static", "orca", "vllm_v0", "sarathi", "vllm_v1")
COSTS = {"roofline": [],
         "profiled": ["cost_model={kind: profiled, profile: h200-llama-3.1-8b-cuda_graph}",
                      "hardware=h200"]}
CAPACITY_REQUESTS = 2000


def capacity_req_per_s(preset: str, cost: str) -> float:
    """Completed requests per simulated second when every request arrives at once."""
    from simulator.runner import prepare, simulate
    from simulator.scenario import load_scenario
    scenario = load_scenario(SCENARIO, [f"workload.num_requests={CAPACITY_REQUESTS}",
                                        "workload.arrival={kind: inf}", *COSTS[cost]])
    prepared = prepare(scenario, [preset])
    summary = simulate(prepared, prepared.runs[0]).summary
    return summary["completed"] / summary["duration"]


def arrival_overrides(arrival: str, rate: float, concurrency: int) -> list[str]:
    if arrival == "poisson":
        return [f"workload.arrival={{kind: poisson, rate: {rate:.4f}}}"]
    return ["workload.arrival={kind: inf}", f"workload.max_concurrency={concurrency}"]


def fitted_exponent(sizes: list[int], walls: list[float]) -> float:
    xs, ys = [math.log(n) for n in sizes], [math.log(w) for w in walls]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--arrivals", default="poisson,closed")
    ap.add_argument("--costs", default=",".join(COSTS))
    ap.add_argument("--sizes", default="10000", help="comma-separated num_requests values")
    ap.add_argument("--repeat", type=int, default=1, help="runs per line (median wall time)")
    ap.add_argument("--load", type=float, default=0.8, help="Poisson rate as a fraction of capacity")
    ap.add_argument("--concurrency", type=int, default=64, help="closed-loop clients")
    args = ap.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]
    for cost in args.costs.split(","):
        for preset in args.presets.split(","):
            capacity = capacity_req_per_s(preset, cost)
            print(line("capacity", {"preset": preset, "cost": cost,
                                    "req_per_sim_s": f"{capacity:.2f}"}), flush=True)
            for arrival in args.arrivals.split(","):
                walls = []
                for num_requests in sizes:
                    overrides = [f"workload.num_requests={num_requests}", *COSTS[cost],
                                 *arrival_overrides(arrival, args.load * capacity, args.concurrency)]
                    fields, _ = time_run(SCENARIO, preset, overrides, args.repeat)
                    walls.append(float(fields["wall_s"]))
                    print(line("bench", {"preset": preset, "arrival": arrival, "cost": cost, **fields}),
                          flush=True)
                if len(sizes) > 1:
                    print(line("scaling", {"preset": preset, "arrival": arrival, "cost": cost,
                                           "sizes": args.sizes,
                                           "exponent": f"{fitted_exponent(sizes, walls):.3f}"}),
                          flush=True)


if __name__ == "__main__":
    main()
