"""A replica the event loop serves (one engine: its scheduler, stepper and cost model), and a run's result."""
from __future__ import annotations

from dataclasses import dataclass

import simpy

from cost_models.base import StepCostModel
from simulator.engine.pipeline import Pipeline
from simulator.policies.base import Scheduler


@dataclass(eq=False)
class Replica:
    index: int
    scheduler: Scheduler
    stepper: object = None               # the scheduler, or a DecodeCohort driving it
    wakeup: simpy.Event | None = None    # set while the replica idles, fired by an arrival
    cost_model: StepCostModel | None = None
    pool: str = ""                       # P/D: "prefill" or "decode"; "" co-located
    num_transfers: int = 0               # P/D: KV pulls to or from it not yet done
    pipeline: Pipeline | None = None     # its stages: when each step ends

    def notify(self) -> None:
        if self.wakeup is not None and not self.wakeup.triggered:
            self.wakeup.succeed()


@dataclass(eq=False)
class SimulationResult:
    step_log: object
    replicas: list[Replica]
    start_s: float
    end_s: float
    num_preemptions: int = 0

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s
