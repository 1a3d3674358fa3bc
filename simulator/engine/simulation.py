"""The event loop, on SimPy: one arrivals process and one serve loop per replica.

Only arrivals and step boundaries are events (never one per token). A step is four calls: the
serve loop asks its stepper for a batch, asks the cost model how long that forward pass takes,
sleeps that long, then lets the stepper account the step; the stepper is the policy itself, or
the decode cohort that drives it (simulator/fastpath/cohort.py), which may also carry out a run
of decode steps as one sleep.

Equal times: SimPy processes events due at the same time in the order they were scheduled. An
arrival's wake-up is scheduled when the previous arrival was processed, a step's end when the step
started: so an arrival exactly at a step's end is seen by the next step when it was scheduled
first, and a run of decode steps stops before any step that would start at or after the next
arrival, which leaves every such tie to SimPy as the steps one by one would.
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from itertools import chain
from typing import Callable, Iterable

import simpy

from cost_models.base import StepCostModel
from cost_models.pipeline import PipelineStages
from simulator.core.batch import Batch
from simulator.core.request import Request
from simulator.engine.clock import sleep_until
from simulator.engine.disaggregation import PREFILL, PoolPlan, Transfers
from simulator.engine.pipeline import Pipeline, max_concurrent_batches
from simulator.engine.progress import NoProgressError, ProgressWatchdog, diagnose_stall
from simulator.engine.replica import Replica, SimulationResult
from simulator.engine.routing import Router, make_router
from simulator.fastpath.cohort import DecodeCohort
from simulator.policies.base import Scheduler


class Simulation:
    """``requests``: in intended arrival order, made as the arrival process reaches them (an
    iterator of ``num_requests``; a list gives its own length). ``on_finished(requests)`` is
    told of every finished request once its fields no longer change; ``on_step(replica, batch,
    shape)`` of every step (per-request views, so no fast path then). ``sessions``: the trace's
    SessionColumns (simulator/workload/sessions.py): a later turn is sent its think time after
    the turn it follows has finished, not at its row's arrival time. ``pools``: a PoolPlan
    (engine/disaggregation.py) where ``schedulers`` are a prefill pool then a decode pool, and
    ``cost_models`` then one per scheduler. ``stages``: each replica's PipelineStages
    (cost_models/pipeline.py) under pipeline parallelism; default one stage, its cost model's step."""

    def __init__(self, requests: Iterable[Request], schedulers: list[Scheduler],
                 cost_model: StepCostModel, step_log, *, num_requests: int | None = None,
                 max_concurrency: int | None = None, router: str | Router = "round_robin",
                 on_step: Callable | None = None, on_finished: Callable | None = None,
                 fast_path: bool = True, sessions=None, pools: PoolPlan | None = None,
                 cost_models: list[StepCostModel] | None = None, stages: list[PipelineStages] | None = None):
        self.env = simpy.Environment()
        self.num_requests = len(requests) if num_requests is None else num_requests
        self.pending = iter(requests)
        first = next(self.pending, None)
        if first is not None:
            self.pending = chain((first,), self.pending)
        self.cost_model = cost_model
        self.step_log = step_log
        self.max_concurrency = max_concurrency
        self.router = make_router(router) if isinstance(router, str) else router
        self.on_step = on_step
        self.on_finished = on_finished
        costs = cost_models or [cost_model] * len(schedulers)
        stages = stages or [PipelineStages(c) for c in costs]
        self.replicas = [Replica(i, s, self._stepper(s, fast_path, c, p.num_stages), cost_model=c,
                                 pool=pools.pool_of(i) if pools else "", pipeline=Pipeline(p))
                         for i, (s, c, p) in enumerate(zip(schedulers, costs, stages))]
        # P/D: requests enter the prefill pool; the transfers hand them to the decode pool.
        self.transfers = Transfers(pools, self.replicas, self.router) if pools else None
        self._entry = self.replicas[:pools.num_prefill] if pools else self.replicas
        # Runs of decode steps need the next arrival known to one replica: a lone one.
        self.decode_runs = len(self.replicas) == 1
        self.num_in_flight = 0
        self.num_finished = 0
        self.slot_freed: simpy.Event | None = None
        self.last_finish_s = 0.0
        self.first_sent_s: float | None = None
        self._next_root_s = first.arrival_s if first is not None else math.inf
        self.num_routed = [0] * len(self.replicas)   # requests sent to each replica
        self.sessions = sessions
        self._follow_ups: dict[int, Request] = {}   # request id -> the turn sent after it
        self._releases: list[float] = []            # when the turns waiting on think time go

    @property
    def next_arrival_s(self) -> float:
        """When the next request reaches the engine, as far as is known now."""
        return min(self._next_root_s, self._releases[0]) if self._releases else self._next_root_s

    def _stepper(self, scheduler: Scheduler, fast_path: bool, cost_model: StepCostModel, num_stages: int):
        """The decode cohort where it may hold the policy's steady decoders (every step schedules
        each of them: one stage), else the policy."""
        if fast_path and self.on_step is None and scheduler.may_hold_decoders and num_stages == 1:
            return DecodeCohort(scheduler, cost_model)
        return scheduler

    # -- processes -------------------------------------------------------------------------------
    def arrivals(self):
        env = self.env
        parent = None if self.sessions is None else self.sessions.parent
        for request in self.pending:
            if parent is not None and parent[request.request_id] >= 0:
                self._follow_ups[int(parent[request.request_id])] = request   # sent later
                continue
            now_s = env.now
            if request.arrival_s > now_s:
                # Land on the arrival time itself: now + (arrival - now) can miss it by a unit in
                # the last place, which would shift the request's times and tie order with steps.
                self._next_root_s = request.arrival_s
                yield from sleep_until(self.env, request.arrival_s)
                now_s = env.now
            while self.max_concurrency is not None and self.num_in_flight >= self.max_concurrency:
                self._next_root_s = math.inf   # until a request finishes
                self.slot_freed = env.event()
                yield self.slot_freed  # vLLM bench: the semaphore is taken before `start`
                now_s = env.now
            self._send(request, now_s)
            self._next_root_s = now_s   # the next one is due now, until its delay is known
        self._next_root_s = math.inf

    def _send(self, request: Request, now_s: float) -> None:
        # The benchmark clock starts when the client sends (trap 15): record that time.
        request.client_queue_s = now_s - request.arrival_s
        request.arrival_s = now_s
        if self.first_sent_s is None:
            self.first_sent_s = now_s
        self.num_in_flight += 1
        if self.transfers is not None:
            copy = self.transfers.prefill_copy(request)
            replica = self.route(copy)
            self.transfers.sent(copy, replica, request)
            request = copy
        else:
            replica = self.route(request)
        replica.scheduler.add(request)
        replica.notify()

    def _send_next_turn(self, request: Request, at_s: float):
        """A session's next turn, sent its think time after the last one finished."""
        yield from sleep_until(self.env, at_s)
        heapq.heappop(self._releases)
        request.arrival_s = self.env.now
        self._send(request, self.env.now)

    def route(self, request: Request, pool: list[Replica] | None = None,
              router: Router | None = None) -> Replica:
        """The replica the router picks (engine/routing.py) in the entry pool (every replica,
        or P/D's prefill pool) or ``pool``; a lone one needs no asking."""
        pool = self._entry if pool is None else pool
        index = (router or self.router).pick(request, pool) if len(pool) > 1 else 0
        replica = pool[index]
        self.num_routed[replica.index] += 1
        return replica

    def _prefilled(self, finished: list[Request]) -> None:
        """P/D: prefill copies done; each request goes on to a decode replica (rule D1)."""
        for copy in finished:
            request = self.transfers.hand_over(copy)
            replica = self.route(request, self.transfers.decode_pool, self.transfers.decode_router)
            replica.scheduler.add(request)
            replica.notify()

    def _start_pulls(self, replica: Replica) -> None:
        """P/D: the pulls the decode replica's schedule started (rule D2)."""
        for request in replica.scheduler.kv_pulls:
            self.env.process(self.transfers.pull(self.env, replica, request))
        replica.scheduler.kv_pulls.clear()

    def serve(self, replica: Replica):
        env, scheduler, stepper, pipeline = self.env, replica.scheduler, replica.stepper, replica.pipeline
        watchdog = ProgressWatchdog()
        # Batches formed while earlier ones run: async scheduling's next step, or one per stage.
        depth = max_concurrent_batches(pipeline.num_stages, scheduler.async_scheduling)
        in_flight: deque[tuple[Batch, float]] = deque()
        carried_preemptions = 0
        runs = self.decode_runs and depth == 1 and isinstance(stepper, DecodeCohort)
        while True:
            start_s = env.now
            while len(in_flight) < depth:
                batch = stepper.schedule(start_s)
                if scheduler.kv_pulls:
                    self._start_pulls(replica)
                if batch:
                    batch.num_preempted += carried_preemptions
                    carried_preemptions = 0
                    in_flight.append((batch, start_s))
                elif batch.num_preempted:
                    # Preemption emptied the batch (e.g. the only candidate preempted itself):
                    # vLLM schedules again at once; the state changed, so this is progress. The
                    # count goes into the next logged step so steps.csv adds up.
                    watchdog.observe(0, batch.num_preempted, scheduler)
                    carried_preemptions += batch.num_preempted
                else:
                    break   # only this schedule's own preemptions count as progress
            if not in_flight:
                yield from self._idle(replica)
                continue
            batch, scheduled_s = in_flight.popleft()
            shape = batch.shape()
            step_start_s, end_s = pipeline.pass_through(scheduled_s, shape)
            yield from sleep_until(env, end_s)
            finished = stepper.update_from_output(batch, end_s)
            tokens, _, num_decodes, _, _, num_prefills, num_sampled, num_seqs = shape.work_counts
            self.step_log.append(step_start_s, end_s, num_seqs, num_prefills, num_decodes, tokens,
                                 tokens - num_decodes, scheduler.num_running, len(scheduler.waiting),
                                 scheduler.kv.usage, batch.num_preempted,
                                 scheduler.kv.num_state_slots_used, replica.index)
            num_kept = num_sampled - batch.num_discarded
            if not num_kept or watchdog.steps_without_token:   # else observe() changes nothing
                watchdog.observe(num_kept, batch.num_preempted, scheduler)
            if finished:
                if replica.pool == PREFILL:
                    self._prefilled(finished)
                else:
                    self._on_finished(finished, end_s)
            if self.on_step is not None:
                self.on_step(replica, batch, shape)
            if runs and self.next_arrival_s > end_s and stepper.can_run():
                yield from self._decode_run(scheduler, stepper, watchdog, end_s)

    def _decode_run(self, scheduler: Scheduler, cohort: DecodeCohort, watchdog: ProgressWatchdog,
                    start_s: float):
        """The cohort's coming decode steps carried out in one pass, then slept through; what
        others may see (finishes told to the engine, the step log) waits for the clock. Nothing
        reads the cohort meanwhile: the arrival process only queues requests."""
        # Past a finish only if it cannot let anyone in and no closed-loop client (or session's
        # next turn) waits to send.
        through = (scheduler.decode_runs_through_finishes and not scheduler.finish_can_admit()
                   and self.max_concurrency is None and self.sessions is None)
        waiting_before, running_before = len(scheduler.waiting), scheduler.num_running
        finishes: list[tuple[list, float]] = []
        done = cohort.decode_run(start_s, self.next_arrival_s, through,
                                 lambda finished, end_s: finishes.append((finished, end_s)))
        if done is None:
            return
        ends, usage, num_running = done
        yield from sleep_until(self.env, ends[-1])
        for finished, end_s in finishes:
            self._on_finished(finished, end_s)
        # Arrivals can only land during the run's last step (it stops before a step that starts
        # at or after one), so earlier rows saw the queue as it was.
        num_waiting = [waiting_before] * (len(ends) - 1) + [len(scheduler.waiting)]
        num_rows = [running_before, *num_running[:-1]]
        # Only cohort members run, each holding its blocks and so its state (hybrid rule H4).
        self.step_log.extend_decode_steps(start_s, ends, num_rows, num_running, num_waiting, usage,
                                          num_running)
        if watchdog.steps_without_token:   # every step of a run samples: else nothing to reset
            watchdog.observe(num_rows[-1], 0, scheduler)

    def _idle(self, replica: Replica):
        scheduler = replica.scheduler
        wake_s = scheduler.next_wakeup_s(self.env.now)
        if not replica.num_transfers and (scheduler.num_running or (scheduler.waiting and wake_s is None)):
            raise NoProgressError(diagnose_stall(scheduler, self.env.now))
        replica.wakeup = self.env.event()
        events = [replica.wakeup]
        if wake_s is not None:
            events.append(self.env.timeout(max(0.0, wake_s - self.env.now)))
        yield self.env.any_of(events)
        replica.wakeup = None

    def _on_finished(self, finished: list[Request], now_s: float) -> None:
        self.num_finished += len(finished)
        self.num_in_flight -= len(finished)
        self.last_finish_s = now_s
        if self.on_finished is not None:
            self.on_finished(finished)
        if self._follow_ups:
            for request in finished:
                follow = self._follow_ups.pop(request.request_id, None)
                if follow is not None:
                    at_s = now_s + float(self.sessions.think_s[follow.request_id])
                    heapq.heappush(self._releases, at_s)
                    self.env.process(self._send_next_turn(follow, at_s))
        if self.slot_freed is not None and not self.slot_freed.triggered:
            self.slot_freed.succeed()
            self._next_root_s = now_s  # the blocked client sends now

    # -- driver ----------------------------------------------------------------------------------
    def run(self) -> SimulationResult:
        env = self.env
        processes = [env.process(self.arrivals())]
        processes += [env.process(self.serve(replica)) for replica in self.replicas]
        total = self.num_requests
        while self.num_finished < total:
            if not env._queue:
                # Nothing left to happen yet requests remain: a bug, not a hang.
                raise NoProgressError(f"simulation stopped with {total - self.num_finished} "
                                      f"unfinished requests and no pending event")
            env.step()
        for process in processes:
            # A process that raised after the last finish (e.g. logging that step): SimPy would
            # raise it at its next step, which the loop above no longer takes.
            if process.triggered and not process.ok:
                process.defused = True
                raise process.value
        start_s = self.first_sent_s if self.first_sent_s is not None else 0.0
        return SimulationResult(self.step_log, self.replicas, start_s,
                                self.last_finish_s,
                                sum(r.scheduler.num_preemptions for r in self.replicas))

