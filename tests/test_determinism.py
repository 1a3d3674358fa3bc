"""Same scenario and seed, same bytes, whatever the machine's BLAS threading (guide: deterministic)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_results_do_not_depend_on_blas_threads(tmp_path):
    # Time-weighted means once went through np.dot, whose BLAS summation order follows its
    # thread count: the summary's last digits changed with OPENBLAS_NUM_THREADS.
    outputs = []
    for threads in ("1", "2"):
        out = tmp_path / f"threads{threads}"
        env = {**os.environ, "OPENBLAS_NUM_THREADS": threads, "OMP_NUM_THREADS": threads}
        subprocess.run([sys.executable, "-m", "simulator.cli", "run", "scenarios/kv_starved_preemption.yaml",
                        "--no-plots", "--out", str(out)], cwd=ROOT, env=env, check=True,
                       capture_output=True, timeout=300)
        outputs.append({p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()})
    assert outputs[0].keys() == outputs[1].keys() and len(outputs[0]) >= 3
    assert outputs[0] == outputs[1]
