"""From a validated scenario to prepared runs: everything impossible is caught before any run
starts (catalogs, KV capacity, memory, requests that cannot run alone)."""
from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Sequence

import numpy as np

from cost_models.base import StepCostModel
from cost_models.factory import make_cost_model
from cost_models.hardware import HardwareSpec, load_hardware
from cost_models.hybrid_layout import hybrid_layout
from cost_models.memory import check_tensor_parallel_size, num_gpu_blocks
from cost_models.model_spec import ModelSpec, load_model
from cost_models.speculative import speculative_step_cost
from simulator.core.request import Request
from simulator.policies.base import Scheduler, SchedulerContext
from simulator.policies.defaults import default_max_num_batched_tokens, default_max_num_seqs
from simulator.policies.registry import get_preset
from simulator.results.footprint import (MemoryLimit, check_blocks_fit_memory, check_requests_fit_memory,
                                         check_run_fits_memory)
from simulator.runner.prepared import (Prepared, PreparedPool, PreparedRun, counted_kv_cache,
                                       replica_pools)
from simulator.scenario import Scenario, ScenarioError
from simulator.workload.generate import expected_num_requests, generate_workload


def prepare(scenario: Scenario, schedulers: Sequence[str] = (),
            max_memory_gb: float | None = None) -> Prepared:
    """Resolve catalogs, KV capacity and the workload; raise ScenarioError for impossible setups.

    ``schedulers``: the labels to prepare (default: every scheduler of the file), in file order.
    ``max_memory_gb``: the memory a run may take (default: what this machine has available).
    """
    options = select_schedulers(scenario, schedulers)
    limit = MemoryLimit.of(max_memory_gb)
    try:
        model, hardware = _model(scenario), load_hardware(scenario.hardware)
        tp = scenario.engine.tensor_parallel_size
        check_tensor_parallel_size(model, tp)
        cost_options = {k: v for k, v in scenario.cost_model.items() if k != "kind"}
        cost = make_cost_model(scenario.cost_model.get("kind", ""), cost_options, model, hardware, tp)
        cost = _with_proposer(cost, scenario, model, hardware)
        runs = [_prepare_run(scenario, model, hardware, o) for o in options]
        _check_pipeline(scenario, runs)
        if scenario.disaggregation is not None:
            runs = [_with_pools(scenario, model, hardware, run) for run in runs]
        for run in runs:
            pool = run.scheduler_cls.kv_cache_class(run.options)
            for blocks, replicas, _ in replica_pools(scenario, run, cost):
                check_blocks_fit_memory(blocks, pool.TABLE_BYTES_PER_BLOCK, run.label, replicas, limit)
        check_requests_fit_memory(*_requests_asked(scenario.workload), limit)
        rng = np.random.default_rng(scenario.seed)   # the run's one generator
        trace = generate_workload(scenario.workload, rng, model.max_model_len)
        check_run_fits_memory(len(trace), trace.max_output_tokens,
                              scenario.metrics.record_itl_gaps, limit)
        rng_state = rng.bit_generator.state if scenario.engine.speculative is not None else None
        prepared = Prepared(scenario, model, hardware, cost, trace, runs, rng_state)
        for run in runs:
            for pool in run.pools or (None,):
                check_requests_fit(prepared, run, pool)
    except ScenarioError:
        raise
    except ValueError as exc:
        raise ScenarioError(str(exc).split("\n")[0]) from None
    return prepared


def _with_proposer(cost: StepCostModel, scenario: Scenario, model: ModelSpec,
                   hardware: HardwareSpec) -> StepCostModel:
    """The target's cost plus engine.speculative's proposer (rule S7), if any."""
    spec = scenario.engine.speculative
    if spec is None:
        return cost
    try:
        return speculative_step_cost(cost, spec.method, spec.num_speculative_tokens,
                                     spec.proposer_cpu_s, spec.draft_model, model, hardware,
                                     scenario.engine.tensor_parallel_size, scenario.cost_model)
    except (ValueError, OSError) as exc:
        raise ScenarioError(f"engine.speculative.draft_model: {spec.draft_model!r}: "
                            f"{str(exc).splitlines()[0]}") from None


