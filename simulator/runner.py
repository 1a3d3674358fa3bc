"""From a validated scenario to results: everything impossible is caught before any run starts."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from cost_models.base import StepCostModel
from cost_models.factory import make_cost_model
from cost_models.hardware import HardwareSpec, load_hardware
from cost_models.memory import check_tensor_parallel_size, num_gpu_blocks
from cost_models.model_spec import ModelSpec, load_model
from simulator.policies.defaults import default_max_num_batched_tokens, default_max_num_seqs
from simulator.engine.routing import replica_summaries, router_for
from simulator.engine.simulation import Simulation, SimulationResult
from simulator.kv.block_pool import KVCache
from simulator.results.by_turn import by_turn
from simulator.results.files import ResultFolder
from simulator.results.footprint import (MemoryLimit, check_blocks_fit_memory, check_requests_fit_memory,
                                         check_run_fits_memory)
from simulator.results.request_table import RequestTable
from simulator.results.steady_state import steady_state
from simulator.results.step_table import StepTable
from simulator.results.summary import summarize
from simulator.core.request import Request
from simulator.scenario import Scenario, ScenarioError
from simulator.policies.base import Scheduler, SchedulerContext
from simulator.policies.registry import get_preset
from simulator.workload.generate import expected_num_requests, generate_seeded_workload
from simulator.workload.traces import WorkloadTrace


@dataclass(eq=False)   # a run's records compare by identity: no generated __eq__ to compile
class PreparedRun:
    """One scheduler of a scenario, ready to simulate."""
    label: str
    options: object
    scheduler_cls: type[Scheduler]
    num_gpu_blocks: int
    context: SchedulerContext


@dataclass(eq=False, repr=False)   # likewise; its repr would print the whole workload
class Prepared:
    scenario: Scenario
    model: ModelSpec
    hardware: HardwareSpec
    cost_model: StepCostModel
    trace: WorkloadTrace
    runs: list[PreparedRun]


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
        runs = [_prepare_run(scenario, model, hardware, o) for o in options]
        for run in runs:
            pool = run.scheduler_cls.kv_cache_class(run.options)
            check_blocks_fit_memory(run.num_gpu_blocks, pool.TABLE_BYTES_PER_BLOCK, run.label,
                                    scenario.engine.num_replicas, limit)
        check_requests_fit_memory(*_requests_asked(scenario.workload), limit)
        trace = generate_seeded_workload(scenario.workload, scenario.seed)
        check_run_fits_memory(len(trace), trace.max_output_tokens,
                              scenario.metrics.record_itl_gaps, limit)
        prepared = Prepared(scenario, model, hardware, cost, trace, runs)
        for run in runs:
            check_requests_fit(prepared, run)
    except ScenarioError:
        raise
    except ValueError as exc:
        raise ScenarioError(str(exc).split("\n")[0]) from None
    return prepared


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
    wanted = scenario.engine.max_model_len
    if wanted is None:
        return model
    if wanted > model.max_model_len:
        raise ScenarioError(f"engine.max_model_len: {wanted} exceeds {model.name}'s context length "
                            f"({model.max_model_len})")
    return model.with_max_model_len(wanted)


def _prepare_run(scenario: Scenario, model: ModelSpec, hardware: HardwareSpec, options) -> PreparedRun:
    engine = scenario.engine
    context = SchedulerContext(
        max_model_len=model.max_model_len, block_size=engine.block_size,
        default_max_num_seqs=default_max_num_seqs(hardware),
        default_max_num_batched_tokens=default_max_num_batched_tokens(hardware, engine.entrypoint))
    cls = get_preset(options.preset).cls.resolve_class(options)
    probe = cls(options, KVCache(2, engine.block_size), context)  # resolves defaults, checks config
    try:
        memory_blocks = num_gpu_blocks(
            model, hardware, engine.tensor_parallel_size, engine.gpu_memory_utilization,
            engine.block_size, probe.options.max_num_batched_tokens, probe.options.max_num_seqs)
    except ValueError:
        if engine.num_gpu_blocks is None:
            raise
        memory_blocks = None   # given blocks on hardware that cannot hold the model: a what-if
    if memory_blocks is not None:
        probe.check_pool_holds_max_model_len(
            memory_blocks, f"{engine.gpu_memory_utilization:g} of {hardware.name}'s memory holds")
    blocks = engine.num_gpu_blocks or memory_blocks
    return PreparedRun(options.label, probe.options, cls, blocks, context)


def iter_requests(trace: WorkloadTrace, keep_itl_gaps: bool = False) -> Iterator[Request]:
    """The trace's requests in id order, made a chunk at a time as the arrival process reaches
    them, so that only the requests in flight are objects (``keep_itl_gaps``: each with an empty
    list for its gaps)."""
    ids, prio = trace.prompt_token_ids, trace.priority
    for start in range(0, len(trace), _REQUEST_CHUNK):
        stop = min(start + _REQUEST_CHUNK, len(trace))
        columns = (range(start, stop), trace.arrival_s[start:stop].tolist(),
                   trace.num_prompt_tokens[start:stop].tolist(), trace.max_output_tokens[start:stop].tolist())
        if ids is None and prio is None:
            requests = map(Request, *columns)
        else:
            requests = (Request(i, a, p, o, prompt_token_ids=ids[i] if ids is not None else None,
                                priority=int(prio[i]) if prio is not None else 0)
                        for i, a, p, o in zip(*columns))
        for request in requests:
            if keep_itl_gaps:
                request.itl_gaps_s = []
            yield request


_REQUEST_CHUNK = 65_536


def make_requests(trace: WorkloadTrace, keep_itl_gaps: bool = False) -> list[Request]:
    """All the trace's requests at once (tests and tools that read them afterwards)."""
    return list(iter_requests(trace, keep_itl_gaps))


