"""When a batch's forward pass ends: the stages it passes through, one batch at a time each
(docs/pipeline-parallel-semantics.md, rules P3 and P4).

Without pipeline parallelism there is one stage and a batch ends ``step_time_s`` after the stage is
free and the batch was scheduled. With P stages a batch enters stage s + 1 once it has left stage
s and its hidden states have arrived, and once stage s + 1 has finished the batch before it.
"""
from __future__ import annotations

from cost_models.batch_shape import BatchShape
from cost_models.pipeline import PipelineStages


def max_concurrent_batches(pipeline_parallel_size: int, async_scheduling: bool) -> int:
    """Batches the engine keeps in flight (vLLM's ``VllmConfig.max_concurrent_batches``, V1 model
    runner, rule P3): one per stage; without stages, two under async scheduling (§1.6), else one."""
    if pipeline_parallel_size > 1:
        return pipeline_parallel_size
    return 2 if async_scheduling else 1


class Pipeline:
    """A replica's stages: each stage's free time, advanced batch by batch in schedule order."""

    __slots__ = ("stages", "free_s")

    def __init__(self, stages: PipelineStages) -> None:
        self.stages = stages
        self.free_s = [0.0] * stages.num_stages

    @property
    def num_stages(self) -> int:
        return self.stages.num_stages

    def pass_through(self, scheduled_s: float, shape: BatchShape) -> tuple[float, float]:
        """(start, end) of a batch scheduled at ``scheduled_s``: when it enters the first stage and
        when it leaves the last. Batches must be passed in the order they were scheduled."""
        stage_s = self.stages.stage_time_s(shape)
        send_s = self.stages.send_s(shape)
        free_s = self.free_s
        start_s = at_s = scheduled_s if scheduled_s > free_s[0] else free_s[0]
        for s in range(self.num_stages):
            if s:
                at_s += send_s
                at_s = at_s if at_s > free_s[s] else free_s[s]
            at_s += stage_s
            free_s[s] = at_s
        return start_s, at_s
