"""Analytic step cost from the model's shapes and the GPU's datasheet: a roofline per operator group.

Each group (the linear layers, attention over decodes, attention over prefill chunks, the lm_head)
takes max(FLOPs / achievable FLOP/s, bytes / achievable bandwidth) on one tensor-parallel rank, and
the groups run one after another, so their times add. One roofline per group is more honest than one
global max: a mixed step's decode attention is bandwidth-bound while its GEMMs may be compute-bound.
Tensor parallelism adds two all-reduces per layer (after attention and after the MLP), each a ring
all-reduce over the GPU's link (cost_models/interconnect.py). A step also pays each layer's kernel
floors and a per-step overhead. The efficiencies and overheads default to values fitted on measured
steps (cost_models/catalog/roofline_defaults.json, which says where each came from).

``step_time_s`` reads the batch's work counts and does scalar arithmetic on constants precomputed
in ``__post_init__``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field


from cost_models.batch_shape import BatchShape
from cost_models.decode_skew import skewed_time_s
from cost_models.hardware import HardwareSpec
from cost_models.interconnect import allreduces_per_step, ring_allreduce_s
from cost_models.launches import VLLM_LAUNCHES, launches_per_layer
from cost_models.memory import check_tensor_parallel_size
from cost_models.model_spec import ModelSpec
from cost_models.moe import expert_load
from cost_models.precision import linear_peak_flops
from cost_models.roofline_defaults import DEFAULTED, roofline_defaults

# Full-width hidden-state traffic per token per layer, in hidden_size elements, replicated on every
# rank: two RMSNorms (read + write: 4), two residual adds (two reads + one write: 6), the inputs of
# the QKV and gate_up GEMMs (2) and the outputs of the O and down GEMMs (2).
HIDDEN_RW_PER_LAYER = 14
LOGIT_BYTES = 4  # vLLM upcasts logits to fp32 for sampling


@dataclass(frozen=True)
class RooflineCostModel:
    model: ModelSpec
    hardware: HardwareSpec
    tensor_parallel_size: int = 1
    # None: the value fitted on the GPU's measured steps, or across the GPUs measured for any other
    # (cost_models/catalog/roofline_defaults.json, written by cost_models/fit/roofline_fit.py:
    # compute and bandwidth as fractions of the datasheet peaks).
    compute_efficiency: float | None = None
    bandwidth_efficiency: float | None = None
    # Per-step time no kernel accounts for (scheduling, input preparation, the sampled tokens' sync).
    step_overhead_s: float | None = None
    # Fixed cost of one all-reduce, paid 2 x num_layers times per step at tensor_parallel_size > 1;
    # None: NCCL's latencies for the GPU's link (base plus 2(N-1) hops, cost_models/interconnect.py).
    allreduce_latency_s: float | None = None
    # Least time of one kernel of a layer, x vLLM's kernels per layer (cost_models/launches.py) x
    # layers: the per-layer fixed cost of a step.
    launch_s: float | None = None
    # Decodes of unequal context: alpha of t(mean) + alpha (t(longest) - t(mean)), as measured.
    decode_skew: float | None = None
    _k: "_PerRank" = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_tensor_parallel_size(self.model, self.tensor_parallel_size)
        unset = [name for name in DEFAULTED if getattr(self, name) is None]
        if unset:
            defaults = roofline_defaults(self.hardware.name)
            for name in unset:
                object.__setattr__(self, name, defaults[name])
        if not _is_number(self.decode_skew) or not 0 <= self.decode_skew <= 1:
            raise ValueError(f"cost_model.decode_skew: {self.decode_skew!r} must be a number in [0, 1]")
        for name in ("compute_efficiency", "bandwidth_efficiency"):
            value = getattr(self, name)
            if not _is_number(value) or not 0 < value <= 1:
                raise ValueError(f"cost_model.{name}: {value!r} must be a number in (0, 1]")
        for name in ("step_overhead_s", "allreduce_latency_s", "launch_s"):
            value = getattr(self, name)
            if value is None and name == "allreduce_latency_s":
                continue
            if not _is_number(value) or value < 0:
                raise ValueError(f"cost_model.{name}: {value!r} is not a non-negative number of seconds")
        object.__setattr__(self, "_k", _per_rank(self))

    def step_time_s(self, shape: BatchShape) -> float:
        (tokens, decode_ctx, num_decode, prefill_pairs, prefill_ctx, _, num_sampled,
         num_seqs) = shape.work_counts
        if num_seqs == 0:
            return self.step_overhead_s
        k = self._k
        linear_s, sampling_s, allreduce_s = self._token_terms(tokens, num_sampled)
        prefill_tokens = tokens - num_decode
        if self.decode_skew and num_decode > 1:
            time_s = linear_s + self._skewed_decode_s(num_decode, decode_ctx, shape.longest_decode_context)
        else:
            decode_pairs = decode_ctx + num_decode
            time_s = linear_s + k.attention_s(decode_pairs, decode_pairs, num_decode)
        time_s += k.attention_s(prefill_pairs, prefill_ctx + prefill_tokens, prefill_tokens)
        if k.state_rw_s_per_seq:
            time_s += k.state_s(tokens, num_seqs)
        return time_s + sampling_s + allreduce_s + k.fixed_s

    def decode_steps_time_s(self, num_seqs: int, context_sum: int, longest: int,
                            num_steps: int) -> list[float]:
        """step_time_s of a run of decode steps with the same rows (cost_models.base): the same
        operations in the same order (a step without prefill adds +0.0 for it, which changes no
        positive time), with the terms that only depend on the rows taken once."""
        k = self._k
        attention_s = k.attention_s
        linear_s, sampling_s, allreduce_s = self._token_terms(num_seqs, num_seqs)
        overhead_s = k.fixed_s
        if self.decode_skew and num_seqs > 1:
            time_at, alpha = self._decodes_at(num_seqs), self.decode_skew
            decodes = [skewed_time_s(time_at, num_seqs, context_sum + i * num_seqs, longest + i, alpha)
                       for i in range(num_steps)]
        else:
            first = context_sum + num_seqs   # each step's (query, key) pairs, one row further each step
            decodes = [attention_s(p, p, num_seqs) for p in range(first, first + num_steps * num_seqs, num_seqs)]
        if k.state_rw_s_per_seq:   # a hybrid model's state layers, as step_time_s adds them
            state_s = k.state_s(num_seqs, num_seqs)
            return [linear_s + decode_s + state_s + sampling_s + allreduce_s + overhead_s for decode_s in decodes]
        return [linear_s + decode_s + sampling_s + allreduce_s + overhead_s for decode_s in decodes]

    def _skewed_decode_s(self, num_decodes: int, context_sum: float, longest: int) -> float:
        """The decodes' attention when their contexts differ: the skew rule (cost_models/decode_skew.py)
        over their attention at one shared context."""
        return skewed_time_s(self._decodes_at(num_decodes), num_decodes, context_sum, longest, self.decode_skew)

    def _decodes_at(self, num_decodes: int):
        """The attention of ``num_decodes`` decodes all at one context, as a function of it."""
        attention_s = self._k.attention_s
        return lambda context: attention_s(num_decodes * (context + 1), num_decodes * (context + 1), num_decodes)

    def _token_terms(self, tokens: int, num_sampled: int) -> tuple[float, float, float]:
        """The terms that depend on the token and sampled-row counts only: the linear layers,
        the lm_head and sampler, the all-reduces (0.0 where absent: adding it changes nothing)."""
        k = self._k
        weight_s, compute_s = k.dense_weight_s, k.linear_s_per_token * tokens
        if k.expert_s:   # linear_s_per_token holds the mean rank's expert passes; the busiest's excess added
            routed, distinct = expert_load(tokens, k.num_experts, k.top_k,
                                           self.model.expert_parallel_ranks(self.tensor_parallel_size))
            weight_s += k.expert_s * distinct
            compute_s += k.expert_pass_s * k.top_k * (routed - tokens)
        linear_s = max(compute_s, weight_s + k.activation_s_per_token * tokens)
        sampling_s = k.sampling_s(num_sampled) if num_sampled else 0.0
        allreduce_s = (k.allreduces * ring_allreduce_s(k.allreduce_bytes_per_token * tokens,
                                                       self.tensor_parallel_size, self.hardware,
                                                       self.allreduce_latency_s)
                       if k.allreduces else 0.0)
        return linear_s, sampling_s, allreduce_s


def _is_number(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


@dataclass(frozen=True, slots=True)
class _PerRank:
    """Every shape-independent factor of step_time_s on one rank, as seconds per unit of work.

    Compute terms are FLOPs / (peak x compute_efficiency), memory terms bytes / (bandwidth x
    bandwidth_efficiency); see _per_rank for the FLOP and byte counts. The linear layers take the
    quantization's weight bytes and peak (cost_models/precision.py), the KV cache its dtype's bytes.
    """
    linear_s_per_token: float      # GEMM FLOPs of one token through every layer
    dense_weight_s: float          # reading the non-expert weights once per step
    expert_s: float                # reading one expert of every layer (MoE; 0 for dense models)
    expert_pass_s: float           # one token's pass through one expert of every layer
    num_experts: int
    top_k: int
    activation_s_per_token: float  # activation traffic of one token through the linear layers
    attn_s_per_pair: float         # attention FLOPs of one (query, key) pair over every layer
    kv_s_per_token: float          # reading or writing one token's K and V in every layer
    q_s_per_token: float           # reading Q and writing the attention output of one token
    lm_head_s_per_row: float
    lm_head_weight_s: float
    logit_s_per_row: float         # writing one row of fp32 logits
    allreduces: int                # per step; 0 at tensor_parallel_size 1
    allreduce_bytes_per_token: int  # one token's hidden state, all-reduced after attention and MLP
    fixed_s: float                 # a step's kernel floors (launches) and its per-step overhead
    scan_s_per_token: float = 0.0  # state layers' recurrent update of one token (hybrid models)
    state_rw_s_per_seq: float = 0.0   # reading and writing one sequence's states (hybrid models)

    def attention_s(self, pairs, kv_tokens, q_tokens) -> float:
        """Attention over every layer: its FLOPs for ``pairs`` (query, key) pairs or its traffic
        (K and V of ``kv_tokens``, Q and output of ``q_tokens``), whichever takes longer."""
        return max(self.attn_s_per_pair * pairs,
                   self.kv_s_per_token * kv_tokens + self.q_s_per_token * q_tokens)

    def state_s(self, tokens, num_seqs) -> float:
        """The state layers' recurrence (docs/hybrid-state-semantics.md, cost): its FLOPs for
        ``tokens`` or every scheduled sequence's state read and written once, the longer."""
        return max(self.scan_s_per_token * tokens, self.state_rw_s_per_seq * num_seqs)

    def sampling_s(self, num_sampled) -> float:
        """The lm_head and logits of ``num_sampled`` rows: compute or weight and logit traffic."""
        return max(self.lm_head_s_per_row * num_sampled,
                   self.lm_head_weight_s + self.logit_s_per_row * num_sampled)