def _requests_asked(spec) -> tuple[float | None, str | None]:
    """How many requests the workload asks for before any is drawn, and by which field."""
    expected = expected_num_requests(spec)
    if spec.num_requests is None and expected is not None:
        return expected, (f"workload.duration_s: {spec.duration_s:g} at rate {spec.arrival.rate:g} "
                          f"(~{expected:.3g} requests)")
    return expected, None


def select_schedulers(scenario: Scenario, labels: Sequence[str] = ()) -> list:
    """The options of the schedulers named by ``labels`` (all when empty), in file order; an
    unknown label is a one-line user error listing the file's labels."""
    options = scenario.scheduler_options()
    known = [o.label for o in options]
    for label in labels:
        if label not in known:
            raise ScenarioError(f"--scheduler: {label!r} is not a scheduler of {scenario.name}; "
                                f"one of {', '.join(known)}")
    return [o for o in options if o.label in labels] if labels else options


def _model(scenario: Scenario) -> ModelSpec:
    engine = scenario.engine
    model = load_model(scenario.model).with_precision(engine.dtype, engine.quantization,
                                                      engine.kv_cache_dtype)
    if engine.enable_expert_parallel and engine.num_replicas > 1:
        raise ScenarioError(f"engine.enable_expert_parallel: true with engine.num_replicas {engine.num_replicas}: "
                            f"vLLM spreads the experts over every data-parallel rank, which independent "
                            f"replicas do not model; allowed with engine.num_replicas 1")
    try:
        model = model.with_expert_parallel(engine.enable_expert_parallel)
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None
    if model.is_moe and engine.num_replicas > 1:   # docs/expert-parallel-semantics.md, E2
        warnings.warn(f"engine.num_replicas: {engine.num_replicas} replicas of MoE model {model.name} are priced "
                      f"as independent engines; vLLM's data-parallel ranks share the MoE layers and step "
                      f"together, which is not modelled", RuntimeWarning, stacklevel=2)
    wanted = scenario.engine.max_model_len
    if wanted is None:
        return model
    if wanted > model.max_model_len:
        raise ScenarioError(f"engine.max_model_len: {wanted} exceeds {model.name}'s context length "
                            f"({model.max_model_len})")
    return model.with_max_model_len(wanted)


def _prepare_run(scenario: Scenario, model: ModelSpec, hardware: HardwareSpec, options) -> PreparedRun:
    cls, probe, context, layout = _probe(scenario, model, hardware, options)
    engine = scenario.engine
    blocks = _pool_blocks(scenario, model, hardware, probe, engine.tensor_parallel_size,
                          engine.num_gpu_blocks, engine.pipeline_parallel_size)
    return PreparedRun(options.label, probe.options, cls, blocks, context, layout)


def _probe(scenario: Scenario, model: ModelSpec, hardware: HardwareSpec, options):
    """The scheduler class, an instance on a toy pool (defaults resolved, config checked), and
    its context."""
    engine = scenario.engine
    layout = hybrid_layout(model, engine.tensor_parallel_size, engine.block_size)
    context = SchedulerContext(
        max_model_len=model.max_model_len,
        block_size=layout.block_size if layout else engine.block_size,
        speculative=engine.speculative,
        default_max_num_seqs=default_max_num_seqs(hardware),
        default_max_num_batched_tokens=default_max_num_batched_tokens(hardware, engine.entrypoint))
    cls = get_preset(options.preset).cls.resolve_class(options)
    if layout is not None:
        if engine.speculative is not None:
            raise ScenarioError(f"engine.speculative: not modelled with hybrid model {model.name} "
                                f"(the drafts' state blocks are not written down); remove one of them")
        options = _hybrid_options(cls, options, model)
    probe = cls(options, counted_kv_cache(2, context.block_size, layout), context)  # checks config
    return cls, probe, context, layout


