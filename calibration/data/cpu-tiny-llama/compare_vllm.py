"""The harness-fitted CPU model against the vLLM-log-fitted one, on the vLLM-CPU runs' own steps.

    python calibration/data/cpu-tiny-llama/compare_vllm.py [HARNESS_MODEL.json] [VLLM_MODEL.json]

Defaults: the shipped profiles cpu-tiny-llama-harness and cpu-tiny-llama-vllm. Prints, per group
of logged steps, the measured median and its 5th percentile (the least contended steps) and both
models' medians; then each model's cost of one mechanism at a time (a decode step of one sequence,
each further decode, a 256-token prompt, each further prompt of a wave).
"""
from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from cost_models.batch_shape import BatchShape
from cost_models.importers import read_vllm_log
from cost_models.profiles import PROFILES_DIR, load_cost_model, read_model_file

LOGS = Path(__file__).resolve().parents[3] / ".." / "shared" / "reference" / "vllm-cpu"
CONTEXT = 320  # the runs' typical decode context: 256-token prompts, 128 outputs


def main(argv: list[str]) -> None:
    harness_path = Path(argv[0]) if argv else PROFILES_DIR / "cpu-tiny-llama-harness.json"
    vllm_path = Path(argv[1]) if len(argv) > 1 else PROFILES_DIR / "cpu-tiny-llama-vllm.json"
    harness = load_cost_model(read_model_file(harness_path))
    vllm = load_cost_model(read_model_file(vllm_path))
    for name in ("run2_closed_loop_iterations.csv", "run2_poisson_iterations.csv"):
        print_groups(name, read_vllm_log(LOGS / name), harness, vllm)
    print_mechanisms(harness, vllm)


def print_groups(name: str, timings, harness, vllm) -> None:
    groups = defaultdict(list)
    for shape, t in zip(timings.shapes, timings.time_s):
        groups[(shape.num_prefill_seqs, shape.num_prefill_tokens, shape.num_decode_seqs)].append((shape, t))
    h_all = np.array([harness.step_time_s(s) for s in timings.shapes])
    v_all = np.array([vllm.step_time_s(s) for s in timings.shapes])
    print(f"\n{name}: {len(timings.shapes)} steps; per-step MAPE of the harness model "
          f"{_mape(h_all, timings.time_s):.1f}%, of the vLLM-log model {_mape(v_all, timings.time_s):.1f}%; "
          f"busy time measured {timings.time_s.sum():.1f} s, harness {h_all.sum():.1f} s, vLLM-log {v_all.sum():.1f} s")
    print(f"{'prefills':>8} {'tokens':>6} {'decodes':>7} {'steps':>5} {'measured':>9} {'5th pct':>8} "
          f"{'vLLM fit':>8} {'harness':>8} {'ratio':>6}  (ms)")
    for key, rows in sorted(groups.items(), key=lambda kv: -len(kv[1]))[:10]:
        t = np.array([r[1] for r in rows]) * 1e3
        h = np.median([harness.step_time_s(r[0]) for r in rows]) * 1e3
        v = np.median([vllm.step_time_s(r[0]) for r in rows]) * 1e3
        print(f"{key[0]:>8} {key[1]:>6} {key[2]:>7} {len(rows):>5} {np.median(t):>9.1f} "
              f"{np.percentile(t, 5):>8.1f} {v:>8.1f} {h:>8.1f} {h / np.median(t):>6.2f}")


def print_mechanisms(harness, vllm) -> None:
    def cost(model, new, ctx):
        return model.step_time_s(BatchShape.of(new, ctx)) * 1e3

    def decodes(n, ctx=CONTEXT):
        return [1] * n, [ctx] * n

    def prompts(n):
        return [256] * n, [0] * n

    # Only what the vLLM log determines: decodes at the runs' contexts, 256-token prompts, waves of
    # up to 8 prompts (its contexts span 256-477 tokens, so its decode-context cost is not known).
    mechanisms = {
        "one decode (1 sequence)": lambda m: cost(m, *decodes(1)),
        "each further decode (1 -> 16)": lambda m: (cost(m, *decodes(16)) - cost(m, *decodes(1))) / 15,
        "one 256-token prompt": lambda m: cost(m, *prompts(1)),
        "each further 256-token prompt (1 -> 8)": lambda m: (cost(m, *prompts(8)) - cost(m, *prompts(1))) / 7,
    }
    print(f"\n{'mechanism (ms)':<40} {'vLLM fit':>9} {'harness':>9} {'harness - vLLM':>15}")
    for label, f in mechanisms.items():
        v, h = f(vllm), f(harness)
        print(f"{label:<40} {v:>9.2f} {h:>9.2f} {h - v:>+15.2f}")


def _mape(predicted: np.ndarray, measured: np.ndarray) -> float:
    return float(np.mean(np.abs(predicted / measured - 1)) * 100)


if __name__ == "__main__":
    main(sys.argv[1:])
