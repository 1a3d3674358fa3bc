"""The Python API: ``simulator.run(scenario)`` runs a scenario file (or mapping) and returns each
scheduler's results as pandas DataFrames, as ``servesim run`` computes them.

    import simulator
    results = simulator.run("scenarios/static_vs_continuous.yaml", overrides=["seed=1"])
    v1 = results["vllm_v1"]
    v1.summary["p99_ttft_ms"], v1.requests["ttft_ms"].median(), v1.steps["num_running"].max()

Nothing is written unless ``out_dir`` is given; then the folders are those of ``servesim run
-o OUT_DIR --no-plots`` and the DataFrames are read back from them (``simulator.results.load``).
A user mistake raises ``ScenarioError`` (a ``ValueError``) with the one line the command prints.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from simulator.commands.run import ResultOptions, simulate_runs
from simulator.results.columns import REQUEST_COLUMNS
from simulator.results.files import request_file_columns, summary_json
from simulator.results.load import RunResults, load
from simulator.runner import prepare
from simulator.scenario import Scenario, load_scenario, validate_scenario
from simulator.scenario.file import apply_overrides


def run(scenario: str | os.PathLike | Mapping[str, Any], *, overrides: Sequence[str] = (),
        schedulers: Sequence[str] = (), out_dir: str | os.PathLike | None = None,
        save_detailed: bool = False) -> dict[str, RunResults]:
    """Simulate every scheduler of ``scenario`` (those named in ``schedulers``, in file order)
    on the same requests: ``{label: RunResults(requests, steps, summary)}``.

    ``scenario``: a scenario file's path, or its mapping (relative paths in it are read from
    the working directory). ``overrides``: ``--set`` items such as ``"workload.arrival.rate=12"``.
    ``out_dir``: write ``out_dir/<label>/`` as ``servesim run`` does. ``save_detailed``: the
    summary also carries vLLM's per-request lists (``--save-detailed``)."""
    prepared = prepare(_scenario(scenario, overrides), tuple(schedulers))
    folder = None if out_dir is None else Path(out_dir)
    options = ResultOptions(save_detailed=save_detailed)
    results = {}
    for output in simulate_runs(prepared, folder, options):
        results[output.label] = (load(folder / output.label) if folder is not None
                                 else _in_memory(output))
    return results


def _scenario(scenario, overrides: Sequence[str]) -> Scenario:
    if isinstance(scenario, Mapping):
        return validate_scenario(apply_overrides(dict(scenario), overrides))
    return load_scenario(scenario, list(overrides))


def _in_memory(output) -> RunResults:
    """The DataFrames ``load`` would read from the run's files, from its tables in memory."""
    import pandas as pd
    columns = request_file_columns(output.requests.arrays())
    requests = pd.DataFrame({name: columns[name] for name in REQUEST_COLUMNS})
    steps = pd.DataFrame(output.steps.to_columns(), columns=list(output.steps.columns))
    # Through JSON, as summary.json holds it: "inf" for infinity, lists for arrays.
    return RunResults(requests, steps, json.loads(summary_json(output.summary)))
