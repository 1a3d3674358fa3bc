"""A physics step-cost model: the roofline's terms per layer, with fitted efficiencies and overheads.

    time = sum over TERMS of coefficient x feature + tensor-parallel all-reduces

Each feature is a count of work from the model's config (ModelSpec) and the step's work counts,
turned into seconds at the GPU's datasheet peak (FLOPs / bf16_flops, bytes / memory bandwidth) or
left as a count of launches; its coefficient is then an inverse efficiency (1 / fraction of peak) or
an overhead in seconds. The coefficients belong to a GPU and engine mode, not to a model: fitted
non-negative across every model measured there (cost_models/fit/physics_fit.py), they price a model
never measured from its config alone.

- ``gemm``: every projection group of every layer (QKV, O, gate_up, down) runs at
  max(FLOPs / peak, gemm_balance x weight bytes / bandwidth): weight-bound at few tokens,
  compute-bound at many; ``gemm_balance`` (the one non-linear parameter: compute over bandwidth
  efficiency) places each group's knee, which moves with the group's shape; the FLOPs count the
  tokens rounded up to whole GEMM tiles (``gemm_tile_tokens``, 1 for none).
- ``activation_traffic``: the bytes each token moves through each layer's elementwise kernels
  (norms, residual adds, RoPE, the MLP activation), counted for the engine's kernels
  (``elementwise_elements_per_token``).
- ``prefill_attention``: (query, key) pairs of the prefill chunks, FLOPs at peak, as the engine's
  kernel computes them: the queries in whole tiles of ``attention_query_tile`` rows, each tile over
  the keys up to its last row (batch_shape.work_counts_at_tile; 1: the causal pairs).
- ``decode_kv_read``: K and V bytes the decodes read over their context.
- ``prefill_kv_read``: K and V bytes the prefills read over their cached context, once per query
  head: a FlashAttention prefill gives each (query tile, query head) its own CTA, which walks its KV
  head's keys and values, so the heads of a group do not share the read as a decode kernel's do
  (cost_models/profiles/README.md, "Prefill attention over a cached context").
- ``layer_launch``: every kernel of every layer (launches_per_layer, from the engine's own kernel
  count): under CUDA graphs the device's least time per kernel, which a batch-1 decode pays ~1,200
  times.
- ``layer_seq``: one per layer per sequence (attention kernels' per-sequence set-up).
- ``lm_head``: the lm_head over the sampled rows, as a projection group of its own.
- ``logits``: the fp32 logits of each sampled row written and read by the sampler.
- ``mixed_decode_attention``: the decodes' (query, key) pairs in a step that also prefills, FLOPs at
  peak. An engine that runs the whole mixed batch through one variable-length prefill kernel
  (vLLM's FlashAttention) gives each decode a query tile sized for a chunk, so its attention is
  bound by padded compute, not by its KV reads (0 where decodes get their own kernel).
- ``mixed_decode_waves``: the same decodes' attention as the GPU runs it: the variable-length kernel
  gives each (decode, query head) one CTA that walks the decode's whole context (no split over the
  keys), one CTA to an SM, so the CTAs run in ceil(decodes x query heads per rank / SMs) waves, each
  as long as a walk of the mean decode context: the feature is layers x waves x mean keys, its
  coefficient a CTA's time per key (cost_models/profiles/README.md, "Physics files", for the grid
  that shows it). It needs the GPU's SM count (hardware.csv ``sm_count``): without one the feature
  is not computed, and a model or fit that would use it refuses (PhysicsCostModel, physics_fit).
- ``mixed_decode_rereads``: the same decodes' KV read again by the other query heads of each KV head
  (PhysicsWork.rereads): none while one KV head's keys over the step's decodes fit in the GPU's L2
  (hardware.csv ``l2_mib``), else once for each run of SMs that the group's CTAs span. Priced at
  decode_kv_read's coefficient (TIED_TERMS): the same DRAM, read again; and only where the walks
  were measured (GATED_BY): a file without them (the H200 harness's, Vidur's) prices none.
- ``moe_experts``: an MoE model's MoE blocks (0 for a dense one, whose MLP is in ``gemm``): the
  router as a projection group over every token, and the experts at max(FLOPs of tokens x top_k
  expert passes / peak, gemm_balance x the weight bytes of the expected distinct experts the
  tokens touch / bandwidth), the count the roofline reads (cost_models/moe.py). Priced at gemm's
  coefficient (TIED_TERMS); a feature of its own so that a source without expert timings could
  leave it out of its rows (``measured``).
- ``step_overhead``: one per step (scheduling, input preparation, sampled-token sync).
- ``host_launch``: the host's time to issue one kernel, x every kernel of the step. Eager, the
  host issues kernels while the GPU runs earlier ones, so a step takes the longer of the two:
  step_overhead + max(host_launch x launches, device terms). Under CUDA graphs it is 0.
The device terms add up, but for the decodes' attention: a kernel that walks the keys while it
reads them takes the longer of its walks (mixed_decode_attention + mixed_decode_waves) and its KV
traffic (decode_kv_read + mixed_decode_rereads); a step without walks (a decode kernel, an engine
whose decodes get their own kernel) pays its traffic (device_time_of).
Communication at tensor_parallel_size > 1 is the roofline's all-reduce (cost_models/interconnect.py),
added as it is, not fitted. Decodes of unequal context cost t(mean) + alpha (t(longest) - t(mean))
(cost_models/decode_skew.py), alpha as the fitted sources measured it (``decode_skew``; 0 where none
did): the grids the terms are fitted on hold decodes of one context only.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cost_models.batch_shape import BatchShape, work_counts_at_tile
from cost_models.fitted_range import FittedRange, PricedByCounts
from cost_models.hardware import HardwareSpec
from cost_models.interconnect import allreduces_per_step, ring_allreduce_s
from cost_models.launches import HARNESS_LAUNCHES
from cost_models.measured_ceilings import BANDWIDTH, FLOPS
from cost_models.memory import check_tensor_parallel_size
from cost_models.model_spec import ModelSpec
from cost_models.physics_work import PhysicsWork, physics_work

# Rows of one GEMM tile that a fit may find (1: no rounding): a step's GEMMs compute its tokens
# rounded up to whole tiles, as measured dense tables step (cost_models/profiles/README.md).
GEMM_TILE_CHOICES = (1, 64, 128)
TERMS = ("step_overhead", "gemm", "activation_traffic", "prefill_attention", "decode_kv_read",
         "prefill_kv_read", "layer_launch", "layer_seq", "lm_head", "logits", "mixed_decode_attention",
         "mixed_decode_waves", "mixed_decode_rereads", "moe_experts", "host_launch")
# Terms whose coefficient is 1 / a fraction of a datasheet peak, and the peak: at least 1 / the
# fraction the device was measured to reach (cost_models/measured_ceilings.py), 1 unmeasured. A GEMM
# is bound by FLOP/s; its weight read (x gemm_balance) by bandwidth, held by the balance's floor.
PEAK_OF = {"gemm": FLOPS, "activation_traffic": BANDWIDTH, "prefill_attention": FLOPS, "decode_kv_read": BANDWIDTH,
           "prefill_kv_read": BANDWIDTH, "lm_head": FLOPS, "logits": BANDWIDTH, "mixed_decode_attention": FLOPS}
EFFICIENCY_TERMS = tuple(PEAK_OF)
# Terms priced at another term's coefficient, not fitted on their own: the experts are GEMMs, and held
# out their own coefficient did worse (cost_models/profiles/README.md, "Physics files").
TIED_TERMS = {"moe_experts": "gemm", "mixed_decode_rereads": "decode_kv_read"}
# Tied terms priced only where another term was measured: the re-reads where the decodes' walks
# were (mixed_decode_waves > 0: a kernel that gives each decode and query head a CTA of its own);
# elsewhere a mixed step's decodes share their KV reads, as a decode kernel's packed heads do.
GATED_BY = {"mixed_decode_rereads": "mixed_decode_waves"}
FITTED_TERMS = tuple(t for t in TERMS if t not in TIED_TERMS)
# A step's decode attention takes the longer of its CTAs' walks and its KV traffic (step_time_of);
# the other device terms (all but the per-step overhead and the host's launch time) add up.
WALKS = np.array([TERMS.index("mixed_decode_attention"), TERMS.index("mixed_decode_waves")])
TRAFFIC = np.array([TERMS.index("decode_kv_read"), TERMS.index("mixed_decode_rereads")])
LINEAR_DEVICE = np.array([i for i in range(1, len(TERMS) - 1) if i not in (*WALKS, *TRAFFIC)])
TERM_UNITS = {
    "step_overhead": "s per step", "gemm": "1 / efficiency (of peak FLOP/s, or of bandwidth / gemm_balance)",
    "activation_traffic": "1 / bandwidth efficiency", "prefill_attention": "1 / FLOP/s efficiency",
    "decode_kv_read": "1 / bandwidth efficiency", "prefill_kv_read": "1 / bandwidth efficiency",
    "layer_launch": "s per kernel launch of a layer", "layer_seq": "s per layer per sequence",
    "lm_head": "1 / efficiency (as gemm)", "logits": "1 / bandwidth efficiency",
    "mixed_decode_attention": "1 / FLOP/s efficiency of a decode's (query, key) pairs in a prefill kernel",
    "mixed_decode_waves": "s per key walked by one (decode, query head) CTA of a mixed step, per wave over the SMs",
    "host_launch": "s per kernel launch on the host (eager; 0 under CUDA graphs)"}


def tied_coefficient(term: str, value_of) -> float:
    """A tied term's coefficient: its source's (TIED_TERMS), or 0 where its gate (GATED_BY) is 0;
    ``value_of(name)`` reads a fitted term's coefficient."""
    gate = GATED_BY.get(term)
    return float(value_of(TIED_TERMS[term])) if gate is None or value_of(gate) > 0 else 0.0


