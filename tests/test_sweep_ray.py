"""`--backend ray` runs the same sweep as Ray tasks on a local instance and writes the same bytes
as the local backend. Skipped when Ray (the optional extra servesim[ray]) is not installed or
cannot start or run a task here; a Ray that starts but runs no task is refused in bounded time
(a stand-in module checks that without Ray)."""
from __future__ import annotations

import sys
import types

import pytest

from tests.test_sweep import quiet_sweep, tiny

from simulator.sweep import backends
from simulator.sweep.backends import BackendError, RayBackend
from simulator.sweep.table import SWEEP_CSV


def test_ray_backend_writes_the_same_sweep_csv_as_the_local_backend(tmp_path):
    ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'servesim[ray]'")
    raw = tiny(sweep={"workload.arrival.rate": [2.0, 8.0]})
    try:
        outcome = quiet_sweep(raw, tmp_path / "ray", backend="ray", workers=2)
    except BackendError as exc:
        pytest.skip(f"Ray cannot start or run a task here: {exc}")
    assert (outcome.num_ran, outcome.num_errors) == (8, 0)
    assert not ray.is_initialized()   # the instance the sweep started is shut down
    quiet_sweep(raw, tmp_path / "local")
    assert (tmp_path / "ray" / SWEEP_CSV).read_bytes() == (tmp_path / "local" / SWEEP_CSV).read_bytes()


class _RayThatRunsNoTask(types.ModuleType):
    """Starts, accepts a task, and never runs it: ``get`` times out, as Ray's does."""

    def __init__(self):
        super().__init__("ray")
        self.up = False
        self.waited_s = None

    def is_initialized(self):
        return self.up

    def init(self, **_):
        self.up = True

    def shutdown(self):
        self.up = False

    def remote(self, fn):
        return types.SimpleNamespace(remote=lambda *args: object())

    def get(self, ref, timeout=None):
        self.waited_s = timeout
        raise TimeoutError("GetTimeoutError")


def test_a_ray_that_runs_no_task_is_refused_within_the_bound(monkeypatch):
    fake = _RayThatRunsNoTask()
    monkeypatch.setitem(sys.modules, "ray", fake)
    with pytest.raises(BackendError, match=r"^backend ray: Ray started but ran no task within "
                                           r"120 s \(TimeoutError\); use --backend local$"):
        with RayBackend(workers=2):
            pass
    assert fake.waited_s == backends.RAY_FIRST_TASK_TIMEOUT_S == 120.0
    assert not fake.up   # the instance it started is shut down again
