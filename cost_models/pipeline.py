"""Pipeline parallelism's cost side: how vLLM splits the layers, and what one stage of a step costs
(docs/pipeline-parallel-semantics.md, rules P1, P4, P5).

A stage runs its share of the layers; the step's per-step CPU work (input preparation, launches)
is repeated by every stage's worker rather than split, and each stage but the last sends the
hidden states and the residual of every token to the next over the GPU's link.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from cost_models.base import StepCostModel
from cost_models.batch_shape import BatchShape
from cost_models.hardware import HardwareSpec
from cost_models.interconnect import link_time_s
from cost_models.model_spec import ModelSpec

# vLLM's IntermediateTensors of a decoder layer: the hidden states and the residual (rule P5).
SENT_TENSORS = 2


def stage_layers(num_layers: int, pipeline_parallel_size: int) -> tuple[int, ...]:
    """Layers of each stage as vLLM partitions them (``get_pp_indices``, rule P1): an even share,
    the remainder one each to the stages before the last (which also holds the lm_head)."""
    pp = pipeline_parallel_size
    if pp > num_layers:
        raise ValueError(f"engine.pipeline_parallel_size: {pp} exceeds the model's {num_layers} layers")
    share, remainder = divmod(num_layers, pp)
    layers = [share] * pp
    for i in range(2, remainder + 2):
        layers[-i] += 1
    return tuple(layers)


def stage_models(model: ModelSpec, pipeline_parallel_size: int) -> list[ModelSpec]:
    """One ModelSpec per stage: its layers; the first holds the embedding, the last the lm_head
    (a tied one as a copy of its own), the ones between neither (rule P1). At 1, the model itself."""
    if pipeline_parallel_size == 1:
        return [model]
    if model.state_layers is not None:
        raise ValueError(f"engine.pipeline_parallel_size: {pipeline_parallel_size} is not modelled for "
                         f"hybrid model {model.name} (its state layers' split is not written down); allowed: 1")
    layers = stage_layers(model.num_layers, pipeline_parallel_size)
    ends = [replace(model, num_layers=n, tie_word_embeddings=True) for n in layers]
    return [m if i in (0, len(ends) - 1) else replace(m, vocab_size=0) for i, m in enumerate(ends)]


def p2p_send_s(num_bytes: float, hardware: HardwareSpec) -> float:
    """One point-to-point send over the GPU's link: one hop of NCCL's cost model (link_time_s)."""
    return link_time_s(num_bytes, 1, hardware)


def per_step_overhead_s(cost: StepCostModel) -> float:
    """The CPU time of a step that no kernel does (the cost model's ``step_overhead_s``; 0 where a
    model has none): every stage's worker pays it."""
    overhead = getattr(cost, "step_overhead_s", 0.0)
    return float(overhead) if overhead is not None else 0.0


@dataclass(frozen=True)
class PipelineStages:
    """What one stage of a step costs on a replica: ``stage_time_s`` (the longest stage's share of
    the step's device time, plus the per-step overhead) and ``send_s`` (the hand-over to the next
    stage). One stage: the whole step, nothing sent."""
    cost_model: StepCostModel
    num_stages: int = 1
    layer_fraction: float = 1.0          # the longest stage's layers over the model's
    overhead_s: float = 0.0
    sent_bytes_per_token: float = 0.0
    hardware: HardwareSpec | None = None

    def stage_time_s(self, shape: BatchShape) -> float:
        step_s = self.cost_model.step_time_s(shape)
        if self.num_stages == 1:
            return step_s
        return self.overhead_s + (step_s - self.overhead_s) * self.layer_fraction

    def send_s(self, shape: BatchShape) -> float:
        if self.num_stages == 1:
            return 0.0
        return p2p_send_s(shape.num_tokens * self.sent_bytes_per_token, self.hardware)


def pipeline_stages(cost: StepCostModel, model: ModelSpec, hardware: HardwareSpec,
                    pipeline_parallel_size: int) -> PipelineStages:
    """The stages of ``cost`` split ``pipeline_parallel_size`` ways (rule P4)."""
    if pipeline_parallel_size == 1:
        return PipelineStages(cost)
    longest = max(stage_layers(model.num_layers, pipeline_parallel_size))
    return PipelineStages(cost, pipeline_parallel_size, longest / model.num_layers, per_step_overhead_s(cost),
                          SENT_TENSORS * model.hidden_size * model.dtype_bytes, hardware)
