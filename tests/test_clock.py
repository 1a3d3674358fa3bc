"""SingleProcessClock keeps SimPy's clock arithmetic for a lone process (simulator/clock.py)."""
import numpy as np
import pytest
import simpy

from simulator.clock import NEVER, SingleProcessClock


def _waits(env, delays, seen):
    for delay in delays:
        yield env.timeout(delay)
        seen.append(env.now)


def test_the_clock_reads_what_simpy_reads_after_every_wait():
    delays = np.random.default_rng(7).exponential(0.013, 5000).tolist() + [0.0, 1e-17, 3.0]
    env, by_simpy = simpy.Environment(), []
    env.process(_waits(env, delays, by_simpy))
    env.run()
    clock, by_clock = SingleProcessClock(), []
    for _ in _waits(clock, delays, by_clock):
        pass
    assert by_clock == by_simpy   # the same floats, bit for bit
    assert by_clock[-1] == env.now


def test_the_clock_starts_at_simpys_integer_zero():
    clock = SingleProcessClock()
    assert clock.now == 0 and type(clock.now) is int


def test_a_negative_delay_is_refused_as_simpy_refuses_it():
    with pytest.raises(ValueError, match="Negative delay -0.5"):
        SingleProcessClock().timeout(-0.5)
    with pytest.raises(ValueError, match="Negative delay -0.5"):
        simpy.Environment().timeout(-0.5)


def test_waiting_for_nothing_yields_the_never_event():
    assert SingleProcessClock().event() is NEVER
