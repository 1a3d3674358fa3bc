"""The share of a link's bandwidth that NCCL's ring all-reduce reaches, fitted on measured all-reduces.

Vidur timed NCCL all-reduces through torch.distributed on four kinds of node
(``vidur-profiles/network/<node>/all_reduce.csv``). Each one-node configuration (node, ranks) is
priced as cost_models/interconnect.py prices a ring:

    time = latency_c + ring_wire_bytes / (share_link x one direction of the link's datasheet bandwidth)

with a latency of its own per configuration, since the measured latencies carry the harness's call
overhead on the host (which vLLM's CUDA graphs do not pay), and one share per kind of link, shared
by every GPU on it. Only messages of 8 MiB and more are fitted: the Simple protocol's regime, where
the bytes, not the latencies, set the time. The fit weighs relative error, as every servesim fit.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from cost_models.fit.nnls import nnls
from cost_models.interconnect import ring_wire_bytes

MIN_FITTED_BYTES = 8 << 20
_TIME = "time_stats.all_reduce.median"


@dataclass(frozen=True)
class MeasuredLink:
    """What a configuration's ring crosses: the GPU, the kind of link and its datasheet bandwidth."""

    gpu: str
    link: str
    bidirectional_GBps: float
    source: str


# The nodes behind Vidur's folders (its NodeSKUType names): DGX A100 and DGX H100 (8 GPUs on
# NVSwitch), and 4 A100s or 4 H100s joined by NVLink bridges in pairs, so that a ring over all 4
# crosses PCIe. Bandwidths are the vendors' datasheet figures; the pairwise nodes' PCIe generation
# is taken from their GPUs (A100 PCIe: Gen4, H100 NVL: Gen5), which the node names do not state.
VIDUR_LINKS: dict[tuple[str, int], MeasuredLink] = {
    **{("a100_dgx", n): MeasuredLink("a100", "nvlink", 600, "A100 SXM4 datasheet: NVLink 3, 600 GB/s")
       for n in (2, 4, 8)},
    **{("h100_dgx", n): MeasuredLink("h100", "nvlink", 900, "H100 SXM5 datasheet: NVLink 4, 900 GB/s")
       for n in (2, 4, 8)},
    ("a100_pairwise_nvlink", 2): MeasuredLink("a100", "nvlink", 600, "A100 PCIe datasheet: NVLink bridge, 600 GB/s"),
    ("a100_pairwise_nvlink", 4): MeasuredLink("a100", "pcie", 64, "A100 PCIe datasheet: PCIe Gen4 x16, 64 GB/s"),
    ("h100_pairwise_nvlink", 2): MeasuredLink("h100", "nvlink", 600, "H100 NVL datasheet: NVLink bridge, 600 GB/s"),
    ("h100_pairwise_nvlink", 4): MeasuredLink("h100", "pcie", 128, "H100 NVL datasheet: PCIe Gen5 x16, 128 GB/s"),
}


def read_vidur_allreduces(network_dir: Path) -> pd.DataFrame:
    """One row per (node, ranks, size) of VIDUR_LINKS: ``node, ranks, gpu, link, bus_Bps, bytes,
    wire_bytes, time_s`` (the median of rank 0's medians)."""
    rows = []
    for (node, ranks), link in VIDUR_LINKS.items():
        table = pd.read_csv(network_dir / node / "all_reduce.csv")
        table = table[(table["rank"] == 0) & (table["num_workers"] == ranks) & (table["devices_per_node"] == ranks)]
        for size, time_ms in table.groupby("size")[_TIME].median().items():
            rows.append((node, ranks, link.gpu, link.link, link.bidirectional_GBps / 2 * 1e9, int(size),
                         ring_wire_bytes(size, ranks), time_ms * 1e-3))
    return pd.DataFrame(rows, columns=["node", "ranks", "gpu", "link", "bus_Bps", "bytes", "wire_bytes", "time_s"])


def fit_bus_shares(measured: pd.DataFrame) -> tuple[dict[str, float], dict[tuple[str, int], float]]:
    """(share per link kind, latency_s per configuration), by NNLS on relative error over the
    messages of MIN_FITTED_BYTES and more (module docstring)."""
    rows = measured[measured["bytes"] >= MIN_FITTED_BYTES]
    configs = sorted(set(zip(rows["node"], rows["ranks"])))
    links = sorted(set(rows["link"]))
    design = np.zeros((len(rows), len(configs) + len(links)))
    row_configs = list(zip(rows["node"], rows["ranks"]))
    design[np.arange(len(rows)), [configs.index(c) for c in row_configs]] = 1.0
    link_column = len(configs) + np.array([links.index(k) for k in rows["link"]])
    design[np.arange(len(rows)), link_column] = (rows["wire_bytes"] / rows["bus_Bps"]).to_numpy()
    time_s = rows["time_s"].to_numpy()
    coef = nnls(design / time_s[:, None], np.ones(len(rows)))
    shares = {k: 1.0 / coef[len(configs) + i] for i, k in enumerate(links)}
    return shares, {c: float(coef[i]) for i, c in enumerate(configs)}


def held_out_by_gpu(measured: pd.DataFrame) -> list[tuple[str, int, str, float, float]]:
    """Per configuration: (node, ranks, link, its own share, the share fitted on the other GPUs)."""
    out = []
    for gpu in sorted(set(measured["gpu"])):
        others, _ = fit_bus_shares(measured[measured["gpu"] != gpu])
        mine = measured[measured["gpu"] == gpu]
        for (node, ranks), config in mine.groupby(["node", "ranks"]):
            link = config["link"].iloc[0]
            own, _ = fit_bus_shares(config)
            out.append((node, int(ranks), link, own[link], others[link]))
    return out
