"""Landing SimPy's clock on an exact time: a run of decode steps sleeps to its last step's end."""
from __future__ import annotations

import math


def sleep_until(env, end_s: float):
    """Advance SimPy's clock to exactly ``end_s``: one delay if one lands on it, else two
    (from halfway, end_s - now is exact: Sterbenz)."""
    delay = _delay_reaching(env.now, end_s)
    if delay is None:
        yield env.timeout((end_s - env.now) / 2)
        delay = end_s - env.now
    yield env.timeout(delay)


def _delay_reaching(now_s: float, target_s: float) -> float | None:
    """A delay d with now_s + d == target_s exactly (SimPy adds delays to its clock), if one exists."""
    d = target_s - now_s
    for candidate in (d, math.nextafter(d, math.inf), math.nextafter(d, -math.inf)):
        if now_s + candidate == target_s and candidate >= 0:
            return candidate
    return None
