"""The event loop: one arrivals process and one serve loop per replica, on SimPy; a lone serve loop
that pulls its own arrivals runs on SimPy's clock arithmetic without SimPy (simulator/clock.py).

Only arrivals and step boundaries are events (never one per token). A serve loop asks its
scheduler for a batch, asks the cost model how long that forward pass takes, sleeps that long,
then lets the scheduler account the step.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import math
from collections import deque
from operator import attrgetter

from cost_models.base import StepCostModel
from simulator.batch import Batch
from simulator.clock import NEVER, SingleProcessClock, delay_reaching
from simulator.progress import NoProgressError, ProgressWatchdog, diagnose_stall
from simulator.request import Request
from simulator.schedulers.base import Scheduler

if TYPE_CHECKING:
    import simpy


@dataclass(eq=False, repr=False)   # compared by identity (runner.PreparedRun)
class Replica:
    index: int
    scheduler: Scheduler
    wakeup: simpy.Event | None = None   # set while the replica idles, fired by an arrival

    def notify(self) -> None:
        if self.wakeup is not None and not self.wakeup.triggered:
            self.wakeup.succeed()


@dataclass(eq=False, repr=False)   # likewise
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
                 router: str = "round_robin", on_step: Callable | None = None,
                 fast_forward: bool = True, pull_arrivals: bool = True):
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
        # Several identical decode steps may be advanced in one event (single replica, no
        # per-step callback): see simulator/fast_forward.py.
        self.fast_forward = fast_forward and len(self.replicas) == 1 and on_step is None
        self.next_arrival_s = requests[0].arrival_s if requests else math.inf
        # One replica and open-loop clients: the serve loop takes arrivals as it resumes
        # (_pull_arrivals) instead of an arrival process with one event per request. Nothing
        # else reads the queue between its resumes, and no policy of its own wakes it.
        self.pull_arrivals = (pull_arrivals and len(self.replicas) == 1 and max_concurrency is None
                              and type(schedulers[0]).next_wakeup_s is Scheduler.next_wakeup_s)
        # Pulled arrivals leave the serve loop as the only process: it runs on SimPy's clock
        # arithmetic without SimPy (simulator/clock.py), which is imported only for the rest.
        if self.pull_arrivals:
            self.env = SingleProcessClock()
        else:
            import simpy
            self.env = simpy.Environment()
        self._num_pulled = 0
        self._arrival_clock = 0            # the arrival process's clock (SimPy's starts at int 0)
        self._arrival_before_serve = True  # its resume at that time came before the serve loop's
        # When the arrival process would next wake (clock + (arrival - clock)): before then,
        # a resume has nothing to pull.
        self._next_wake_s = self.next_arrival_s

    # -- processes -------------------------------------------------------------------------------
    def arrivals(self):
        env = self.env
        for request in self.pending:
            self.next_arrival_s = request.arrival_s
            if request.arrival_s > env.now:
                yield env.timeout(request.arrival_s - env.now)
            while self.max_concurrency is not None and self.num_in_flight >= self.max_concurrency:
                self.next_arrival_s = math.inf   # until a request finishes
                self.slot_freed = env.event()
                yield self.slot_freed  # vLLM bench: the semaphore is taken before `start`
            # The benchmark clock starts when the client sends (trap 15): record that time.
            request.client_queue_s = env.now - request.arrival_s
            request.arrival_s = env.now
            self.num_in_flight += 1
            replica = self.route()
            replica.scheduler.add(request)
            replica.notify()
        self.next_arrival_s = math.inf

    def _pull_arrivals(self, scheduler: Scheduler, now_s: float, created_s: float | None) -> None:
        """Add the requests the arrival process (``arrivals``) would have added before the serve
        loop resumes at ``now_s`` from an event it created at ``created_s`` (None: woken by an
        arrival, so after every arrival due by now), with the same clock values: SimPy wakes the
        process at clock + (arrival - clock). An arrival at exactly ``now_s`` comes first when
        its event is older than the serve loop's: created at an earlier time, or at the same
        time by a resume that came first (SimPy orders equal times by event creation)."""
        if self._next_wake_s > now_s:
            return
        pending, i, n = self.pending, self._num_pulled, len(self.pending)
        clock, before = self._arrival_clock, self._arrival_before_serve
        while i < n:
            request = pending[i]
            arrival_s = request.arrival_s
            if arrival_s > clock:   # the arrival process slept until then
                wake_s = clock + (arrival_s - clock)
                if wake_s > now_s or (wake_s == now_s and created_s is not None and (
                        clock > created_s or (clock == created_s and not before))):
                    break
                clock, before = wake_s, wake_s == now_s
            request.client_queue_s = clock - arrival_s
            request.arrival_s = clock
            self.num_in_flight += 1
            scheduler.add(request)
            i += 1
        self._num_pulled, self._arrival_clock, self._arrival_before_serve = i, clock, before
        self.next_arrival_s = pending[i].arrival_s if i < n else math.inf
        self._next_wake_s = wake_s if i < n else math.inf   # the one the loop stopped at

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
        # Async scheduling keeps two batches in flight: step k+1 is formed while step k runs.
        depth = 2 if scheduler.async_scheduling else 1
        fast_forward = self.fast_forward and depth == 1
        if fast_forward and hasattr(cost, "decode_step_time_s"):
            scheduler.enable_cohort()   # nothing reads a request mid-run: decoders may go lazy
        in_flight: deque[Batch] = deque()
        carried_preemptions = 0
        pull = self.pull_arrivals
        if pull:
            self._pull_arrivals(scheduler, env.now, None)   # the arrival process ran first
        while True:
            while len(in_flight) < depth:
                batch = scheduler.schedule(env.now)
                batch.num_preempted += carried_preemptions
                carried_preemptions = 0
                if batch:
                    in_flight.append(batch)
                elif batch.num_preempted:
                    # Preemption emptied the batch (e.g. the only candidate preempted itself):
                    # vLLM schedules again at once; the state changed, so this is progress. The
                    # count goes into the next logged step so steps.csv adds up.
                    watchdog.observe(0, batch.num_preempted, scheduler)
                    carried_preemptions = batch.num_preempted
                else:
                    break
            if not in_flight:
                yield from self._idle(replica)
                continue
            batch = in_flight.popleft()
            start_s = env.now
            shape = batch.shape()
            yield env.timeout(cost.step_time_s(shape))
            end_s = env.now
            if pull and self._next_wake_s <= end_s:   # _pull_arrivals' own test, before the call
                self._pull_arrivals(scheduler, end_s, start_s)
            finished = scheduler.on_step_end(batch, end_s)
            tokens, _, num_decodes, _, _, num_prefills, num_sampled, num_seqs = shape.work_counts
            self.step_log.append(start_s, end_s, num_seqs, num_prefills, num_decodes, tokens,
                                 tokens - num_decodes,
                                 len(scheduler.running), len(scheduler.waiting), scheduler.kv.usage,
                                 batch.num_preempted)
            if not num_sampled or watchdog.steps_without_token:   # else observe() changes nothing
                watchdog.observe(num_sampled, batch.num_preempted, scheduler)
            if finished:
                self._on_finished(finished, end_s)
            if self.on_step is not None:
                self.on_step(replica, batch, shape)
            if fast_forward and self.next_arrival_s > end_s:   # else a request arrives first
                yield from self._decode_run(scheduler, watchdog, end_s)

    def _decode_run(self, scheduler: Scheduler, watchdog: ProgressWatchdog, start_s: float):
        """Advance the coming decode steps from ``start_s`` (now) in one event, when that is
        exact (the caller has checked that no request arrives before the next step)."""
        state = scheduler.decode_run_state()
        if state is None:
            return
        # Past a finish only if it cannot let anyone in (Scheduler.finish_can_admit) and no
        # closed-loop client is waiting for a free slot to send.
        through = (scheduler.decode_runs_through_finishes and not scheduler.finish_can_admit()
                   and self.max_concurrency is None)
        if state is scheduler.cohort:
            terms_of = getattr(self.cost_model, "decode_step_terms", None)
            if terms_of is not None and (yield from self._cohort_run(scheduler, watchdog, start_s,
                                                                     terms_of, through)):
                return
        # Planned runs (cost models without decode-step terms, policies without a cohort):
        # imported when first needed, as a cohort's own runs (DecodeCohort.run) need none of it.
        from simulator.fast_forward import DecodeRun, apply_decode_run, plan_decode_run
        if state is scheduler.cohort:
            # Its rows at each step are the members still in: filled in once it has run.
            ends = state.plan_run(self.cost_model, start_s, self.next_arrival_s, through)
            run = ends and DecodeRun(ends, None)
        else:
            run = plan_decode_run(scheduler, self.cost_model, start_s, *state, self.next_arrival_s,
                                  through)
        delay = run and delay_reaching(start_s, run.end_s[-1])
        if delay is None:
            return  # no exact single delay: let the next steps run one by one
        waiting_before, running_before = len(scheduler.waiting), len(scheduler.running)
        yield self.env.timeout(delay)
        if self.pull_arrivals:
            self._pull_arrivals(scheduler, self.env.now, start_s)
        steps = apply_decode_run(scheduler, run, self._on_finished)
        self._log_run(scheduler, watchdog, start_s, run.end_s, steps.kv_usage, steps.num_running,
                      run.num_rows or [running_before, *steps.num_running[:-1]], waiting_before)

    def _log_run(self, scheduler: Scheduler, watchdog: ProgressWatchdog, start_s: float,
                 ends: list[float], usage: list[float], num_running: list[int],
                 num_rows: list[int], waiting_before: int) -> None:
        """A carried-out run's rows in the step log. Arrivals can only land during its last step
        (a run stops before a step that starts at or after one), so earlier rows saw the queue
        as it was."""
        num_waiting = [waiting_before] * (len(ends) - 1) + [len(scheduler.waiting)]
        self.step_log.extend_decode_steps(start_s, ends, num_rows, num_running, num_waiting, usage)
        if watchdog.steps_without_token:   # every step of a run samples: else nothing to reset
            watchdog.observe(num_rows[-1], 0, scheduler)

    def _cohort_run(self, scheduler: Scheduler, watchdog: ProgressWatchdog, start_s: float,
                    terms_of, through: bool):
        """The cohort's run planned and carried out in one pass (DecodeCohort.run), then slept
        through; what others may see (finishes told to the engine, the step log, arrivals) waits
        for the clock, as after a planned run. Nothing reads the cohort's state meanwhile: the
        arrival process only queues requests. False when no step was taken."""
        waiting_before, running_before = len(scheduler.waiting), len(scheduler.running)
        finishes: list[tuple[list, float]] = []

        def leave(finished: list, end_s: float) -> None:
            scheduler.finish(finished, end_s)
            finishes.append((finished, end_s))

        done = scheduler.cohort.run(terms_of, start_s, self.next_arrival_s, through, leave)
        if done is None:
            return False
        ends, usage, num_running = done
        yield from self._sleep_until(ends[-1])
        if self.pull_arrivals and self._next_wake_s <= ends[-1]:
            self._pull_arrivals(scheduler, ends[-1], start_s)
        for finished, end_s in finishes:
            self._on_finished(finished, end_s)
        self._log_run(scheduler, watchdog, start_s, ends, usage, num_running,
                      [running_before, *num_running[:-1]], waiting_before)
        return True

    def _sleep_until(self, end_s: float):
        """Advance SimPy's clock to exactly ``end_s``: one delay if one lands on it, else two
        (from halfway, end_s - now is exact: Sterbenz)."""
        env = self.env
        delay = delay_reaching(env.now, end_s)
        if delay is None:
            yield env.timeout((end_s - env.now) / 2)
            delay = end_s - env.now
        yield env.timeout(delay)

    def _idle(self, replica: Replica):
        scheduler = replica.scheduler
        wake_s = scheduler.next_wakeup_s(self.env.now)
        if scheduler.running or (scheduler.waiting and wake_s is None):
            raise NoProgressError(diagnose_stall(scheduler, self.env.now))
        if self.pull_arrivals:
            yield from self._await_arrival(scheduler)
            return
        replica.wakeup = self.env.event()
        events = [replica.wakeup]
        if wake_s is not None:
            events.append(self.env.timeout(max(0.0, wake_s - self.env.now)))
        yield self.env.any_of(events)
        replica.wakeup = None

    def _await_arrival(self, scheduler: Scheduler):
        """Sleep until the arrival process would have woken (_pull_arrivals), then take every
        arrival due by then."""
        env = self.env
        if self._next_wake_s == math.inf:
            yield env.event()   # nothing more arrives: the run ends with its last finish
            return
        yield from self._sleep_until(self._next_wake_s)   # now + d can round past it for every d
        self._pull_arrivals(scheduler, env.now, None)

    def _on_finished(self, finished: list[Request], now_s: float) -> None:
        self.num_finished += len(finished)
        self.num_in_flight -= len(finished)
        self.last_finish_s = now_s
        if self.slot_freed is not None and not self.slot_freed.triggered:
            self.slot_freed.succeed()
            self.next_arrival_s = now_s  # the blocked client sends now

    # -- driver ----------------------------------------------------------------------------------
    def _run_serve_loop(self) -> None:
        """The one serve loop on SingleProcessClock: each value it yields is a wait, over once
        the loop resumes (as SimPy would resume it, nothing else being scheduled)."""
        total = len(self.pending)
        if self.num_finished >= total:
            return
        for waited in self.serve(self.replicas[0]):
            if self.num_finished >= total:
                return
            if waited is NEVER:
                self._raise_stopped(total)

    def _run_processes(self) -> None:
        processes = [self.env.process(self.arrivals())]
        for replica in self.replicas:
            processes.append(self.env.process(self.serve(replica)))
        total = len(self.pending)
        while self.num_finished < total:
            if not self.env._queue:
                self._raise_stopped(total)
            self.env.step()
        for process in processes:
            # A process that raised after the last finish (e.g. logging that step): SimPy would
            # raise it at its next step, which the loop above no longer takes.
            if process.triggered and not process.ok:
                process.defused = True
                raise process.value

    def _raise_stopped(self, total: int) -> None:
        # Nothing left to happen yet requests remain: a bug, not a hang.
        raise NoProgressError(f"simulation stopped with {total - self.num_finished} "
                              f"unfinished requests and no pending event")

    def run(self) -> SimulationResult:
        if self.pull_arrivals:
            self._run_serve_loop()
        else:
            self._run_processes()
        start_s = min(map(attrgetter("arrival_s"), self.pending), default=0.0)   # in C
        return SimulationResult(self.pending, self.step_log, self.replicas, start_s,
                                self.last_finish_s,
                                sum(r.scheduler.num_preemptions for r in self.replicas))
