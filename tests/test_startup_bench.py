"""bench/peer.py: one parseable key=value line per (scheduler, size), whole processes (not timed)."""
from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

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
    assert (small["target_s"], small["stored_vidur_s"], small["ratio_vs_stored_vidur_s"],
            small["stored_vidur_source"]) == ("NA", "NA", "NA", "NA")
    assert (peer["target_s"], peer["stored_vidur_s"]) == ("0.8", "12.7")   # issue 17 target, issue 6 figure at 1k
    assert abs(float(peer["wall_over_target"]) - float(peer["wall_s"]) / 0.8) < 0.01
    # the stored figure says where it comes from, and its ratio is named for what it is
    assert (peer["stored_vidur_source"], peer["stored_vidur_date"], peer["stored_vidur_machine"],
            peer["stored_vidur_caches"]) == ("issue_6", "not_stated", "this_machine_class", "warm")
    assert abs(float(peer["ratio_vs_stored_vidur_s"]) - 12.7 / float(peer["wall_s"])) < 0.1
    assert "vidur_over_wall" not in peer and "vidur_s" not in peer
    # nothing was run side by side
    for fields in lines:
        assert (fields["vidur_runs"], fields["vidur_wall_s"],
                fields["ratio_side_by_side"]) == ("0", "NA", "NA")
    for fields in lines:
        assert float(fields["wall_min_s"]) <= float(fields["wall_s"]) <= float(fields["wall_max_s"])
        assert int(fields["steps"]) > 0 and float(fields["peak_rss_mb"]) > 0
        assert float(fields["mean_ttft_ms"]) <= float(fields["p99_ttft_ms"])


# A stand-in for `python -m vidur.main`: it records the flags it was given and sleeps a little.
STUB = ("import json, sys, time; open('argv.jsonl', 'a').write(json.dumps(sys.argv[1:]) + chr(10)); "
        "time.sleep(0.02)")


def flag_values(argv: list[str]) -> dict[str, str]:
    """--name value pairs of a command line; a flag with no value maps to ''."""
    flags, i = {}, 0
    while i < len(argv):
        has_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
        flags[argv[i]] = argv[i + 1] if has_value else ""
        i += 2 if has_value else 1
    return flags


def test_side_by_side_runs_the_peer_command_on_the_workload_and_prints_the_measured_ratio(tmp_path):
    command = f"{shlex.quote(sys.executable)} -c {shlex.quote(STUB)}"
    proc = subprocess.run([sys.executable, "bench/peer.py", "--repeat", "2", "--sizes", "12",
                           "--scheduler", "sarathi", "--vidur-command", command,
                           "--vidur-root", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (fields,) = [parse(line) for line in proc.stdout.splitlines()]
    assert fields["vidur_runs"] == "2"
    vidur_walls = [float(fields[f"vidur_wall{k}_s"]) for k in ("_min", "", "_max")]
    assert vidur_walls == sorted(vidur_walls)
    assert float(fields["vidur_wall_s"]) >= 0.02 and float(fields["vidur_peak_rss_mb"]) > 0
    ratio = float(fields["vidur_wall_s"]) / float(fields["wall_s"])
    assert abs(float(fields["ratio_side_by_side"]) - ratio) < 0.06
    assert fields["stored_vidur_s"] == "NA"          # no stored figure at 12 requests
    # one untimed warm-up of 1 request, then the timed runs, each with the peer workload's flags
    runs = [json.loads(line) for line in (tmp_path / "argv.jsonl").read_text().splitlines()]
    flags = [flag_values(argv) for argv in runs]
    assert [f["--synthetic_request_generator_config_num_requests"] for f in flags] == ["1", "12", "12"]
    for f in flags:
        assert f["--replica_config_model_name"] == "meta-llama/Llama-2-70b-hf"
        assert (f["--replica_config_device"], f["--replica_config_tensor_parallel_size"]) == ("a100", "2")
        assert (f["--replica_scheduler_config_type"],
                f["--sarathi_scheduler_config_chunk_size"]) == ("sarathi", "512")
        assert (f["--fixed_request_length_generator_config_prefill_tokens"],
                f["--fixed_request_length_generator_config_decode_tokens"]) == ("512", "256")
        assert (f["--poisson_request_interval_generator_config_qps"], f["--seed"]) == ("1.0", "42")


def test_side_by_side_is_refused_for_another_scenario(tmp_path):
    proc = subprocess.run([sys.executable, "bench/peer.py", "bench/standard.yaml", "--vidur-command",
                           "true"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "peer_vidur.yaml" in proc.stderr


def test_other_commands_run_in_the_same_rounds_after_one_warm_up_each(tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    from whole_process import time_interleaved_with_others

    def mark(name: str) -> list[str]:
        return [sys.executable, "-c", f"open('order.txt', 'a').write({name!r} + ' ')"]
    others = [(mark("warm-a"), mark("a"), tmp_path), (mark("warm-b"), mark("b"), tmp_path)]
    results, runs = time_interleaved_with_others([], others, 3)
    assert results == [] and [len(r) for r in runs] == [3, 3]
    assert (tmp_path / "order.txt").read_text().split() == ["warm-a", "warm-b",
                                                            "a", "b", "a", "b", "a", "b"]


@pytest.mark.parametrize("label", ["vllm_v0", "sarathi"])
def test_vidur_flags_name_the_peer_workload(label):
    sys.path.insert(0, str(ROOT / "bench"))
    from peer import vidur_args
    argv = vidur_args(label, 1000, Path("/tmp/out"))
    flags = flag_values(argv)
    scheduler = {"vllm_v0": "vllm", "sarathi": "sarathi"}[label]
    assert flags["--replica_scheduler_config_type"] == scheduler
    assert flags[f"--{scheduler}_scheduler_config_batch_size_cap"] == "128"
    assert flags[f"--{scheduler}_scheduler_config_block_size"] == "16"
    assert flags["--synthetic_request_generator_config_num_requests"] == "1000"
    assert ("--sarathi_scheduler_config_chunk_size" in flags) == (label == "sarathi")
    assert flags["--no-metrics_config_store_plots"] == ""     # as servesim's --no-plots
