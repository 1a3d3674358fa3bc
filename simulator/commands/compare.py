"""`servesim compare A.yaml [B.yaml ...]`: capacity under SLOs per scheduler, with 95% intervals
over seeds, as a table, ``capacity.csv`` and a bar chart; files that have a ``sweep:`` block are
also swept (resumably) and their throughput-versus-latency curves drawn together.

SLOs come from ``--slo p99_ttft_ms=1000`` (repeatable) or else from each file's
``metrics.goodput`` (read as 99th-percentile bounds). Seeds: ``--seeds N`` or each file's own
(``num_seeds`` / ``sweep.seed``).
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import click

from simulator.commands.common import fail
from simulator.commands.sweep import backend_options

UNITS = {"workload.arrival.rate": "req/s", "workload.max_concurrency": "concurrent requests"}
OVER = {"rate": "workload.arrival.rate", "concurrency": "workload.max_concurrency"}


@dataclass(frozen=True)
class CompareInput:
    path: Path
    raw: dict
    scenario: object
    slos: dict[str, float]
    seeds: list[int]


@click.command()
@click.argument("scenario_files", nargs=-1, required=True,
                type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("results") / "compare", show_default=True, help="Result folder.")
@click.option("--slo", "slo_items", multiple=True, metavar="METRIC=MS",
              help="A latency bound, e.g. --slo p99_ttft_ms=1000 (repeatable).")
@click.option("--over", type=click.Choice(sorted(OVER)), default="rate", show_default=True,
              help="Search the request rate or the client concurrency.")
@click.option("--seeds", "num_seeds", type=click.IntRange(min=1), default=None,
              help="Seeds per scheduler (default: each file's num_seeds).")
@click.option("--tol", "rel_tol", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              default=0.05, show_default=True, help="Relative width at which bisection stops.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a field in every file (repeatable).")
@backend_options
@click.option("--no-sweeps", is_flag=True, help="Skip the files' sweep blocks (capacity only).")
@click.option("--no-plots", is_flag=True, help="Skip the plots.")
def compare(scenario_files, out_dir, slo_items, over, num_seeds, rel_tol, overrides, workers,
            backend, address, no_sweeps, no_plots) -> None:
    """Highest load meeting the SLOs, per scheduler of each SCENARIO_FILE, with 95% intervals."""
    from simulator.sweep.capacity import CapacitySearch, measure_capacity
    from simulator.engine.progress import NoProgressError, progress_bar
    from simulator.scenario import ScenarioError
    from simulator.sweep.backends import BackendError, make_backend
    try:
        search = CapacitySearch(OVER[over], rel_tol)
        inputs = [_load(p, overrides, slo_items, num_seeds) for p in scenario_files]
        _check_names(inputs)
        capacities = []
        with make_backend(backend, workers, address) as executor:
            for item in inputs:
                num_searches = len(item.raw["schedulers"]) * len(item.seeds)
                click.echo(f"{item.scenario.name}: capacity of {len(item.raw['schedulers'])} "
                           f"schedulers x {len(item.seeds)} seeds under "
                           + ", ".join(f"{k} <= {v:g}" for k, v in item.slos.items()))
                with progress_bar(num_searches, item.scenario.name, "search") as bar:
                    capacities += measure_capacity(item.raw, item.path.parent, item.slos,
                                                   item.seeds, search, CountingBackend(executor, bar))
            sweeps = [] if no_sweeps else _run_sweeps(inputs, out_dir, backend, workers, address)
    except (ScenarioError, BackendError, NoProgressError, ValueError) as exc:
        fail(str(exc).split("\n")[0])
    unit = UNITS[search.over]
    click.echo(format_capacity_table(capacities, unit))
    click.echo(f"capacity: {write_capacity_csv(capacities, out_dir / 'capacity.csv', unit)}")
    if not no_plots:
        for path in _plots(capacities, sweeps, out_dir, unit, inputs[0].slos):
            click.echo(f"plot: {path}")


class CountingBackend:
    """A sweep backend that tells a progress bar of each finished task (it only counts)."""

    def __init__(self, executor, bar):
        self.executor, self.bar = executor, bar

    def share(self, obj):
        return self.executor.share(obj)

    def map_unordered(self, fn, tasks):
        for done in self.executor.map_unordered(fn, tasks):
            self.bar.advance()
            yield done


def _load(path: Path, overrides, slo_items, num_seeds) -> CompareInput:
    from simulator.sweep.capacity import parse_slos, slos_from_goodput
    from simulator.scenario import ScenarioError, validate_scenario
    from simulator.scenario.file import read_raw_scenario
    from simulator.scenario.sweep_plan import SEED_KEY
    raw = read_raw_scenario(path, overrides)
    scenario = validate_scenario(raw, path.parent)
    slos = parse_slos(slo_items) if slo_items else slos_from_goodput(scenario)
    if not slos:
        raise ScenarioError(f"{path}: no SLO to meet; pass --slo p99_ttft_ms=1000 or set "
                            f"metrics.goodput in the file")
    if num_seeds is not None:
        seeds = list(range(scenario.seed, scenario.seed + num_seeds))
    else:
        seeds = list((scenario.sweep or {}).get(SEED_KEY)
                     or range(scenario.seed, scenario.seed + scenario.num_seeds))
    return CompareInput(path, raw, scenario, slos, seeds)


def _check_names(inputs: list[CompareInput]) -> None:
    from simulator.scenario import ScenarioError
    names = [i.scenario.name for i in inputs]
    for i, name in enumerate(names):
        if names.index(name) != i:
            raise ScenarioError(f"{inputs[i].path}: name {name!r} is also the name of "
                                f"{inputs[names.index(name)].path}; results would share a folder")


def _run_sweeps(inputs, out_dir: Path, backend, workers, address) -> list[tuple[str, Path]]:
    from simulator.sweep.execute import run_sweep
    from simulator.scenario.sweep_plan import build_plan
    done = []
    for item in inputs:
        if item.scenario.sweep:
            plan = build_plan(item.raw, item.path.parent)
            run_sweep(plan, out_dir / plan.name, backend=backend, workers=workers, address=address,
                      log=click.echo)
            done.append((plan.name, out_dir / plan.name))
    return done


def format_capacity_table(capacities, unit: str) -> str:
    rows = [["scenario", "scheduler", f"capacity ({unit})", "95% interval", "seeds", "per seed",
             "offered -> achieved (req/s)", "not steady"]]
    for c in capacities:
        per_seed = [r.capacity for r in c.per_seed]
        lower_bound = "" if all(r.bounded for r in c.per_seed) else " (SLOs never failed: >=)"
        rows.append([c.scenario, c.scheduler, f"{c.estimate.mean:.3g}{lower_bound}",
                     "-" if c.estimate.half_width is None else f"± {c.estimate.half_width:.2g}",
                     str(c.estimate.n), f"{min(per_seed):.3g} .. {max(per_seed):.3g}",
                     _rates(c.per_seed), str(sum(r.num_not_steady for r in c.per_seed))])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def _rates(results) -> str:
    """Offered and achieved rates at each seed's capacity, averaged over seeds."""
    pairs = [r.rates_at_capacity() for r in results]
    pairs = [(o, a) for o, a in pairs if o is not None and a is not None]
    if not pairs:
        return "-"
    offered, achieved = (sum(x) / len(pairs) for x in zip(*pairs))
    return f"{offered:.3g} -> {achieved:.3g}"