def _pool_blocks(scenario: Scenario, model: ModelSpec, hardware: HardwareSpec, probe: Scheduler,
                 tensor_parallel_size: int, given_blocks: int | None, pipeline_parallel_size: int = 1) -> int:
    """KV blocks of one replica: ``given_blocks``, else what the GPU's memory holds (the fewest
    of any pipeline stage's GPU)."""
    engine = scenario.engine
    try:
        memory_blocks = num_gpu_blocks(
            model, hardware, tensor_parallel_size, engine.gpu_memory_utilization,
            engine.block_size, probe.options.max_num_batched_tokens, probe.options.max_num_seqs,
            pipeline_parallel_size)
    except ValueError:
        if given_blocks is None:
            raise
        memory_blocks = None   # given blocks on hardware that cannot hold the model: a what-if
    if memory_blocks is not None:
        probe.check_pool_holds_max_model_len(
            memory_blocks, f"{engine.gpu_memory_utilization:g} of {hardware.name}'s memory holds")
    return given_blocks or memory_blocks


def _check_pipeline(scenario: Scenario, runs: list[PreparedRun]) -> None:
    """Pipeline parallelism where its rules are written down: vLLM V1's batch queue (rule P3),
    one engine's stages on one kind of GPU, no drafts in flight."""
    engine = scenario.engine
    pp = engine.pipeline_parallel_size
    if pp == 1:
        return
    for what, present in (("disaggregation", scenario.disaggregation is not None),
                          ("engine.speculative", engine.speculative is not None)):
        if present:
            raise ScenarioError(f"engine.pipeline_parallel_size: {pp} is not modelled with {what} "
                                f"(docs/pipeline-parallel-semantics.md); allowed: 1, or remove {what}")
    for run in runs:
        if not run.scheduler_cls.supports_pipeline_parallel:
            raise ScenarioError(f"engine.pipeline_parallel_size: {pp} is modelled for vllm_v1's batch "
                                f"queue only; scheduler {run.label} ({run.options.preset}) allows 1")
        if getattr(run.options, "async_scheduling", None):
            raise ScenarioError(f"schedulers.{run.label}.async_scheduling: true is not modelled with "
                                f"engine.pipeline_parallel_size {pp} (vLLM's V1 model runner turns it "
                                f"off there); allowed: false or unset")


def _with_pools(scenario: Scenario, model: ModelSpec, hardware: HardwareSpec,
                run: PreparedRun) -> PreparedRun:
    """A disaggregated run's pools (scenario/pools.py): each its GPU, TP, blocks and cost model."""
    engine, pd = scenario.engine, scenario.disaggregation
    for name in ("num_replicas", "num_gpu_blocks", "tensor_parallel_size"):
        if getattr(engine, name) != getattr(type(engine)(), name):
            raise ScenarioError(f"engine.{name}: {getattr(engine, name)!r} is not allowed with "
                                f"disaggregation; set disaggregation.prefill.{name} and "
                                f"disaggregation.decode.{name} instead")
    if model.state_layers is not None:
        raise ScenarioError(f"model: {model.name} is a hybrid model; its state pool is not modelled "
                            f"with disaggregation (rules H1-H8 and D1-D5 are not written together)")
    if engine.speculative is not None:
        raise ScenarioError("engine.speculative: not modelled with disaggregation (the decode "
                            "pool's drafts after a pull are not written down); remove one of them")
    if not run.scheduler_cls.supports_remote_kv:
        raise ScenarioError(f"disaggregation: {run.label} ({run.options.preset}) cannot pull KV "
                            f"from a prefill pool; allowed presets: vllm_v1")
    _, probe, _, _ = _probe(scenario, model, hardware, run.options)
    pools = []
    for name in ("prefill", "decode"):
        pool = getattr(pd, name)
        gpu = load_hardware(pool.hardware) if pool.hardware is not None else hardware
        check_tensor_parallel_size(model, pool.tensor_parallel_size)
        blocks = _pool_blocks(scenario, model, gpu, probe, pool.tensor_parallel_size, pool.num_gpu_blocks)
        cost_options = {k: v for k, v in scenario.cost_model.items() if k != "kind"}
        cost = make_cost_model(scenario.cost_model.get("kind", ""), cost_options, model, gpu,
                               pool.tensor_parallel_size)
        pools.append(PreparedPool(name, pool.num_replicas, gpu, pool.tensor_parallel_size, blocks, cost))
    return PreparedRun(run.label, run.options, run.scheduler_cls, pools[1].num_gpu_blocks,
                       run.context, pools=tuple(pools))


