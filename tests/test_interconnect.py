"""The ring all-reduce over a GPU's link (cost_models/interconnect.py), worked by hand.

NCCL's single-node ring model: time = base + 2(N-1) hops x hop latency + 2(N-1)/N x B / bus
bandwidth, bus bandwidth the all-reduce's measured share of one direction of the link (0.66 on
NVLink, 0.74 on PCIe), the faster of the LL and Simple protocols.
"""
import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from cost_models.batch_shape import BatchShape
from cost_models.fit.allreduce_fit import MIN_FITTED_BYTES, fit_bus_shares, read_vidur_allreduces
from cost_models.hardware import load_hardware
from cost_models.interconnect import (ALLREDUCE_BUS_SHARE, RingAllReduce, bus_bandwidth_Bps, link_time_s,
                                      ring_allreduce_s, ring_wire_bytes)
from cost_models.profiles import load_cost_model, profile_path, read_model_file


def test_large_message_over_nvlink_takes_the_simple_protocol():
    h100 = load_hardware("h100-sxm")                      # NVLink 4: 900 GB/s both ways
    assert bus_bandwidth_Bps(h100) == 450e9
    B, N = 64 * 2**20, 8
    simple = 8.4e-6 + 2 * (N - 1) * 3.4e-6 + 2 * (N - 1) / N * B / (0.66 * 450e9)
    assert ring_allreduce_s(B, N, h100) == pytest.approx(simple, rel=1e-12)


def test_small_message_over_pcie_takes_the_ll_protocol():
    l40s = load_hardware("l40s")                           # PCIe Gen4 x16: 64 GB/s both ways
    B, N = 8192, 2
    ll = 3.6e-6 + 2 * (N - 1) * 1.0e-6 + 2 * (N - 1) / N * B / (0.25 * 0.74 * 32e9)
    assert ring_allreduce_s(B, N, l40s) == pytest.approx(ll, rel=1e-12)
    assert ll < 8.4e-6 + 2 * 5.7e-6 + B / (0.74 * 32e9)  # Simple would be slower


def test_one_rank_costs_nothing_and_a_fixed_latency_replaces_the_hops():
    h200 = load_hardware("h200")
    assert ring_allreduce_s(1e6, 1, h200) == 0.0
    assert ring_allreduce_s(1e6, 4, h200, latency_s=1e-5) == pytest.approx(1e-5 + 1.5 * 1e6 / (0.66 * 450e9))


def test_a_point_to_point_send_gets_the_whole_bus():
    # The all-reduce's share is measured on all-reduces; a send keeps one direction of the link.
    h100 = load_hardware("h100-sxm")
    assert link_time_s(32e6, 1, h100) == pytest.approx(8.4e-6 + 3.4e-6 + 32e6 / 450e9, rel=1e-12)


def test_pcie_costs_more_than_nvlink_at_every_size():
    for size in (2**10, 2**16, 2**22, 2**26):
        assert ring_allreduce_s(size, 2, load_hardware("rtx-pro-6000")) > \
            ring_allreduce_s(size, 2, load_hardware("h100-sxm"))


def test_kernel_tables_without_measured_communication_add_two_ring_allreduces_per_layer():
    # LLMServingSim's tp2 tables were measured on one GPU with the shard's shapes: no all-reduce.
    data = read_model_file(profile_path("rtx-pro-6000-qwen3-32b"))
    assert data["tensor_parallel"]["2"]["allreduce"] is None
    tp2 = load_cost_model(data, 2, step_overhead_s=0.0)
    assert isinstance(tp2.allreduce, RingAllReduce)
    hidden_bytes = 5120 * 2
    shape = BatchShape.of([512], [0])
    without = dataclasses.replace(tp2, allreduce=None)
    extra = 64 * 2 * ring_allreduce_s(512 * hidden_bytes, 2, load_hardware("rtx-pro-6000"))
    assert tp2.step_time_s(shape) == pytest.approx(without.step_time_s(shape) + extra, rel=1e-12)


def test_a_measured_allreduce_table_is_kept():
    data = read_model_file(profile_path("vidur-a100-llama-2-70b"))
    tp2 = load_cost_model(data, 2)
    assert not isinstance(tp2.allreduce, RingAllReduce) and tp2.allreduce is not None


def test_the_bus_share_fit_recovers_known_shares_with_a_latency_per_configuration():
    # Synthetic all-reduces: two NVLink and one PCIe configuration, each its own latency.
    rows = []
    for node, ranks, link, bus, share, latency in (("a", 2, "nvlink", 300e9, 0.6, 40e-6),
                                                     ("a", 8, "nvlink", 300e9, 0.6, 90e-6),
                                                     ("b", 4, "pcie", 32e9, 0.75, 60e-6)):
        for size in (1 << 20, 8 << 20, 16 << 20, 64 << 20):   # 1 MiB lies below the fitted range
            wire = ring_wire_bytes(size, ranks)
            time_s = latency + wire / (share * bus) + (1e-3 if size < MIN_FITTED_BYTES else 0.0)
            rows.append((node, ranks, "gpu", link, bus, size, wire, time_s))
    measured = pd.DataFrame(rows, columns=["node", "ranks", "gpu", "link", "bus_Bps", "bytes", "wire_bytes", "time_s"])
    shares, latencies = fit_bus_shares(measured)
    assert shares == pytest.approx({"nvlink": 0.6, "pcie": 0.75}, rel=1e-9)
    assert latencies == pytest.approx({("a", 2): 40e-6, ("a", 8): 90e-6, ("b", 4): 60e-6}, rel=1e-6)


def test_the_shipped_bus_shares_are_the_fit_of_vidurs_allreduces():
    network = Path(__file__).resolve().parents[2] / "shared" / "reference" / "vidur-profiles" / "network"
    if not (network / "h100_dgx" / "all_reduce.csv").is_file():
        pytest.skip("../shared/reference/vidur-profiles/network absent: the shared Vidur profiles are not on this machine")
    shares, _ = fit_bus_shares(read_vidur_allreduces(network))
    assert {k: round(v, 2) for k, v in shares.items()} == {k: ALLREDUCE_BUS_SHARE[k] for k in ("nvlink", "pcie")}
