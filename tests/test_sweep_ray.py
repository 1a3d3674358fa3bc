"""`--backend ray` runs the same sweep as Ray tasks on a local instance and writes the same bytes
as the local backend. Skipped when Ray (the optional extra servesim[ray]) is not installed or
cannot start here."""
from __future__ import annotations

import pytest

from tests.test_sweep import quiet_sweep, tiny

from simulator.sweep.backends import BackendError
from simulator.sweep.table import SWEEP_CSV

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'servesim[ray]'")


def test_ray_backend_writes_the_same_sweep_csv_as_the_local_backend(tmp_path):
    raw = tiny(sweep={"workload.arrival.rate": [2.0, 8.0]})
    try:
        outcome = quiet_sweep(raw, tmp_path / "ray", backend="ray", workers=2)
    except BackendError as exc:
        pytest.skip(f"Ray cannot start here: {exc}")
    assert (outcome.num_ran, outcome.num_errors) == (8, 0)
    assert not ray.is_initialized()   # the instance the sweep started is shut down
    quiet_sweep(raw, tmp_path / "local")
    assert (tmp_path / "ray" / SWEEP_CSV).read_bytes() == (tmp_path / "local" / SWEEP_CSV).read_bytes()
