"""SimPy's clock for a simulation whose only process is one serve loop.

With one replica and open-loop clients the serve loop takes arrivals itself as it resumes
(Simulation._pull_arrivals), so nothing else is ever scheduled: SimPy's event queue would only
ever hold the serve loop's own next timeout, and there is no order to decide. The loop then runs
on this clock instead, which keeps SimPy's arithmetic (a timeout is due at now + delay, and the
clock is set to that) so every time it produces is the same float, and SimPy is not imported.
Everything with more than one process (closed-loop clients, several replicas, policies that
wake themselves) runs on simpy.Environment.
"""
from __future__ import annotations

import math

NEVER = object()   # an event nothing will trigger: the serve loop has nothing left to wait for


class SingleProcessClock:
    """The parts of simpy.Environment one process uses: ``now``, ``timeout`` and ``event``.
    The process's generator is driven by Simulation.run: each value it yields is one wait."""

    def __init__(self) -> None:
        self.now = 0   # SimPy's clock starts at int 0

    def timeout(self, delay: float) -> None:
        """Move the clock as SimPy would by the time the process resumes from this timeout."""
        if delay < 0:
            raise ValueError(f"Negative delay {delay}")   # simpy.Timeout's check
        self.now = self.now + delay

    def event(self) -> object:
        return NEVER


def delay_reaching(now_s: float, target_s: float) -> float | None:
    """A delay d with now_s + d == target_s exactly (SimPy adds delays to its clock), if one exists."""
    d = target_s - now_s
    for candidate in (d, math.nextafter(d, math.inf), math.nextafter(d, -math.inf)):
        if now_s + candidate == target_s and candidate >= 0:
            return candidate
    return None
