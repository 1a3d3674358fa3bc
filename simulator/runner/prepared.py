"""A prepared scenario: the runs of its schedulers, each with its pools, ready to simulate."""
from __future__ import annotations

from dataclasses import dataclass

from cost_models.base import StepCostModel
from cost_models.hardware import HardwareSpec
from cost_models.hybrid_layout import HybridLayout
from cost_models.model_spec import ModelSpec
from simulator.kv.block_pool import KVCache
from simulator.kv.hybrid_pool import HybridKVCache
from simulator.policies.base import Scheduler, SchedulerContext
from simulator.scenario import Scenario
from simulator.workload.traces import WorkloadTrace


@dataclass(eq=False)   # a run's records compare by identity: no generated __eq__ to compile
class PreparedRun:
    """One scheduler of a scenario, ready to simulate."""
    label: str
    options: object
    scheduler_cls: type[Scheduler]
    num_gpu_blocks: int
    context: SchedulerContext
    layout: HybridLayout | None = None   # a hybrid model's pool layout (its block size is the run's)
    pools: tuple["PreparedPool", ...] = ()   # P/D: the prefill pool, then the decode pool

    def make_kv_cache(self, num_gpu_blocks: int | None = None) -> KVCache:
        """A fresh pool of this run (``num_gpu_blocks``: a P/D pool's, else the run's)."""
        return self.scheduler_cls.make_kv_cache(self.options, num_gpu_blocks or self.num_gpu_blocks,
                                                self.context.block_size, self.layout)

    def counted_kv_cache(self, num_gpu_blocks: int | None = None) -> KVCache:
        """A pool of this run's shape with counted blocks only (no prefix-cache tables): for
        probes and replays that never hash."""
        return counted_kv_cache(num_gpu_blocks or self.num_gpu_blocks, self.context.block_size,
                                self.layout)


@dataclass(eq=False)
class PreparedPool:
    """One pool of a disaggregated run: its replicas' GPU, parallelism, KV blocks and cost model."""
    name: str
    num_replicas: int
    hardware: HardwareSpec
    tensor_parallel_size: int
    num_gpu_blocks: int
    cost_model: StepCostModel


def counted_kv_cache(num_gpu_blocks: int, block_size: int, layout: HybridLayout | None) -> KVCache:
    return (HybridKVCache.of_layout(num_gpu_blocks, block_size, layout) if layout
            else KVCache(num_gpu_blocks, block_size))


@dataclass(eq=False, repr=False)   # likewise; its repr would print the whole workload
class Prepared:
    scenario: Scenario
    model: ModelSpec
    hardware: HardwareSpec
    cost_model: StepCostModel
    trace: WorkloadTrace
    runs: list[PreparedRun]
    # The run's generator after the workload's draws, continued by the acceptance draws of
    # speculative decoding (None without it: nothing else draws).
    acceptance_rng_state: dict | None = None



def replica_pools(scenario: Scenario, run: PreparedRun,
                   cost_model: StepCostModel) -> list[tuple[int, int, StepCostModel]]:
    """(KV blocks per replica, replicas, cost model) of each pool of the run: P/D's two, or the
    scenario's co-located replicas on ``cost_model``."""
    if run.pools:
        return [(pool.num_gpu_blocks, pool.num_replicas, pool.cost_model) for pool in run.pools]
    return [(run.num_gpu_blocks, scenario.engine.num_replicas, cost_model)]