def coefficient_vector(coefficients: dict) -> np.ndarray:
    """The TERMS coefficients of a {FITTED_TERMS: value} dict, each tied term as tied_coefficient has it."""
    return np.array([tied_coefficient(t, coefficients.__getitem__) if t in TIED_TERMS else float(coefficients[t])
                     for t in TERMS])


def device_time_of(coef: np.ndarray, features: np.ndarray):
    """The device's work: the linear terms, plus the longer of the decodes' walks and KV traffic."""
    return coef[LINEAR_DEVICE] @ features[LINEAR_DEVICE] + np.maximum(coef[WALKS] @ features[WALKS],
                                                                      coef[TRAFFIC] @ features[TRAFFIC])


def step_time_of(coef: np.ndarray, features: np.ndarray):
    """The physics rule: overhead + the longer of the host's launches and the device's work; of one
    step's features, or of columns (features of many steps, one per column)."""
    return coef[0] * features[0] + np.maximum(coef[-1] * features[-1], device_time_of(coef, features))


@dataclass(frozen=True)
class PhysicsCostModel(PricedByCounts):
    """time = coefficients . features(step) + all-reduces; see the module docstring."""
    model: ModelSpec
    hardware: HardwareSpec
    coefficients: dict[str, float]
    gemm_balance: float
    tensor_parallel_size: int = 1
    fitted_range: FittedRange | None = None
    name: str = "physics"
    launches: tuple[int, int, int] = HARNESS_LAUNCHES   # the engine's kernels (launches_per_layer)
    gemm_tile_tokens: int = 1
    decode_skew: float = 0.0   # alpha of unequal decode contexts, as measured (cost_models/decode_skew.py)
    attention_query_tile: int = 1   # query rows a tile of the engine's prefill attention (work_counts_at_tile)
    _work: PhysicsWork = field(init=False, repr=False, compare=False)
    _coef: np.ndarray = field(init=False, repr=False, compare=False)
    _allreduce: tuple = field(init=False, repr=False, compare=False)
    _warned: list = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_tensor_parallel_size(self.model, self.tensor_parallel_size)
        for term in FITTED_TERMS:
            value = self.coefficients.get(term)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value < 0:
                raise ValueError(f"coefficients.{term}: {value!r} is not a non-negative number")
        for term, source in TIED_TERMS.items():
            if self.coefficients.get(term, self.coefficients[source]) != self.coefficients[source]:
                raise ValueError(f"coefficients.{term}: {self.coefficients[term]!r}; it is priced at "
                                 f"{source}'s coefficient ({self.coefficients[source]!r}), give none")
        if isinstance(self.gemm_balance, bool) or not isinstance(self.gemm_balance, (int, float)) \
                or not self.gemm_balance > 0:
            raise ValueError(f"gemm_balance: {self.gemm_balance!r} is not a positive number")
        if isinstance(self.decode_skew, bool) or not isinstance(self.decode_skew, (int, float)) \
                or not 0 <= self.decode_skew <= 1:
            raise ValueError(f"decode_skew: {self.decode_skew!r} is not a number from 0 to 1")
        if isinstance(self.attention_query_tile, bool) or not isinstance(self.attention_query_tile, int) \
                or self.attention_query_tile < 1:
            raise ValueError(f"attention_query_tile: {self.attention_query_tile!r} is not a whole number of rows >= 1")
        if self.coefficients["mixed_decode_waves"] > 0:
            for field_name, value in (("sm_count", self.hardware.sm_count), ("l2_mib", self.hardware.l2_bytes)):
                if value is None:
                    raise ValueError(f"hardware.{field_name}: unknown for {self.hardware.name!r}; the physics "
                                     f"terms mixed_decode_waves and mixed_decode_rereads need it (give "
                                     f"{field_name} in an inline spec)")
        object.__setattr__(self, "_work", physics_work(self.model, self.hardware, self.tensor_parallel_size,
                                                        self.launches, self.gemm_tile_tokens))
        object.__setattr__(self, "_coef", coefficient_vector(self.coefficients))
        object.__setattr__(self, "_allreduce", (allreduces_per_step(self.model.num_layers, self.tensor_parallel_size),
                                                self.model.hidden_size * self.model.dtype_bytes))
        object.__setattr__(self, "_warned", [self.fitted_range is None])

    @property
    def step_overhead_s(self) -> float:
        """The per-step CPU time (what every pipeline stage pays: cost_models/pipeline.py)."""
        return self.coefficients["step_overhead"]

    def _step_counts(self, shape: BatchShape) -> tuple:
        return work_counts_at_tile(shape, self.attention_query_tile)

    def _time_s(self, counts: tuple) -> float:
        time_s = float(step_time_of(self._coef, self._work.features(counts, self.gemm_balance)))
        return time_s + self._allreduce_s(counts[0]) if counts[-1] else time_s

    def _allreduce_s(self, tokens: int) -> float:
        """The step's all-reduces over the GPU's link (cost_models/interconnect.py)."""
        count, bytes_per_token = self._allreduce
        return count * ring_allreduce_s(bytes_per_token * tokens, self.tensor_parallel_size,
                                        self.hardware) if count else 0.0
