"""Reading a result folder back: ``simulator.results.load(DIR)``."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from simulator.results.columns import REQUEST_COLUMNS, ALL_STEP_DTYPES
from simulator.results.files import FORMATS, REQUESTS, STEPS, SUMMARY_JSON

_INT_REQUEST_COLUMNS = ("request_id", "num_prompt_tokens", "num_output_tokens", "num_preemptions",
                        "num_cached_tokens")


@dataclass(frozen=True, eq=False)
class RunResults:
    """One scheduler's results: ``requests`` and ``steps`` as pandas DataFrames, the summary."""
    requests: object
    steps: object
    summary: dict


def load(result_dir: str | os.PathLike) -> RunResults:
    """The results of one scheduler's folder (``results/<scenario>/<scheduler>``), CSV or
    Parquet, with the column types as written (counts int64, times and KV usage float64)."""
    import pandas as pd
    folder = Path(result_dir)
    summary = json.loads((folder / SUMMARY_JSON).read_text(encoding="utf-8"))
    file_format = next((f for f in FORMATS if (folder / f"{REQUESTS}.{f}").exists()), None)
    if file_format is None:
        raise FileNotFoundError(f"{folder}: no {REQUESTS}.csv or {REQUESTS}.parquet")
    request_types = {name: "int64" if name in _INT_REQUEST_COLUMNS else "float64" for name in REQUEST_COLUMNS}
    step_types = {name: dtype.__name__ for name, dtype in ALL_STEP_DTYPES.items()}
    if file_format == "csv":
        requests = pd.read_csv(folder / f"{REQUESTS}.csv", dtype=request_types)
        steps = pd.read_csv(folder / f"{STEPS}.csv", dtype=step_types)
    else:
        requests = pd.read_parquet(folder / f"{REQUESTS}.parquet").astype(request_types)
        steps = pd.read_parquet(folder / f"{STEPS}.parquet")
        steps = steps.astype({name: t for name, t in step_types.items() if name in steps})
    return RunResults(requests, steps, summary)
