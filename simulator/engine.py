"""The SimPy event loop: one arrivals process and one serve loop per replica.

Only arrivals and step boundaries are events (never one per token). A serve loop asks its
scheduler for a batch, asks the cost model how long that forward pass takes, sleeps that long,
then lets the scheduler account the step.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import simpy

from cost_models.base import StepCostModel
from simulator.progress import NoProgressError, ProgressWatchdog, diagnose_stall
from simulator.request import Request
from simulator.schedulers.base import Scheduler


@dataclass
class Replica:
    index: int
    scheduler: Scheduler
    wakeup: simpy.Event | None = None   # set while the replica idles, fired by an arrival

    def notify(self) -> None:
        if self.wakeup is not None and not self.wakeup.triggered:
            self.wakeup.succeed()


@dataclass
class SimulationResult:
    requests: list[Request]
    step_log: object
    replicas: list[Replica]
    start_s: float
    end_s: float
    num_preemptions: int = 0
    extras: dict = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


class Simulation:
    def __init__(self, requests: list[Request], schedulers: list[Scheduler],
                 cost_model: StepCostModel, step_log, *, max_concurrency: int | None = None,
                 router: str = "round_robin", on_step: Callable | None = None):
        self.env = simpy.Environment()
        self.pending = requests  # sorted by intended arrival time
        self.replicas = [Replica(i, s) for i, s in enumerate(schedulers)]
        self.cost_model = cost_model
        self.step_log = step_log
        self.max_concurrency = max_concurrency
        self.router = router
        self.on_step = on_step
        self.num_in_flight = 0
        self.num_finished = 0
        self.slot_freed: simpy.Event | None = None
        self.last_finish_s = 0.0
        self._rr = 0

    # -- processes -------------------------------------------------------------------------------
    def arrivals(self):
        env = self.env
        for request in self.pending:
            if request.arrival_s > env.now:
                yield env.timeout(request.arrival_s - env.now)
            while self.max_concurrency is not None and self.num_in_flight >= self.max_concurrency:
                self.slot_freed = env.event()
                yield self.slot_freed  # vLLM bench: the semaphore is taken before `start`
            # The benchmark clock starts when the client sends (trap 15): record that time.
            request.client_queue_s = env.now - request.arrival_s
            request.arrival_s = env.now
            self.num_in_flight += 1
            replica = self.route()
            replica.scheduler.add(request)
            replica.notify()

    def route(self) -> Replica:
        if len(self.replicas) == 1:
            return self.replicas[0]
        if self.router == "least_loaded":
            return min(self.replicas, key=lambda r: r.scheduler.num_unfinished)
        self._rr = (self._rr + 1) % len(self.replicas)
        return self.replicas[self._rr]

    def serve(self, replica: Replica):
        env, scheduler, cost = self.env, replica.scheduler, self.cost_model
        watchdog = ProgressWatchdog()
        while True:
            start_s = env.now
            batch = scheduler.schedule(start_s)
            if not batch:
                yield from self._idle(replica)
                continue
            shape = batch.shape()
            yield env.timeout(cost.step_time_s(shape))
            finished = scheduler.on_step_end(batch, env.now)
            self.step_log.append(start_s, env.now, shape.num_seqs, shape.num_prefill_seqs,
                                 shape.num_decode_seqs, shape.num_tokens, shape.num_prefill_tokens,
                                 len(scheduler.running), len(scheduler.waiting), scheduler.kv.usage,
                                 batch.num_preempted)
            watchdog.observe(shape.num_sampled, batch.num_preempted, scheduler)
            if finished:
                self._on_finished(finished)
            if self.on_step is not None:
                self.on_step(replica, batch, shape)

    def _idle(self, replica: Replica):
        scheduler = replica.scheduler
        wake_s = scheduler.next_wakeup_s(self.env.now)
        if scheduler.running or (scheduler.waiting and wake_s is None):
            raise NoProgressError(diagnose_stall(scheduler, self.env.now))
        replica.wakeup = self.env.event()
        events = [replica.wakeup]
        if wake_s is not None:
            events.append(self.env.timeout(max(0.0, wake_s - self.env.now)))
        yield self.env.any_of(events)
        replica.wakeup = None

    def _on_finished(self, finished: list[Request]) -> None:
        self.num_finished += len(finished)
        self.num_in_flight -= len(finished)
        self.last_finish_s = self.env.now
        if self.slot_freed is not None and not self.slot_freed.triggered:
            self.slot_freed.succeed()

    # -- driver ----------------------------------------------------------------------------------
    def run(self) -> SimulationResult:
        self.env.process(self.arrivals())
        for replica in self.replicas:
            self.env.process(self.serve(replica))
        total = len(self.pending)
        while self.num_finished < total:
            if not self.env._queue:  # nothing scheduled yet requests remain: a bug, not a hang
                raise NoProgressError(f"simulation stopped with {total - self.num_finished} "
                                      f"unfinished requests and no pending event")
            self.env.step()
        start_s = min((r.arrival_s for r in self.pending), default=0.0)
        return SimulationResult(self.pending, self.step_log, self.replicas, start_s,
                                self.last_finish_s,
                                sum(r.scheduler.num_preemptions for r in self.replicas))
