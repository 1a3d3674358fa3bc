"""The GPU-to-GPU link and the price of one all-reduce over it (tensor parallelism).

Tensor parallelism all-reduces the hidden states twice per layer (after attention's O projection
and after the MLP's down projection, vLLM's ``RowParallelLinear``). A ring all-reduce of B bytes
over N ranks is a reduce-scatter then an all-gather: 2(N-1) steps, each moving B/N bytes to the
next rank while receiving as much from the previous one, so

    time = base_latency + 2(N-1) x hop_latency + 2(N-1)/N x B / bus_bandwidth

which is NCCL's own cost model for a single-node ring all-reduce (``src/graph/tuning.cc``,
``ncclTopoTuneModel``: latency ``baseLat + nsteps x hwLat`` with nsteps = 2(N-1), algorithm
bandwidth ``busBw x N / nsteps``). NCCL picks the faster of its protocols per message size: LL
(low latency; NCCL prices its ring all-reduce at a quarter of the bus bandwidth, ``busBw x 1/4``)
and Simple (the full bus bandwidth, longer latencies), and so do we. LL128 is left out: NCCL
enables it by default only on Volta and Ampere with NVLink.

The bus bandwidth is one direction of the link: a ring rank sends to one neighbour while it
receives from the other, and datasheets quote NVLink and PCIe as the sum of both directions. An
all-reduce reaches only a share of it (ALLREDUCE_BUS_SHARE, measured), as NCCL's own model caps its
bus bandwidth below the links' (``busBw`` of ncclTopoTuneModel).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cost_models.hardware import HardwareSpec

_US = 1e-6


@dataclass(frozen=True)
class Protocol:
    """One NCCL protocol's fixed latencies on one kind of link, and the share of bandwidth it gets."""

    base_latency_s: float
    hop_latency_s: float
    bandwidth_share: float


# NCCL's ring all-reduce latencies (``baseLat`` and ``hwLat`` of src/graph/tuning.cc, NCCL 2.x:
# ring LL 3.6 us base, Simple 8.4 us; per hop LL 0.47 / Simple 3.4 us over NVLink, 1.0 / 5.7 us over
# PCIe, 2.7 / 9.6 us over the network). Link kinds are NCCL's three hardware classes.
LINK_PROTOCOLS: dict[str, tuple[Protocol, ...]] = {
    "nvlink": (Protocol(3.6 * _US, 0.47 * _US, 0.25), Protocol(8.4 * _US, 3.4 * _US, 1.0)),
    "pcie": (Protocol(3.6 * _US, 1.0 * _US, 0.25), Protocol(8.4 * _US, 5.7 * _US, 1.0)),
    "network": (Protocol(3.6 * _US, 2.7 * _US, 0.25), Protocol(8.4 * _US, 9.6 * _US, 1.0)),
}
LINK_KINDS = tuple(LINK_PROTOCOLS)

# The share of one direction of the link that NCCL's ring all-reduce moves, fitted on the NCCL
# all-reduces Vidur measured on NVLink (DGX A100, DGX H100, NVLink-bridged pairs of each) and PCIe
# Gen4 and Gen5, on messages of 8 MiB and more (cost_models/fit/allreduce_fit.py; `python
# bench/allreduce_vs_vidur.py` prints the fit and its error held out by GPU). Over the network it is
# not measured: the datasheet rate.
ALLREDUCE_BUS_SHARE: dict[str, float] = {"nvlink": 0.66, "pcie": 0.74, "network": 1.0}


def check_link(link: str, where: str = "hardware.link") -> str:
    if not isinstance(link, str) or link not in LINK_PROTOCOLS:
        raise ValueError(f"{where}: {link!r} is not a link kind ({', '.join(LINK_KINDS)})")
    return link


def bus_bandwidth_Bps(hardware: HardwareSpec) -> float:
    """One direction of the GPU's link: half the bidirectional total that datasheets quote."""
    return hardware.interconnect_bandwidth_Bps / 2


def ring_allreduce_s(num_bytes: float, num_ranks: int, hardware: HardwareSpec,
                     latency_s: float | None = None) -> float:
    """Seconds of one ring all-reduce of ``num_bytes`` over ``num_ranks`` GPUs on ``hardware``'s link.

    2(N-1) hops of ring_wire_bytes over link_time_s, at the all-reduce's share of the bus; 0.0 for
    one rank. ``latency_s`` replaces the protocols' fixed latencies (base plus 2(N-1) hops) by one figure.
    """
    if num_ranks <= 1:
        return 0.0
    return link_time_s(ring_wire_bytes(num_bytes, num_ranks), 2 * (num_ranks - 1), hardware, latency_s,
                       ALLREDUCE_BUS_SHARE[hardware.link])


def ring_wire_bytes(num_bytes: float, num_ranks: int) -> float:
    """Bytes each rank sends in a ring all-reduce of ``num_bytes``: 2(N-1) steps of B/N."""
    return 2 * (num_ranks - 1) / num_ranks * num_bytes


def link_time_s(wire_bytes: float, hops: int, hardware: HardwareSpec, latency_s: float | None = None,
                bus_share: float = 1.0) -> float:
    """NCCL's cost model of a transfer over ``hardware``'s link (module docstring): a base latency
    and one per hop (or ``latency_s`` for both), plus the bytes one rank sends over its protocol's
    share of the bus bandwidth (``bus_share`` of one direction); the faster of the protocols."""
    bus = bus_bandwidth_Bps(hardware) * bus_share
    best = None
    for p in LINK_PROTOCOLS[hardware.link]:
        fixed_s = p.base_latency_s + hops * p.hop_latency_s if latency_s is None else latency_s
        time_s = fixed_s + wire_bytes / (bus * p.bandwidth_share)
        best = time_s if best is None or time_s < best else best
    return best


@dataclass(frozen=True)
class RingAllReduce:
    """``ring_allreduce_s`` as a callable of the bytes (what a kernel table's measured all-reduce
    table is), for a cost model whose source measured none."""

    num_ranks: int
    hardware: HardwareSpec

    def __call__(self, num_bytes: float) -> float:
        return ring_allreduce_s(num_bytes, self.num_ranks, self.hardware)


def allreduces_per_step(num_layers: int, tensor_parallel_size: int) -> int:
    """Two per layer at tensor_parallel_size > 1 (after attention and after the MLP), else none."""
    return 2 * num_layers if tensor_parallel_size > 1 else 0
