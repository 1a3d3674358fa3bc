"""Time `servesim run` of the peer workload as a whole process, per scheduler and size.

    python bench/peer.py [--repeat 5] [--sizes 1000,10000] [--scheduler vllm_v0] [SCENARIO]
    python bench/peer.py --vidur-command "VENV/bin/python -m vidur.main" --vidur-root VIDUR_CHECKOUT

For each scheduler of SCENARIO (default bench/peer_vidur.yaml) and each size, runs
`python -m simulator.cli run SCENARIO --scheduler X --no-plots -o TMP --set workload.num_requests=N`
REPEAT times in a fresh process (start-up, validation, simulation and result files all count) and
prints one line:

    peer scheduler=vllm_v0 requests=1000 runs=5 wall_s=0.61 wall_min_s=0.58 wall_max_s=0.70
    peak_rss_mb=90 req_per_s=1639 steps_per_s=18390 sim_over_wall=1660 sim_s=1013.2 steps=11218
    mean_ttft_ms=... p99_ttft_ms=... mean_tpot_ms=... p99_tpot_ms=... mean_e2el_ms=... p99_e2el_ms=...
    target_s=0.5 wall_over_target=1.22 stored_vidur_s=14.7 stored_vidur_source=issue_6
    stored_vidur_date=not_stated stored_vidur_machine=this_machine_class stored_vidur_caches=warm
    ratio_vs_stored_vidur_s=24.1 vidur_runs=0 vidur_wall_s=NA vidur_wall_min_s=NA
    vidur_wall_max_s=NA vidur_peak_rss_mb=NA ratio_side_by_side=NA

wall_s is the median over the runs; peak_rss_mb the largest resident set of one run's process; the
latency figures come from the summary.json the last run wrote. The runs are interleaved, run r of
every (scheduler, size) before run r + 1 of any (whole_process.time_interleaved_with_others): this
VM alternates between a fast and a slow state every few seconds, and five runs of one cell back to
back would often fall in one state; the lines are printed once all runs are done. Issue 6's
targets are printed as ratios where they exist (NA elsewhere).

Two Vidur ratios, never to be confused:
- ratio_vs_stored_vidur_s: Vidur's wall seconds as issue 6 states them (VIDUR_S: "on this
  machine class", warm caches, no date, no machine named) over this run's wall_s. Not measured
  side by side: another day, maybe another machine.
- ratio_side_by_side: only with --vidur-command. Vidur's own simulator is run on the same workload
  (vidur_args), REPEAT times per (scheduler, size), its run r in the same round as servesim's run
  r, after one untimed 1-request run per cell that warms its caches; vidur_wall_s is the median of
  those runs, and the ratio is vidur_wall_s over wall_s. NA without --vidur-command.
"""
from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from simulator.scenario import load_scenario  # noqa: E402
from whole_process import line, time_interleaved_with_others, wall_fields  # noqa: E402

TARGET_S = {1000: 0.8, 10000: 1.6}          # issue 17: median whole-process wall per scheduler
# Vidur's wall seconds on this workload as issue 6 states them, by our scheduler label. They were
# not measured by this script: issue 6 gives them "on this machine class" with "warm caches" and
# no date, and names neither the machine nor the run, so a ratio against them is a ratio against
# a stored figure, not a side-by-side measurement (for that, see --vidur-command).
VIDUR_S = {("vllm_v0", 1000): 14.7, ("sarathi", 1000): 12.7,
           ("vllm_v0", 10000): 81.0, ("sarathi", 10000): 83.0}
VIDUR_SOURCE = {"stored_vidur_source": "issue_6", "stored_vidur_date": "not_stated",
                "stored_vidur_machine": "this_machine_class", "stored_vidur_caches": "warm"}
DEFAULT_SCENARIO = ROOT / "bench" / "peer_vidur.yaml"
# Vidur's replica scheduler for each of our labels (vidur/types/replica_scheduler_type.py).
VIDUR_SCHEDULER = {"vllm_v0": "vllm", "sarathi": "sarathi"}


