"""An out-of-tree policy, loaded by `preset: tests.plugins.lifo_policy:LifoScheduler`."""
from dataclasses import dataclass

from simulator.schedulers.options import SchedulerOptions, options_config
from simulator.schedulers.orca import OrcaScheduler


@options_config
@dataclass(frozen=True)
class LifoOptions(SchedulerOptions):
    reserve: str = "request"


class LifoScheduler(OrcaScheduler):
    """Orca's rules, but the newest waiting request is served first."""
    Options = LifoOptions

    def schedule(self, now_s):
        self.waiting = type(self.waiting)(sorted(self.waiting, key=lambda r: -r.arrival_s))
        return super().schedule(now_s)
