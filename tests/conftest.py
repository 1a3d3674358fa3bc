"""Make the repository importable when pytest runs from a checkout without an install, and choose
the Hypothesis profile of the property tests (tests/test_properties*.py).

Profiles: ``ci`` (the default; it replaces Hypothesis's own derandomized ``ci`` profile) draws
fresh examples every run, so CI explores rather than replaying the same ones; ``repro``
(``HYPOTHESIS_PROFILE=repro`` or ``--hypothesis-profile=repro``) derives each test's examples
from its own source, the same on every machine and run. A failing example prints its scenario
(YAML) and a ``@reproduce_failure`` line; ``--hypothesis-seed=N`` replays a run's draws from
seed N (Hypothesis names the seed when a failure does not reproduce).
"""
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

try:
    from hypothesis import HealthCheck, settings
except ImportError:   # the property tests need the dev extras; the others run without them
    pass
else:
    # No example database (CI starts clean; a failure prints what replays it), no deadline (a
    # busy 2-core runner makes timings noisy), and the size checks off for the larger scenarios.
    settings.register_profile(
        "ci", derandomize=False, database=None, deadline=None, print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    settings.register_profile("repro", settings.get_profile("ci"), derandomize=True)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
