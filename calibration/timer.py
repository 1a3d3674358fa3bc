"""Timing one step: CUDA events (eager or CUDA-graph replay) on GPU, perf_counter on CPU.

Every repetition is timed on its own and the device is synchronised between repetitions, so a
row of timings.csv is one step's wall time on the device, launch overhead included in eager mode.
"""
from __future__ import annotations

import time
from typing import Callable

import torch

Step = Callable[[], object]


def time_eager(step: Step, device: torch.device, warmup: int, repeats: int) -> list[float]:
    """Milliseconds per repetition of ``step`` run eagerly."""
    for _ in range(warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
        return [_cuda_ms(step) for _ in range(repeats)]
    return [_cpu_ms(step) for _ in range(repeats)]


def time_cuda_graph(step: Step, warmup: int, repeats: int) -> list[float]:
    """Captures ``step`` once into a CUDA graph and times its replays.

    ``step`` must read only static buffers prepared beforehand (no host sync, no host-to-device
    copies). The graph and its private memory pool are released before returning.
    """
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # first-use work (cuBLAS handles, workspaces) must not be captured
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    try:
        for _ in range(warmup):
            graph.replay()
        torch.cuda.synchronize()
        return [_cuda_ms(graph.replay) for _ in range(repeats)]
    finally:
        del graph
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # hand the graph's private pool back before the next shape


def _cuda_ms(fn: Step) -> float:
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end))


def _cpu_ms(fn: Step) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3
