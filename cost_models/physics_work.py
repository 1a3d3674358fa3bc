"""A model's work on one GPU as the physics model's features: its config's FLOPs and bytes per token,
pair and key at the GPU's datasheet peaks, and the counts of a step's launches, waves and re-reads
(cost_models/physics.py says what each term is and how they add up)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cost_models.hardware import HardwareSpec
from cost_models.launches import HARNESS_LAUNCHES, launches_per_layer
from cost_models.model_spec import ModelSpec
from cost_models.moe import expert_load
from cost_models.roofline import LOGIT_BYTES, _activation_elements_per_token


@dataclass(frozen=True, slots=True)
class PhysicsWork:
    """One model's per-rank work constants on one GPU: the features of a step are these times its
    work counts (features())."""
    groups: tuple           # (FLOPs per token / peak, weight bytes / bandwidth) per projection group
    lm_head: tuple          # the same for the lm_head, per sampled row
    activation_s_per_token: float
    attention_s_per_pair: float
    kv_s_per_token: float
    prefill_kv_s_per_token: float   # the same per query head (prefill_kv_read)
    logit_s_per_row: float
    num_layers: int
    launches_per_layer: float
    mixed_launches_per_layer: float   # more, in a step that both prefills and decodes
    gemm_tile_tokens: int
    wave_heads: int = 1             # query heads per rank: a decode's CTAs in a mixed step
    sm_count: int | None = None     # the GPU's SMs; None: mixed_decode_waves is not computed
    query_group: float = 1.0        # query heads that share one KV head (query_heads_per_kv_head)
    l2_keys: float | None = None    # keys of one KV head of one layer the GPU's L2 holds; None: no rereads
    router: tuple = (0.0, 0.0)      # MoE: the router's (FLOPs per token / peak, weight bytes / bandwidth)
    expert: tuple = (0.0, 0.0)      # MoE: one expert pass's FLOPs / peak, one expert's bytes / bandwidth
    num_experts: int = 0            # 0: a dense model (moe_experts is 0)
    top_k: int = 0
    expert_parallel_ranks: int = 1  # ranks holding whole experts (moe.expert_load); 1: slices of every one

    def features(self, counts: tuple, gemm_balance: float) -> np.ndarray:
        """The TERMS features of one step's work counts."""
        return np.array(self.feature_list(counts, gemm_balance, max))

    def feature_columns(self, counts: np.ndarray, gemm_balance: float) -> np.ndarray:
        """features() of every row of a (steps x 8) array of work counts, as one array."""
        return np.column_stack(np.broadcast_arrays(*self.feature_list(counts.T.astype(float), gemm_balance,
                                                                      np.maximum)))

    def feature_list(self, counts, gemm_balance: float, maximum) -> list:
        """The one rule for the features, on scalars (``maximum`` = max) or on columns (np.maximum)."""
        (tokens, decode_ctx, num_decodes, pairs, prefill_ctx, num_prefills, num_sampled, num_seqs) = counts
        tile = self.gemm_tile_tokens
        tiled = -(-tokens // tile) * tile   # a GEMM computes whole tiles of rows
        gemm = sum(maximum(f * tiled, gemm_balance * w) for f, w in self.groups) * (tokens > 0)
        f, w = self.lm_head
        lm_head = maximum(f * num_sampled, gemm_balance * w) * (num_sampled > 0)
        layers = self.num_layers * (num_seqs > 0)
        mixed = (num_prefills > 0) * (num_decodes > 0)
        launches = (self.launches_per_layer + self.mixed_launches_per_layer * mixed) * layers
        decode_kv = self.kv_s_per_token * (decode_ctx + num_decodes)
        return [1.0, gemm, self.activation_s_per_token * tokens, self.attention_s_per_pair * pairs,
                decode_kv, self.prefill_kv_s_per_token * prefill_ctx,
                launches, layers * num_seqs, lm_head, self.logit_s_per_row * num_sampled,
                self.attention_s_per_pair * (decode_ctx + num_decodes) * (num_prefills > 0),
                self.decode_waves(num_decodes, decode_ctx, maximum) * (num_prefills > 0) * layers,
                decode_kv * (num_prefills > 0) * self.rereads(num_decodes, decode_ctx, maximum),
                self.moe_blocks(tokens, tiled, gemm_balance, maximum), launches]

    def moe_blocks(self, tokens, tiled, gemm_balance: float, maximum):
        """The moe_experts feature: the router over the (tiled) tokens, and the experts: the routed
        tokens x top_k expert passes or the weights of the distinct experts they touch, the longer
        (moe.expert_load: the busiest rank's under expert parallelism)."""
        if not self.num_experts:
            return 0.0 * tokens
        (fr, wr), (fe, we) = self.router, self.expert
        routed, distinct = self.expert_load(tokens)
        return (maximum(fr * tiled, gemm_balance * wr)
                + maximum(fe * self.top_k * routed, gemm_balance * we * distinct)) * (tokens > 0)

    def expert_load(self, tokens):
        """moe.expert_load of a step's tokens, or of a column of them (one call per distinct count)."""
        def load(t):
            return expert_load(int(t), self.num_experts, self.top_k, self.expert_parallel_ranks)
        if np.ndim(tokens) == 0:
            return load(tokens)
        values, inverse = np.unique(tokens, return_inverse=True)
        loads = np.array([load(t) for t in values])
        return loads[inverse, 0], loads[inverse, 1]

    def decode_waves(self, num_decodes, decode_ctx, maximum):
        """Waves of a step's (decode, query head) CTAs over the SMs x the keys of the mean decode
        (its context and its own new key): per layer, the mixed_decode_waves feature."""
        if self.sm_count is None:
            return 0.0 * num_decodes
        waves = -(-(num_decodes * self.wave_heads) // self.sm_count)
        return waves * (decode_ctx + num_decodes) / maximum(num_decodes, 1)

    def rereads(self, num_decodes, decode_ctx, maximum):
        """Times a mixed step's decodes read their KV again, beyond the first (mixed_decode_rereads).

        A KV head's query heads each walk its keys in a CTA of their own. While the keys of one KV
        head over all the step's decodes fit in L2, the other heads' walks hit it. Beyond, a read
        goes to DRAM unless it runs beside another head's: the CTAs start head after head, decodes
        CTAs a head, one to an SM, so a group of ``query_group`` heads spans query_group x decodes
        CTAs, and each run of SMs of them reads the KV once: ceil(query_group x min(decodes, SMs)
        / SMs) reads.
        """
        if self.sm_count is None or self.l2_keys is None:
            return 0.0 * num_decodes
        span = self.query_group * -maximum(-1.0, -num_decodes / self.sm_count)   # x min(1, decodes / SMs)
        return (-(-span // 1) - 1.0) * (decode_ctx + num_decodes > self.l2_keys)


def physics_work(spec: ModelSpec, hardware: HardwareSpec, tp: int = 1,
                 launches: tuple[int, int, int] = HARNESS_LAUNCHES, gemm_tile_tokens: int = 1) -> PhysicsWork:
    """The work constants of ``spec`` on one of ``tp`` ranks of ``hardware``, at datasheet peaks."""
    flops, bandwidth, b = hardware.bf16_flops, hardware.memory_bandwidth_Bps, spec.dtype_bytes
    layers, hidden = spec.num_layers, spec.hidden_size
    mats = 3 if spec.mlp_kind == "swiglu" else 2
    ffn = spec.intermediate_size
    ffn_weights = mats * hidden * ffn
    group_params = (  # (params a token touches, params read) of one layer's group on one rank
        (hidden * (spec.q_size + 2 * spec.kv_size),) * 2, (spec.q_size * hidden,) * 2,
        ((mats - 1) * hidden * ffn, (mats - 1) / mats * ffn_weights), (ffn * hidden, ffn_weights / mats))

    def group_of(p, w):
        return 2 * layers * p / tp / flops, layers * w * b / tp / bandwidth
    # An MoE model's MLP is its MoE block, which moe_experts prices (router and experts).
    groups = tuple(group_of(p, w) for p, w in group_params[:2 if spec.is_moe else 4])
    router, expert = hidden * spec.num_experts, mats * hidden * spec.moe_intermediate_size
    vocab = spec.vocab_size
    return PhysicsWork(
        groups=groups,
        lm_head=(2 * hidden * vocab / tp / flops, hidden * vocab * b / tp / bandwidth),
        activation_s_per_token=layers * b * elementwise_elements_per_token(spec, tp, launches) / bandwidth,
        attention_s_per_pair=2 * 2 * spec.q_size * layers / tp / flops,
        kv_s_per_token=spec.kv_bytes_per_token(tp) / bandwidth,
        prefill_kv_s_per_token=spec.kv_bytes_per_token(tp) * spec.query_heads_per_kv_head(tp) / bandwidth,
        logit_s_per_row=2 * vocab * LOGIT_BYTES / tp / bandwidth,
        num_layers=layers, launches_per_layer=launches_per_layer(spec, launches),
        mixed_launches_per_layer=launches[2],
        gemm_tile_tokens=gemm_tile_tokens, wave_heads=spec.num_attention_heads // tp,
        sm_count=hardware.sm_count, query_group=spec.query_heads_per_kv_head(tp),
        l2_keys=hardware.l2_bytes / (2 * spec.head_dim_ * spec.kv_dtype_bytes) if hardware.l2_bytes else None,
        router=group_of(router, router), expert=group_of(expert, expert),
        num_experts=spec.num_experts, top_k=spec.num_experts_per_tok,
        expert_parallel_ranks=spec.expert_parallel_ranks(tp))


def elementwise_elements_per_token(spec: ModelSpec, tp: int, launches: tuple[int, int, int]) -> float:
    """Activation elements one token moves through one layer's elementwise kernels on one rank.

    An engine of fused kernels (one launch a norm: vLLM) is counted kernel by kernel: two fused
    add + RMSNorms read the hidden state and the residual and write both, RoPE and the QK-norm
    rewrite q and k in place, SiLU-and-mul reads the gate and up halves and writes their product
    (an MoE model's per routed expert, plus the router's logits). The projections' own inputs and
    outputs are the GEMM kernels' traffic, in ``gemm``. The harness's chain of unfused kernels keeps
    the roofline's coarser count (cost_models/roofline.py), which its timings fit better than a
    kernel-by-kernel count of the 8-kernel norms (cost_models/profiles/README.md).
    """
    if launches[1] != 1:
        return _activation_elements_per_token(spec, tp)
    heads = spec.q_size + spec.kv_size
    if spec.is_moe:
        mlp = spec.num_experts_per_tok * 3 * spec.moe_intermediate_size + spec.num_experts
    else:
        mlp = (3 if spec.mlp_kind == "swiglu" else 2) * spec.intermediate_size
    return 8 * spec.hidden_size + (2 * heads * (2 if spec.qk_norm else 1) + mlp) / tp