def vidur_args(label: str, num_requests: int, out_dir: Path) -> list[str]:
    """The flags of `python -m vidur.main` for the peer workload of bench/peer_vidur.yaml.

    Names from Vidur's flattened config (vidur/config/config.py, flat_dataclass.py): a nested
    config's fields are prefixed with its class name in snake case. Llama-2-70B on one replica of
    2 x A100-80GB (TP 2, pairwise NVLink), block size 16, at most 128 sequences a batch, fixed
    512-token prompts and 256-token outputs, Poisson arrivals at 1 request/s, seed 42; Sarathi's
    chunk 512. Plots are off, as servesim's runs have --no-plots; Vidur's other outputs stay on."""
    scheduler = VIDUR_SCHEDULER[label]
    args = ["--seed", "42",
            "--replica_config_model_name", "meta-llama/Llama-2-70b-hf",
            "--replica_config_device", "a100",
            "--replica_config_network_device", "a100_pairwise_nvlink",
            "--replica_config_tensor_parallel_size", "2",
            "--replica_config_num_pipeline_stages", "1",
            "--cluster_config_num_replicas", "1",
            "--request_generator_config_type", "synthetic",
            "--synthetic_request_generator_config_num_requests", str(num_requests),
            "--synthetic_request_generator_config_seed", "42",
            "--length_generator_config_type", "fixed",
            "--fixed_request_length_generator_config_prefill_tokens", "512",
            "--fixed_request_length_generator_config_decode_tokens", "256",
            "--interval_generator_config_type", "poisson",
            "--poisson_request_interval_generator_config_qps", "1.0",
            "--poisson_request_interval_generator_config_seed", "42",
            "--replica_scheduler_config_type", scheduler,
            f"--{scheduler}_scheduler_config_batch_size_cap", "128",
            f"--{scheduler}_scheduler_config_block_size", "16",
            "--metrics_config_output_dir", str(out_dir),
            "--no-metrics_config_store_plots"]
    if scheduler == "sarathi":
        args += ["--sarathi_scheduler_config_chunk_size", "512"]
    return args


def bench_line(label: str, num_requests: int, fields: dict,
               vidur_runs: list[tuple[float, float]] | None = None) -> str:
    wall_s = float(fields["wall_s"])
    return line("peer", {"scheduler": label, **fields, **_ratios(wall_s, label, num_requests),
                         **_side_by_side(wall_s, vidur_runs)})


def _ratios(wall_s: float, label: str, num_requests: int) -> dict[str, str]:
    target, vidur = TARGET_S.get(num_requests), VIDUR_S.get((label, num_requests))
    return {"target_s": target or "NA",
            "wall_over_target": f"{wall_s / target:.2f}" if target else "NA",
            "stored_vidur_s": vidur or "NA",
            **{key: value if vidur else "NA" for key, value in VIDUR_SOURCE.items()},
            "ratio_vs_stored_vidur_s": f"{vidur / wall_s:.1f}" if vidur else "NA"}


def _side_by_side(wall_s: float, vidur_runs: list[tuple[float, float]] | None) -> dict[str, str]:
    if not vidur_runs:
        return {"vidur_runs": 0, "vidur_wall_s": "NA", "vidur_wall_min_s": "NA",
                "vidur_wall_max_s": "NA", "vidur_peak_rss_mb": "NA", "ratio_side_by_side": "NA"}
    vidur = wall_fields(vidur_runs)
    return {"vidur_runs": len(vidur_runs), **{f"vidur_{key}": value for key, value in vidur.items()},
            "ratio_side_by_side": f"{float(vidur['wall_s']) / wall_s:.1f}"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("scenario", nargs="?", type=Path, default=DEFAULT_SCENARIO)
    ap.add_argument("--repeat", type=int, default=5, help="runs per line (median wall time)")
    ap.add_argument("--sizes", default="1000,10000", help="comma-separated num_requests values")
    ap.add_argument("--scheduler", action="append", default=[],
                    help="a scheduler label of the file (repeatable; default: all)")
    ap.add_argument("--vidur-command", default=None,
                    help="run Vidur side by side: the command that starts its simulator, e.g. "
                         "'/path/to/venv/bin/python -m vidur.main'; the workload's flags are "
                         "appended (see vidur_args)")
    ap.add_argument("--vidur-root", type=Path, default=Path.cwd(),
                    help="the folder Vidur runs in (its checkout: it reads ./data/profiling and "
                         "keeps its cache in ./cache); default: the current folder")
    args = ap.parse_args()
    if args.vidur_command and args.scenario.resolve() != DEFAULT_SCENARIO:
        ap.error("--vidur-command runs Vidur on bench/peer_vidur.yaml's workload only")
    labels = args.scheduler or [o.label for o in load_scenario(args.scenario).scheduler_options()]
    cells = [(label, int(n)) for n in args.sizes.split(",") for label in labels]
    with tempfile.TemporaryDirectory(prefix="servesim-bench-vidur-") as vidur_out:
        vidur_cells = [(label, n) for label, n in cells
                       if args.vidur_command and label in VIDUR_SCHEDULER]
        base = shlex.split(args.vidur_command or "")
        others = [(base + vidur_args(label, 1, Path(vidur_out) / f"warm-{i}"),   # warm its caches
                   base + vidur_args(label, n, Path(vidur_out) / str(i)), args.vidur_root.resolve())
                  for i, (label, n) in enumerate(vidur_cells)]
        results, vidur_runs = time_interleaved_with_others(
            [(args.scenario.resolve(), label, [f"workload.num_requests={n}"]) for label, n in cells],
            others, args.repeat)
    by_cell = dict(zip(vidur_cells, vidur_runs))
    for (label, num_requests), (fields, _) in zip(cells, results):
        print(bench_line(label, num_requests, fields, by_cell.get((label, num_requests))), flush=True)


if __name__ == "__main__":
    main()
