"""A run's memory, checked against a limit (this machine's available memory, or
``--max-memory-gb``) before anything is drawn and again once the workload is.

Each request holds at least its workload row (arrival, prompt and output lengths, priority) and
its row of the result table's columns, 8 bytes a field; a prefix-caching KV pool a table entry per
block; with ``metrics.record_itl_gaps`` every inter-token gap; and the step log a window of rows
(simulator/results/step_table.py keeps a bounded one, however long the run). A run that cannot
hold even these is refused with the field that asks for it, instead of failing inside numpy (or
the OS) later, and before any scheduler's files are written.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from simulator.results.columns import REQUEST_FIELDS, STEP_DTYPES, STEP_SERIES
from simulator.results.step_table import MAX_PLOT_ROWS, WINDOW_ROWS

WORKLOAD_FIELDS = 4   # arrival_s, num_prompt_tokens, max_output_tokens, priority
BYTES_PER_REQUEST = 8 * (len(REQUEST_FIELDS) + WORKLOAD_FIELDS)
# A kept gap is a list slot and a float object while the run lasts, then a float64 for its summary.
BYTES_PER_GAP = 8 + 24 + 8
STEP_ROW_BYTES = sum(np.dtype(STEP_DTYPES[name]).itemsize for name in STEP_SERIES)
MAX_STEP_LOG_ROWS = WINDOW_ROWS + MAX_PLOT_ROWS   # the most rows the step table keeps


@dataclass(frozen=True)
class MemoryLimit:
    """The bytes a run may take (None: unknown, nothing is checked) and how to say where the
    limit comes from."""
    limit_bytes: int | None
    source: str

    @classmethod
    def of(cls, max_memory_gb: float | None = None) -> "MemoryLimit":
        """``--max-memory-gb`` when given (decimal GB), else what this machine has available."""
        if max_memory_gb is not None:
            return cls(int(max_memory_gb * 1e9), f"--max-memory-gb is {max_memory_gb:g}")
        have = available_bytes()
        return cls(have, f"this machine has {have / 1e9:.3g} GB available" if have else "")

    def exceeded_by(self, need_bytes: float) -> bool:
        return self.limit_bytes is not None and need_bytes > self.limit_bytes


def available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (free plus reclaimable cache); None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_requests_fit_memory(num_requests: float | None, source: str | None = None,
                              limit: MemoryLimit | None = None) -> None:
    """Raise ValueError naming the field that asks for ``num_requests`` (``source``; default
    ``workload.num_requests``) when their columns alone exceed the limit."""
    if num_requests is None:
        return
    limit = limit or MemoryLimit.of()
    need = num_requests * BYTES_PER_REQUEST
    if limit.exceeded_by(need):
        source = source or f"workload.num_requests: {num_requests}"
        raise ValueError(f"{source} needs at least {need / 1e9:.3g} GB "
                         f"for its request columns ({BYTES_PER_REQUEST} bytes each); "
                         f"{limit.source}")


def check_blocks_fit_memory(num_gpu_blocks: int, bytes_per_block: int, label: str,
                            num_replicas: int = 1, limit: MemoryLimit | None = None) -> None:
    """Raise ValueError naming ``engine.num_gpu_blocks`` when the KV pools' block tables (one a
    replica, ``bytes_per_block`` each: the pool class's TABLE_BYTES_PER_BLOCK) alone exceed the
    limit."""
    limit = limit or MemoryLimit.of()
    need = num_replicas * num_gpu_blocks * bytes_per_block
    if limit.exceeded_by(need):
        each = f" x {num_replicas} replicas" if num_replicas > 1 else ""
        raise ValueError(f"engine.num_gpu_blocks: {num_gpu_blocks}{each} needs at least "
                         f"{need / 1e9:.3g} GB for {label}'s prefix-cache block table "
                         f"({bytes_per_block} bytes a block); {limit.source}")


def check_run_fits_memory(num_requests: int, max_output_tokens: np.ndarray, keep_gaps: bool,
                          limit: MemoryLimit | None = None) -> None:
    """Once the workload is drawn: its request columns, its inter-token gaps where they are kept
    (one fewer than each request's output tokens, at most) and the step log's rows (at least one
    step per output token of the longest request, at most what the step table keeps). Raise
    ValueError naming ``metrics.record_itl_gaps`` when the gaps tip it over the limit."""
    limit = limit or MemoryLimit.of()
    num_step_rows = min(int(max_output_tokens.max(initial=0)), MAX_STEP_LOG_ROWS)
    base = num_requests * BYTES_PER_REQUEST + num_step_rows * STEP_ROW_BYTES
    num_gaps = int(np.maximum(max_output_tokens - 1, 0).sum()) if keep_gaps else 0
    need = base + num_gaps * BYTES_PER_GAP
    if limit.exceeded_by(need) and not limit.exceeded_by(base):
        raise ValueError(f"metrics.record_itl_gaps: true keeps up to {num_gaps} inter-token gaps "
                         f"({BYTES_PER_GAP} bytes each), {need / 1e9:.3g} GB with the request "
                         f"columns and step log; {limit.source}; set it to false (ITL mean and "
                         f"std stay exact; its percentiles are not kept)")
    if limit.exceeded_by(need):
        raise ValueError(f"workload: {num_requests} requests need at least {need / 1e9:.3g} GB "
                         f"for their request columns and the step log; {limit.source}")