def _hybrid_options(cls: type[Scheduler], options, model: ModelSpec):
    """A hybrid model runs only where its state pool is modelled, and vLLM turns prefix caching
    off for it (rule H6: no mamba_cache_mode 'align' here)."""
    if not cls.supports_state_pool:
        raise ScenarioError(
            f"schedulers.{options.label}.preset: {options.preset!r} does not model the state pool "
            f"of hybrid model {model.name} ({model.state_layers.num_layers} "
            f"{model.state_layers.kind} layers); allowed: vllm_v1, vllm_v1_spf")
    if getattr(options, "enable_prefix_caching", False):
        options = replace(options, enable_prefix_caching=False)
    return options


def check_requests_fit(prepared: Prepared, run: PreparedRun, pool: PreparedPool | None = None) -> None:
    """A prompt longer than the context, or a request the KV cache cannot hold alone, is an error
    before the run, not a hang during it. ``pool``: of a disaggregated run, whose prefill pool
    holds a prompt and its first token only (rule D1)."""
    trace = prepared.trace
    if len(trace) == 0:
        raise ScenarioError("workload: generates no request (raise num_requests or duration_s)")
    blocks = run.num_gpu_blocks if pool is None else pool.num_gpu_blocks
    scheduler = run.scheduler_cls(run.options, run.counted_kv_cache(blocks), run.context)
    limit = scheduler.max_request_tokens()
    longest = int(np.argmax(trace.num_prompt_tokens))
    if trace.num_prompt_tokens[longest] > limit:
        raise ScenarioError(
            f"workload: request {longest} has a {int(trace.num_prompt_tokens[longest])}-token prompt, "
            f"longer than {run.label} allows ({limit} tokens: max_model_len "
            f"{run.context.max_model_len}{_budget_note(scheduler)})")
    prefill_only = pool is not None and pool.name == "prefill"
    outputs = np.ones_like(trace.max_output_tokens) if prefill_only else trace.max_output_tokens
    worst = int(np.argmax(trace.num_prompt_tokens + outputs))  # the first longest
    probe = Request(worst, 0.0, int(trace.num_prompt_tokens[worst]), int(outputs[worst]))
    need = scheduler.blocks_to_finish(probe)
    if need > scheduler.kv.num_total_blocks:
        raise ScenarioError(
            f"{'engine' if pool is None else 'disaggregation.' + pool.name}: the KV cache "
            f"({scheduler.kv.num_total_blocks} usable blocks of "
            f"{scheduler.kv.block_size} tokens) is too small for request {worst} alone, which needs "
            f"{need} blocks under {run.label}{_watermark_note(scheduler)}; raise num_gpu_blocks or "
            f"gpu_memory_utilization, or "
            f"shorten requests / max_model_len")


def _watermark_note(scheduler: Scheduler) -> str:
    headroom = scheduler.admission_headroom_blocks()
    return f" (including a watermark of {headroom} blocks kept free at admission)" if headroom else ""


def _budget_note(scheduler: Scheduler) -> str:
    if scheduler.max_request_tokens() < scheduler.max_model_len - 1:
        return f", max_num_batched_tokens {scheduler.options.max_num_batched_tokens} with chunking off"
    return " - 1"