def _per_rank(m: RooflineCostModel) -> _PerRank:
    spec, tp, b, wb = m.model, m.tensor_parallel_size, m.model.dtype_bytes, m.model.weight_dtype_bytes
    flops = m.hardware.bf16_flops * m.compute_efficiency
    linear_flops = linear_peak_flops(m.hardware, spec.quantization) * m.compute_efficiency
    bandwidth = m.hardware.memory_bandwidth_Bps * m.bandwidth_efficiency
    layers, hidden, vocab = spec.num_layers, spec.hidden_size, spec.vocab_size
    mats = 3 if spec.mlp_kind == "swiglu" else 2
    router = hidden * spec.num_experts
    expert = mats * hidden * spec.moe_intermediate_size
    # Whole-model parameter counts (exact integers): attention's or the state layers' projections
    # in every layer, then each layer's MLP. The linear weights take the quantization's bytes, an
    # MoE router the activation dtype's (experts are counted apart).
    dense_linear = spec.mixer_params + layers * (0 if spec.is_moe else spec.mlp_params_per_layer)
    active = spec.mixer_params + layers * (spec.active_mlp_params_per_layer + router)
    attention_layers, state = spec.num_attention_layers, spec.state_layers
    return _PerRank(
        linear_s_per_token=2 * active / tp / linear_flops,
        dense_weight_s=(dense_linear * wb + (layers * router * b if spec.is_moe else 0)) / tp / bandwidth,
        expert_s=layers * expert * wb / tp / bandwidth if spec.is_moe else 0.0,
        expert_pass_s=2 * layers * expert / tp / linear_flops,
        num_experts=spec.num_experts,
        top_k=spec.num_experts_per_tok,
        activation_s_per_token=_activation_s_per_token(spec, tp, b, bandwidth),
        attn_s_per_pair=2 * 2 * spec.q_size * attention_layers / tp / flops,
        kv_s_per_token=spec.kv_bytes_per_token(tp) / bandwidth,
        q_s_per_token=attention_layers * 2 * spec.q_size * b / tp / bandwidth,
        lm_head_s_per_row=2 * hidden * vocab / tp / flops,
        lm_head_weight_s=hidden * vocab * b / tp / bandwidth,
        logit_s_per_row=vocab * LOGIT_BYTES / tp / bandwidth,
        allreduces=allreduces_per_step(layers, tp),
        allreduce_bytes_per_token=hidden * b,
        fixed_s=layers * launches_per_layer(spec, VLLM_LAUNCHES) * m.launch_s + m.step_overhead_s,
        scan_s_per_token=state.num_layers * state.scan_flops_per_token(tp) / flops if state else 0.0,
        state_rw_s_per_seq=2 * state.num_layers * state.state_bytes(tp) / bandwidth if state else 0.0)


def _activation_s_per_token(spec: ModelSpec, tp: int, b: int, bandwidth: float) -> float:
    """Activation traffic of one token through every layer's linear part on one rank; a state
    layer moves its own projections' widths in place of attention's."""
    time_s = spec.num_layers * b * _activation_elements_per_token(spec, tp) / bandwidth
    state = spec.state_layers
    if state is not None:
        attention = 2 * spec.q_size + 2 * spec.kv_size
        time_s += state.num_layers * b * (state.in_proj_size + state.out_proj_size - attention) / tp / bandwidth
    return time_s


def _activation_elements_per_token(spec: ModelSpec, tp: int) -> float:
    """Activation elements one token moves through one layer's linear part on one rank."""
    # QKV output, O input, then gate_up output, the activation's read and write, down's input.
    projections = 2 * spec.q_size + 2 * spec.kv_size
    if spec.is_moe:
        mlp = spec.num_experts_per_tok * 6 * spec.moe_intermediate_size + spec.num_experts
    else:
        mlp = (6 if spec.mlp_kind == "swiglu" else 4) * spec.intermediate_size
    return HIDDEN_RW_PER_LAYER * spec.hidden_size + (projections + mlp) / tp
