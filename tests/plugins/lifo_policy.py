"""An out-of-tree policy, loaded by `preset: tests.plugins.lifo_policy:LifoScheduler`."""
from dataclasses import dataclass

from simulator.policies.options import SchedulerOptions, options_config
from simulator.policies.orca import OrcaScheduler
from simulator.policies.queues import OrderedQueue


@options_config
@dataclass(frozen=True)
class LifoOptions(SchedulerOptions):
    reserve: str = "request"


class NewestFirstQueue(OrderedQueue):
    @staticmethod
    def key(request):
        return -request.arrival_s


class LifoScheduler(OrcaScheduler):
    """Orca's rules, but the newest waiting request is served first."""
    Options = LifoOptions

    def make_waiting_queue(self):
        return NewestFirstQueue()
