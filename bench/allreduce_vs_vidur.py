"""servesim's ring all-reduce (cost_models/interconnect.py) against the NCCL all-reduces Vidur
measured (../shared/reference/vidur-profiles/network/<node>/all_reduce.csv).

    python bench/allreduce_vs_vidur.py [REFERENCE_DIR]

Prints three tables:
- the share of the link's bandwidth the all-reduces reach, fitted on every node
  (cost_models/fit/allreduce_fit.py) against the shares interconnect.py ships;
- each node and rank count's own share against the one fitted on the other GPU alone (held out);
- the measured and modelled time of the DGX nodes at three message sizes.
Vidur timed torch.distributed calls, so its small messages carry the host's call overhead, which
vLLM's CUDA graphs and custom all-reduce do not pay; the large ones are NCCL's Simple protocol,
what a long prefill's all-reduces use.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from cost_models.fit.allreduce_fit import fit_bus_shares, held_out_by_gpu, read_vidur_allreduces
from cost_models.hardware import load_hardware
from cost_models.interconnect import ALLREDUCE_BUS_SHARE, ring_allreduce_s

DGX = {"a100_dgx": "a100-80gb", "h100_dgx": "h100-sxm"}
SIZES = (256 << 10, 4 << 20, 64 << 20)


def print_shares(measured) -> None:
    shares, _ = fit_bus_shares(measured)
    print("link    fitted_share  shipped_share")
    for link, share in shares.items():
        print(f"{link:7} {share:12.3f}  {ALLREDUCE_BUS_SHARE[link]:13.2f}")
    print("\nnode                  ranks link    own_share  held_out_share  bandwidth_error")
    for node, ranks, link, own, held in held_out_by_gpu(measured):
        print(f"{node:21} {ranks:5} {link:7} {own:9.3f}  {held:14.3f}  {held / own - 1:+15.1%}")


def print_times(measured) -> None:
    print("\ngpu        N  size      measured_ms  servesim_ms  error")
    for node, gpu in DGX.items():
        hardware = load_hardware(gpu)
        for ranks, rows in measured[measured["node"] == node].groupby("ranks"):
            by_size = rows.set_index("bytes")["time_s"]
            for size in SIZES:
                measured_s = float(by_size.iloc[np.abs(by_size.index - size).argmin()])
                modelled_s = ring_allreduce_s(size, ranks, hardware)
                print(f"{gpu:10} {ranks}  {size >> 10:6} KiB  {measured_s * 1e3:10.3f}  "
                      f"{modelled_s * 1e3:11.3f}  {modelled_s / measured_s - 1:+6.0%}")


def main(reference: Path) -> None:
    measured = read_vidur_allreduces(reference / "vidur-profiles" / "network")
    print_shares(measured)
    print_times(measured)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if sys.argv[1:] else Path(__file__).resolve().parents[2] / "shared" / "reference")
