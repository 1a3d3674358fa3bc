"""The cycle collector paused while a process makes only objects that live on.

Python's collector runs every few hundred new container objects and, now and then, traverses
every object alive. Two phases make many objects that all live to the end and hold no garbage
cycles: `servesim run`'s start-up (the imports, numpy's above all, the scenario, the cost model)
and the requests of a large run (runner.make_requests); collections there find nothing.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def collector_paused() -> Iterator[None]:
    """No collection inside the block; the collector's state (on or off) is restored after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