def write_capacity_csv(capacities, path: Path, unit: str) -> Path:
    from simulator.results.atomic import atomic_write

    def write(f) -> None:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["scenario", "scheduler", "seed", "capacity", "unit", "bounded",
                         "num_probes", "mean", "ci95_half_width", "offered_request_rate",
                         "achieved_request_rate", "num_not_steady"])
        for c in capacities:
            hw = "" if c.estimate.half_width is None else repr(c.estimate.half_width)
            for r in c.per_seed:
                offered, achieved = (("" if x is None else repr(x)) for x in r.rates_at_capacity())
                writer.writerow([c.scenario, c.scheduler, r.seed, repr(r.capacity), unit,
                                 str(r.bounded).lower(), len(r.probes), repr(c.estimate.mean), hw,
                                 offered, achieved, r.num_not_steady])
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, write)
    return path


def _plots(capacities, sweeps, out_dir: Path, unit: str, slos: dict) -> list[Path]:
    from simulator.plots.capacity_plot import plot_capacity
    from simulator.plots.result_dir import plot_sweep_csv
    paths = plot_capacity(capacities, out_dir / "capacity", unit, slos)
    for _, folder in sweeps:
        paths += plot_sweep_csv(folder)
    if len(sweeps) > 1:
        paths += plot_curves_together(sweeps, out_dir / "compare_curves")
    return paths


def plot_curves_together(sweeps: list[tuple[str, Path]], base: Path) -> list[Path]:
    """Every scheduler curve of every swept file on one throughput-vs-latency figure."""
    from simulator.plots.curves import plot_throughput_latency
    all_curves, slos = curves_together(sweeps)
    return plot_throughput_latency(all_curves, base, "compare", slos,
                                   load_key=shared_load_key(sweeps)) if all_curves else []


def shared_load_key(sweeps: list[tuple[str, Path]]) -> str | None:
    """The load axis every sweep ran along (the points' labels are its values), else None."""
    from simulator.plots.result_dir import sweep_meta
    from simulator.sweep.table import SWEEP_CSV, read_sweep_csv
    keys = {sweep_meta(folder, read_sweep_csv(folder / SWEEP_CSV)).get("load_key")
            for _, folder in sweeps}
    return keys.pop() if len(keys) == 1 else None


def curves_together(sweeps: list[tuple[str, Path]]) -> tuple[list, dict]:
    """The curves of each (scenario name, sweep folder), labelled ``name: scheduler``."""
    from simulator.plots.curves import sweep_curves
    from simulator.plots.result_dir import sweep_meta
    from simulator.sweep.table import SWEEP_CSV, read_sweep_csv
    all_curves, slos = [], {}
    for name, folder in sweeps:
        rows = read_sweep_csv(folder / SWEEP_CSV)
        meta = sweep_meta(folder, rows)
        slos = slos or meta.get("slos_ms") or {}
        if rows and meta.get("load_key"):
            for curve in sweep_curves(rows, meta["load_key"], meta["param_keys"]):
                curve.label = f"{name}: {curve.label}"
                all_curves.append(curve)
    return all_curves, slos
