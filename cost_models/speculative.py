"""A step's time with speculative decoding: the target's verify pass plus the proposer's.

The target prices the step as scheduled, each verifying request's 1 + k tokens included (the
cost model sees the real token count). A model proposer (a draft model, or an EAGLE/MTP head
priced as a model of its own) then runs vLLM's proposer loop for every request that sampled: one
pass over the step's tokens, which also fills the proposer's KV and gives the first draft, and
k - 1 passes of one token per request, each over a context one longer. ngram proposes on the
CPU: ``proposer_cpu_s`` per step that proposes (docs/speculative-decoding-semantics.md, S7).
"""
from __future__ import annotations

from dataclasses import replace

from cost_models.base import StepCostModel
from cost_models.batch_shape import BatchShape
from cost_models.factory import make_cost_model
from cost_models.model_spec import ModelSpec, load_model

# The roofline options a proposer shares with a roofline target (its efficiencies on the GPUs).
_SHARED_ROOFLINE_OPTIONS = ("compute_efficiency", "bandwidth_efficiency", "allreduce_latency_s")


class SpeculativeStepCost:
    def __init__(self, target: StepCostModel, proposer: StepCostModel | None,
                 num_speculative_tokens: int, proposer_cpu_s: float = 0.0):
        self.target = target
        self.proposer = proposer
        self.num_speculative_tokens = num_speculative_tokens
        self.proposer_cpu_s = proposer_cpu_s

    def step_time_s(self, shape: BatchShape) -> float:
        time_s = self.target.step_time_s(shape)
        num_sampled = shape.num_sampled
        if not num_sampled:
            return time_s   # only partial prefill chunks: nothing is proposed
        time_s += self.proposer_cpu_s
        if self.proposer is not None:
            time_s += self.proposer_time_s(shape)
        return time_s

    def proposer_time_s(self, shape: BatchShape) -> float:
        """The proposer's k passes after this step (the first over the step's own tokens)."""
        proposer = self.proposer
        time_s = proposer.step_time_s(shape)
        rows, rows_ctx, rows_longest = shape.decode_rows
        sampled = shape.samples
        ends = (shape.context_tokens + shape.new_tokens)[sampled]
        count = int(sampled.sum()) + rows
        context_sum = int(ends.sum()) + rows_ctx + rows
        longest = max(int(ends.max()) if ends.size else 0, rows_longest + 1 if rows else 0)
        for j in range(self.num_speculative_tokens - 1):
            time_s += proposer.step_time_s(
                BatchShape.of_decode_rows(count, context_sum + j * count, longest + j))
        return time_s


def speculative_step_cost(target: StepCostModel, method: str, num_speculative_tokens: int,
                          proposer_cpu_s: float, draft_model: str | None, model: ModelSpec,
                          hardware, tensor_parallel_size: int, cost_options: dict) -> SpeculativeStepCost:
    """``target`` with its proposer: a draft model (a catalog name), or an EAGLE/MTP head taken
    as one decoder layer of the target's shapes with its embedding and LM head, priced by the
    roofline on the same GPUs (a fitted profile of the target says nothing of the drafter), with
    the target's roofline efficiencies and no step overhead of its own (its passes run inside
    the target's step); ngram has none."""
    proposer = None
    if method != "ngram":
        drafter = (load_model(draft_model) if method == "draft_model"
                   else replace(model, name=f"{model.name}-{method}-head", num_layers=1))
        shared = ({k: v for k, v in cost_options.items() if k in _SHARED_ROOFLINE_OPTIONS}
                  if cost_options.get("kind") == "roofline" else {})
        proposer = make_cost_model("roofline", {**shared, "step_overhead_s": 0.0}, drafter,
                                   hardware, tensor_parallel_size)
    return SpeculativeStepCost(target, proposer, num_speculative_tokens, proposer_cpu_s)