def check_requests_fit(prepared: Prepared, run: PreparedRun) -> None:
    """A prompt longer than the context, or a request the KV cache cannot hold alone, is an error
    before the run, not a hang during it."""
    trace = prepared.trace
    if len(trace) == 0:
        raise ScenarioError("workload: generates no request (raise num_requests or duration_s)")
    scheduler = run.scheduler_cls(run.options, KVCache(run.num_gpu_blocks, prepared.scenario.engine.block_size),
                                  run.context)
    limit = scheduler.max_request_tokens()
    longest = int(np.argmax(trace.num_prompt_tokens))
    if trace.num_prompt_tokens[longest] > limit:
        raise ScenarioError(
            f"workload: request {longest} has a {int(trace.num_prompt_tokens[longest])}-token prompt, "
            f"longer than {run.label} allows ({limit} tokens: max_model_len "
            f"{run.context.max_model_len}{_budget_note(scheduler)})")
    worst = int(np.argmax(trace.num_prompt_tokens + trace.max_output_tokens))  # the first longest
    probe = Request(worst, 0.0, int(trace.num_prompt_tokens[worst]), int(trace.max_output_tokens[worst]))
    need = scheduler.blocks_to_finish(probe)
    if need > scheduler.kv.num_total_blocks:
        raise ScenarioError(
            f"engine: the KV cache ({scheduler.kv.num_total_blocks} usable blocks of "
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


@dataclass(eq=False, repr=False)
class RunOutput:
    label: str
    result: SimulationResult
    summary: dict
    num_gpu_blocks: int
    requests: RequestTable
    steps: StepTable


def simulate(prepared: Prepared, run: PreparedRun, fast_path: bool = True,
             files: ResultFolder | None = None, progress=None) -> RunOutput:
    """Run one scheduler. ``files``: a result folder the tables are written to as the run goes
    (the run then keeps only the step series the summary and plots read). ``progress``: a
    ProgressBar (engine/progress.py) told of finished requests; it only counts them."""
    scenario, trace = prepared.scenario, prepared.trace
    schedulers = [run.scheduler_cls(run.options, run.scheduler_cls.make_kv_cache(
        run.options, run.num_gpu_blocks, scenario.engine.block_size), run.context)
        for _ in range(scenario.engine.num_replicas)]
    requests = RequestTable(len(trace), keep_gaps=scenario.metrics.record_itl_gaps,
                            sink=files.requests if files is not None else None)
    steps = StepTable(sink=files.steps if files is not None else None)
    sim = Simulation(iter_requests(trace, scenario.metrics.record_itl_gaps), schedulers,
                     prepared.cost_model, steps, num_requests=len(trace),
                     max_concurrency=trace.max_concurrency, router=router_for(scenario.engine),
                     on_finished=progress.wrap(requests.record) if progress else requests.record,
                     fast_path=fast_path, sessions=trace.sessions)
    result = sim.run()
    requests.flush()
    steps.flush()
    goodput = scenario.metrics.goodput.as_dict() if scenario.metrics.goodput else None
    # vLLM's duration starts at the main run's start: t=0, even when request 0 waits its gap.
    summary = summarize(requests, duration_s=result.end_s,
                        percentiles=scenario.metrics.percentiles, goodput_slos_ms=goodput,
                        steps=steps, max_concurrency=trace.max_concurrency)
    kvs = [s.kv for s in schedulers]
    queries = sum(kv.num_queries_tokens for kv in kvs)
    hits = sum(kv.num_hit_tokens for kv in kvs)
    summary.update(prefix_cache_queries=queries, prefix_cache_hits=hits,
                   prefix_cache_hit_rate=hits / queries if queries else 0.0)
    if len(schedulers) > 1:
        summary["replicas"] = replica_summaries(result.replicas, sim.num_routed)
    summary.update(steady_state(requests.columns["arrival_s"], requests.columns["scheduled_s"],
                                requests.columns["finish_s"]).fields())
    if trace.sessions is not None:
        summary["turns"] = by_turn(trace.sessions.turn, requests.columns)
    summary.update(scheduler=run.label, preset=run.options.preset, num_gpu_blocks=run.num_gpu_blocks,
                   max_num_seqs=run.options.max_num_seqs,
                   max_num_batched_tokens=run.options.max_num_batched_tokens,
                   model=prepared.model.name, hardware=prepared.hardware.name, seed=scenario.seed)
    return RunOutput(run.label, result, summary, run.num_gpu_blocks, requests, steps)
