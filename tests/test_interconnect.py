"""The ring all-reduce over a GPU's link (cost_models/interconnect.py), worked by hand.

NCCL's single-node ring model: time = base + 2(N-1) hops x hop latency + 2(N-1)/N x B / bus
bandwidth, bus bandwidth one direction of the link, the faster of the LL and Simple protocols.
"""
import dataclasses

import pytest

from cost_models.batch_shape import BatchShape
from cost_models.hardware import load_hardware
from cost_models.interconnect import RingAllReduce, bus_bandwidth_Bps, ring_allreduce_s
from cost_models.profiles import load_cost_model, profile_path, read_model_file


def test_large_message_over_nvlink_takes_the_simple_protocol():
    h100 = load_hardware("h100-sxm")                      # NVLink 4: 900 GB/s both ways
    assert bus_bandwidth_Bps(h100) == 450e9
    B, N = 64 * 2**20, 8
    simple = 8.4e-6 + 2 * (N - 1) * 3.4e-6 + 2 * (N - 1) / N * B / 450e9
    assert ring_allreduce_s(B, N, h100) == pytest.approx(simple, rel=1e-12)


def test_small_message_over_pcie_takes_the_ll_protocol():
    l40s = load_hardware("l40s")                           # PCIe Gen4 x16: 64 GB/s both ways
    B, N = 8192, 2
    ll = 3.6e-6 + 2 * (N - 1) * 1.0e-6 + 2 * (N - 1) / N * B / (0.25 * 32e9)
    assert ring_allreduce_s(B, N, l40s) == pytest.approx(ll, rel=1e-12)
    assert ll < 8.4e-6 + 2 * 5.7e-6 + B / 32e9           # Simple would be slower


def test_one_rank_costs_nothing_and_a_fixed_latency_replaces_the_hops():
    h200 = load_hardware("h200")
    assert ring_allreduce_s(1e6, 1, h200) == 0.0
    assert ring_allreduce_s(1e6, 4, h200, latency_s=1e-5) == pytest.approx(1e-5 + 1.5 * 1e6 / 450e9)


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
