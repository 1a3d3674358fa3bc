"""servesim's ring all-reduce (cost_models/interconnect.py) against the NCCL all-reduces Vidur
measured on one DGX node (../shared/reference/vidur-profiles/network/<gpu>_dgx/all_reduce.csv).

    python bench/allreduce_vs_vidur.py [REFERENCE_DIR]

Prints, per GPU and rank count, the measured and modelled time at three message sizes and the
bus bandwidth the measurement implies at 32 MiB and more. Vidur timed torch.distributed calls, so
its small messages carry the host's call overhead, which vLLM's CUDA graphs and custom
all-reduce do not pay; the large ones are NCCL's Simple protocol, what a long prefill's
all-reduces use.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from cost_models.hardware import load_hardware
from cost_models.interconnect import bus_bandwidth_Bps, ring_allreduce_s, ring_wire_bytes

NODES = {"a100_dgx": "a100-80gb", "h100_dgx": "h100-sxm"}
SIZES = (256 << 10, 4 << 20, 64 << 20)


def one_node_medians(path: Path) -> pd.DataFrame:
    """(num_workers, size) -> median ms of rank 0, for the rows whose ranks share one node."""
    rows = pd.read_csv(path)
    rows = rows[(rows["rank"] == 0) & (rows["devices_per_node"] == rows["num_workers"])]
    return rows.groupby(["num_workers", "size"])["time_stats.all_reduce.median"].median()


def main(reference: Path) -> None:
    print("gpu        N  size      measured_ms  servesim_ms  error   measured bus GB/s (>=32 MiB) / servesim's")
    for node, gpu in NODES.items():
        hardware = load_hardware(gpu)
        medians = one_node_medians(reference / "vidur-profiles" / "network" / node / "all_reduce.csv")
        for n, by_size in medians.groupby(level=0):
            by_size = by_size.droplevel(0)
            large = by_size[by_size.index >= 32 << 20]
            bus = np.median(ring_wire_bytes(large.index.to_numpy(), n) / (large.to_numpy() * 1e-3)) / 1e9
            for size in SIZES:
                measured = float(by_size.iloc[np.abs(by_size.index - size).argmin()])
                modelled = ring_allreduce_s(size, n, hardware) * 1e3
                print(f"{gpu:10} {n}  {size >> 10:6} KiB  {measured:10.3f}  {modelled:11.3f}  "
                      f"{modelled / measured - 1:+6.0%}   {bus:.0f} / {bus_bandwidth_Bps(hardware) / 1e9:.0f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if sys.argv[1:] else Path(__file__).resolve().parents[2] / "shared" / "reference")
