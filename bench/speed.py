"""Time whole simulator runs and print one parseable line per run.

    python bench/speed.py bench/v1_roofline.yaml [--set workload.num_requests=100000] [--repeat 5]

Each line: `bench scenario=... scheduler=... requests=N wall_s=... sim_s=... steps=... req_per_s=...
steps_per_s=... sim_over_wall=... peak_rss_mb=...`. The wall time covers prepare + simulate (not
writing CSVs); run under `/usr/bin/time` for the whole process including start-up.
"""
from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.runner import prepare, simulate  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario")
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    scenario = load_scenario(args.scenario, args.overrides)
    for run_index in range(len(scenario.schedulers)):
        walls, cpus = [], []
        for _ in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            prepared = prepare(scenario)
            out = simulate(prepared, prepared.runs[run_index])
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        s = out.summary
        wall = statistics.median(walls)
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"bench scenario={scenario.name} scheduler={out.label} requests={s['completed']} "
              f"wall_s={wall:.3f} cpu_s={statistics.median(cpus):.3f} sim_s={s['duration']:.1f} steps={s['num_steps']} "
              f"req_per_s={s['completed'] / wall:.0f} steps_per_s={s['num_steps'] / wall:.0f} "
              f"sim_over_wall={s['duration'] / wall:.1f} peak_rss_mb={rss_mb:.0f} "
              f"mean_ttft_ms={s['mean_ttft_ms']:.2f} mean_tpot_ms={s['mean_tpot_ms']:.3f} "
              f"preemptions={s['num_preemptions']}", flush=True)


if __name__ == "__main__":
    main()
