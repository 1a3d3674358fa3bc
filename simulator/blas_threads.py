"""A start-up that does not pay for BLAS threads a simulation never uses. Its own module, free of
click and numpy: `servesim run`'s scenario reader, forked before either loads
(simulator/scenario_prefetch.py), calls it too."""
from __future__ import annotations

import os
import sys


def single_threaded_blas() -> None:
    """Keep numpy's OpenBLAS to one thread, before numpy first loads. A simulation does no BLAS
    work, yet OpenBLAS starts a thread per core as it loads: tens of ms of a `servesim run` on a
    busy two-core machine. A process that loaded numpy already (tests, notebooks) is left as it is,
    and an explicit OPENBLAS_NUM_THREADS wins."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
