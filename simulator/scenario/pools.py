"""The scenario's `disaggregation` block: a prefill pool, a decode pool and the KV link between them.

Each pool is replicas of the scenario's model under the same scheduler entry, with its own count,
tensor parallelism, GPU and (optionally) KV blocks; engine.num_replicas and engine.num_gpu_blocks
then stay unset. The link defaults to the prefill GPU's own interconnect (one direction; pools on
one NVLink or PCIe fabric); pools on different nodes give the network's figures.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from cost_models.options import (INT64_MAX, Constraint, NonNegativeFloat, PositiveFloat, PositiveInt,
                                 options_config)

MAX_POOL_REPLICAS = 512   # two pools: together within engine.num_replicas' bound
# The pool includes vLLM's null block (rule 2.1), so one block leaves nothing usable.
GpuBlocks = Annotated[int, Constraint(
    strict=True, ge=2, le=INT64_MAX,
    description="at least 2 (vLLM's null block is one); the memory check bounds it further")]


@options_config
@dataclass(frozen=True)
class PoolOptions:
    num_replicas: Annotated[int, Constraint(
        strict=True, ge=1, le=MAX_POOL_REPLICAS,
        description="at most 512 per pool: each replica is a scheduler, a KV pool and a process")] = 1
    tensor_parallel_size: PositiveInt = 1
    hardware: str | dict[str, Any] | None = None   # default: the scenario's hardware
    num_gpu_blocks: GpuBlocks | None = None        # default: from the GPU's memory


@options_config
@dataclass(frozen=True)
class KVTransferOptions:
    # Per GPU, one direction. Default: half the prefill GPU's interconnect_GBps (datasheets quote
    # both directions).
    bandwidth_GBps: PositiveFloat | None = None
    # Per pull: connection set-up, the read and its completion notice.
    # 0 unless given: no measured figure is at hand; set it from one.
    latency_us: NonNegativeFloat = 0.0


@options_config
@dataclass(frozen=True)
class DisaggregationOptions:
    prefill: PoolOptions = PoolOptions()
    decode: PoolOptions = PoolOptions()
    kv_transfer: KVTransferOptions = KVTransferOptions()
