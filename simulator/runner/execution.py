"""Simulating a prepared run: its requests made as the arrivals reach them, its replicas and
pools built, and the summary of what came out."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator

import numpy as np

from cost_models.pipeline import pipeline_stages
from simulator.core.request import Request
from simulator.engine.disaggregation import KVLink, PoolPlan
from simulator.engine.routing import replica_summaries, router_for
from simulator.engine.replica import SimulationResult
from simulator.engine.simulation import Simulation
from simulator.policies.base import SchedulerContext
from simulator.policies.speculative import SpecDecodingStats
from simulator.results.by_turn import by_turn
from simulator.results.files import ResultFolder
from simulator.results.request_table import RequestTable
from simulator.results.steady_state import steady_state
from simulator.results.step_table import StepTable
from simulator.results.summary import summarize
from simulator.runner.prepared import Prepared, PreparedRun, replica_pools
from simulator.workload.traces import WorkloadTrace


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


def _pool_plan(prepared: Prepared, run: PreparedRun) -> PoolPlan | None:
    """The engine's view of a disaggregated run: pool sizes, the KV link and bytes per token read
    by each decode rank (its share of the KV heads)."""
    if not run.pools:
        return None
    prefill, decode = run.pools
    transfer = prepared.scenario.disaggregation.kv_transfer
    bandwidth_Bps = (transfer.bandwidth_GBps * 1e9 if transfer.bandwidth_GBps is not None
                     else prefill.hardware.interconnect_bandwidth_Bps / 2)
    return PoolPlan(prefill.num_replicas, decode.num_replicas,
                    KVLink(bandwidth_Bps, transfer.latency_us * 1e-6),
                    prepared.model.kv_bytes_per_token(decode.tensor_parallel_size))


def replica_stages(prepared: Prepared, cost_models: list) -> list:
    """Each replica's pipeline stages (cost_models/pipeline.py) on its cost model."""
    pp = prepared.scenario.engine.pipeline_parallel_size
    return [pipeline_stages(cost, prepared.model, prepared.hardware, pp) for cost in cost_models]


def _run_context(prepared: Prepared, run: PreparedRun) -> SchedulerContext:
    """The run's scheduler context: with speculation, a generator continuing the run's one
    stream after the workload, the same for every scheduler of the scenario (one per run, its
    replicas sharing it in step order)."""
    if prepared.acceptance_rng_state is None:
        return run.context
    rng = np.random.default_rng(0)   # any seed: the state is replaced
    rng.bit_generator.state = prepared.acceptance_rng_state
    return replace(run.context, acceptance_rng=rng)


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
    context = _run_context(prepared, run)
    pools = replica_pools(scenario, run, prepared.cost_model)
    schedulers = [run.scheduler_cls(run.options, run.make_kv_cache(blocks), context)
                  for blocks, replicas, _ in pools for _ in range(replicas)]
    cost_models = [cost for _, replicas, cost in pools for _ in range(replicas)]
    stages = replica_stages(prepared, cost_models)
    requests = RequestTable(len(trace), keep_gaps=scenario.metrics.record_itl_gaps,
                            sink=files.requests if files is not None else None)
    steps = StepTable(sink=files.steps if files is not None else None,
                      state_slots=run.layout is not None, replica_column=len(schedulers) > 1)
    sim = Simulation(iter_requests(trace, scenario.metrics.record_itl_gaps), schedulers,
                     prepared.cost_model, steps, num_requests=len(trace),
                     max_concurrency=trace.max_concurrency, router=router_for(scenario.engine),
                     on_finished=progress.wrap(requests.record) if progress else requests.record,
                     fast_path=fast_path, sessions=trace.sessions,
                     pools=_pool_plan(prepared, run), cost_models=cost_models, stages=stages)
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
    if context.speculative is not None:
        stats = SpecDecodingStats(context.speculative.num_speculative_tokens)
        for scheduler in schedulers:
            stats.add(scheduler.spec.stats)
        summary.update(stats.summary())
    if len(schedulers) > 1:
        summary["replicas"] = replica_summaries(result.replicas, sim.num_routed)
    summary.update(steady_state(requests.columns["arrival_s"], requests.columns["scheduled_s"],
                                requests.columns["finish_s"]).fields())
    if trace.sessions is not None:
        summary["turns"] = by_turn(trace.sessions.turn, requests.columns)
    if run.pools:
        summary["pools"] = {p.name: {"num_replicas": p.num_replicas, "hardware": p.hardware.name,
                                     "tensor_parallel_size": p.tensor_parallel_size,
                                     "num_gpu_blocks": p.num_gpu_blocks} for p in run.pools}
        summary.update(sim.transfers.figures())
    summary.update(scheduler=run.label, preset=run.options.preset, num_gpu_blocks=run.num_gpu_blocks,
                   max_num_seqs=run.options.max_num_seqs,
                   max_num_batched_tokens=run.options.max_num_batched_tokens,
                   model=prepared.model.name, hardware=prepared.hardware.name, seed=scenario.seed)
    if run.layout is not None:   # what vLLM logs at start-up for a hybrid model (rules H2, H3)
        layout = run.layout
        summary.update(block_size=layout.block_size, kv_cache_groups={
            "attention": layout.num_attention_groups, "state": layout.num_state_groups,
            "layers_per_group": layout.group_size})
    return RunOutput(run.label, result, summary, run.num_gpu_blocks, requests, steps)
