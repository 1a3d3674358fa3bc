"""``calibrate``: the click command (the lead attaches it to the ``servesim`` group).

Imports torch only when the command runs, so ``servesim --help`` works without the extra.
"""
from __future__ import annotations

import signal
import sys
from pathlib import Path

import click

from calibration.grid import GRIDS, named_grid, preflight_grid
from calibration.options import CUDA_GRAPH_MODES, DEVICES, DTYPES, NORMS, CalibrationOptions


@click.command("calibrate")
@click.option("--model", required=True, help="Preset name (e.g. llama-3.1-8b, tiny-llama) or "
              "path to a HuggingFace config.json / model folder.")
@click.option("--device", type=click.Choice(DEVICES), default="cpu", show_default=True)
@click.option("--dtype", type=click.Choice(DTYPES), default=None,
              help="Default: bf16 on cuda, fp32 on cpu.")
@click.option("--tp", type=int, default=1, show_default=True,
              help=">1: time one rank's shard on this device (all-reduce not included).")
@click.option("--grid", "grid_name", type=click.Choice(GRIDS), default=None,
              help="Shapes to time: full (the H200 reference grid, the default), quick (about a "
                   "minute on CPU with tiny-llama), cpu (the vLLM-CPU runs' shapes).")
@click.option("--quick", is_flag=True, help="Same as --grid quick.")
@click.option("--preflight", is_flag=True, help="Only the full grid's smallest and largest shapes "
              "of each kind: a quick check of memory and CUDA-graph capture.")
@click.option("--cuda-graph", "cuda_graph", type=click.Choice(CUDA_GRAPH_MODES), default="off",
              show_default=True, help="Also time CUDA-graph replay: decode shapes or all shapes.")
@click.option("--repeats", type=int, default=5, show_default=True)
@click.option("--warmup", type=int, default=2, show_default=True)
@click.option("--time-budget-s", "time_budget_s", type=float, default=None,
              help="Stop starting new shapes once this many seconds have passed.")
@click.option("--kv-budget-gb", "kv_budget_gb", type=float, default=None,
              help="Memory for the KV pool (default: free device memory less a reserve; "
                   "1 GiB on cpu).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--norm", type=click.Choice(NORMS), default="fused", show_default=True,
              help="RMSNorm as one fused kernel or as the plain-PyTorch chain of small kernels.")
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False,
              path_type=Path), help="Folder for timings.csv, meta.json and device.csv.")
def calibrate(model: str, device: str, dtype: str | None, tp: int, grid_name: str | None,
              quick: bool, preflight: bool, cuda_graph: str, repeats: int, warmup: int,
              time_budget_s: float | None, kv_budget_gb: float | None, seed: int, norm: str,
              out_dir: Path) -> None:
    """Time real forward passes of a random-weight Llama-style decoder over a grid of shapes."""
    kv_budget = None if kv_budget_gb is None else int(kv_budget_gb * (1 << 30))
    if quick and grid_name not in (None, "quick"):
        raise click.UsageError(f"--quick and --grid {grid_name} choose different grids; give one")
    if preflight and (quick or grid_name is not None):
        raise click.UsageError("--preflight and --quick/--grid choose different grids; give one")
    quick = quick or grid_name == "quick"
    grid = preflight_grid() if preflight else named_grid(grid_name) if grid_name == "cpu" else None
    try:
        options = CalibrationOptions(
            model=model, out_dir=out_dir, device=device, dtype=dtype, tp=tp, quick=quick,
            cuda_graph=cuda_graph, repeats=repeats, warmup=warmup, time_budget_s=time_budget_s,
            kv_budget_bytes=kv_budget, seed=seed, grid=grid, norm=norm)
        from calibration.harness import run_calibration  # torch is needed from here on
        # SIGTERM (e.g. `timeout`) unwinds like Ctrl-C, so meta.json records how far the run got.
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
        path = run_calibration(options)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(f"wrote {path / 'timings.csv'}, {path / 'meta.json'} and {path / 'device.csv'}")
