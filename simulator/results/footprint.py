"""A run's memory for its requests, checked against this machine before anything is drawn.

Each request holds at least its workload row (arrival, prompt and output lengths, priority) and
its row of the result table's columns, 8 bytes a field, and a prefix-caching KV pool a table
entry per block; a run that cannot hold even these is refused with the field that asks for it,
instead of failing inside numpy (or the OS) later, and before any scheduler's files are written.
"""
from __future__ import annotations

import os

from simulator.results.columns import REQUEST_FIELDS

WORKLOAD_FIELDS = 4   # arrival_s, num_prompt_tokens, max_output_tokens, priority
BYTES_PER_REQUEST = 8 * (len(REQUEST_FIELDS) + WORKLOAD_FIELDS)


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


def check_requests_fit_memory(num_requests: float | None, source: str | None = None) -> None:
    """Raise ValueError naming the field that asks for ``num_requests`` (``source``; default
    ``workload.num_requests``) when their columns alone exceed what is available."""
    if num_requests is None:
        return
    need, have = num_requests * BYTES_PER_REQUEST, available_bytes()
    if have is not None and need > have:
        source = source or f"workload.num_requests: {num_requests}"
        raise ValueError(f"{source} needs at least {need / 1e9:.3g} GB "
                         f"for its request columns ({BYTES_PER_REQUEST} bytes each); this machine "
                         f"has {have / 1e9:.3g} GB available")


def check_blocks_fit_memory(num_gpu_blocks: int, bytes_per_block: int, label: str,
                            num_replicas: int = 1) -> None:
    """Raise ValueError naming ``engine.num_gpu_blocks`` when the KV pools' block tables (one a
    replica, ``bytes_per_block`` each: the pool class's TABLE_BYTES_PER_BLOCK) alone exceed what
    is available."""
    need, have = num_replicas * num_gpu_blocks * bytes_per_block, available_bytes()
    if have is not None and need > have:
        each = f" x {num_replicas} replicas" if num_replicas > 1 else ""
        raise ValueError(f"engine.num_gpu_blocks: {num_gpu_blocks}{each} needs at least "
                         f"{need / 1e9:.3g} GB for {label}'s prefix-cache block table "
                         f"({bytes_per_block} bytes a block); this machine has "
                         f"{have / 1e9:.3g} GB available")
