"""A workload as a table of requests (``WorkloadTrace``); trace files are read by
``TraceArrivals`` (simulator/workload/kinds/trace.py).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from simulator.core.request import Request
from simulator.workload.lengths import invalid


def _frozen_array(values: Any, dtype: type) -> np.ndarray:
    array = np.array(values, dtype=dtype)  # a copy: callers cannot mutate it behind our back
    array.setflags(write=False)
    return array


@dataclass(frozen=True, eq=False, repr=False)
class WorkloadTrace:
    """Requests in arrival order, as columns. Read-only; compare runs with ``fingerprint()``."""

    arrival_s: np.ndarray                      # float64, sorted
    num_prompt_tokens: np.ndarray              # int64, >= 1
    max_output_tokens: np.ndarray              # int64, >= 1
    prompt_token_ids: tuple[tuple[int, ...], ...] | None = None
    priority: np.ndarray | None = None         # int64; None: every request has priority 0
    max_concurrency: int | None = None         # vLLM bench's client-side semaphore; None: unlimited

    def __post_init__(self) -> None:
        set_ = functools.partial(object.__setattr__, self)
        set_("arrival_s", _frozen_array(self.arrival_s, np.float64))
        set_("num_prompt_tokens", _frozen_array(self.num_prompt_tokens, np.int64))
        set_("max_output_tokens", _frozen_array(self.max_output_tokens, np.int64))
        if self.priority is not None:
            set_("priority", _frozen_array(self.priority, np.int64))
        if self.prompt_token_ids is not None:
            set_("prompt_token_ids", tuple(ids if isinstance(ids, tuple) else tuple(int(t) for t in ids)
                                           for ids in self.prompt_token_ids))
        self._validate()

    def _validate(self) -> None:
        n = self.arrival_s.size
        columns = {"num_prompt_tokens": self.num_prompt_tokens, "max_output_tokens": self.max_output_tokens}
        if self.priority is not None:
            columns["priority"] = self.priority
        for name, column in columns.items():
            if column.ndim != 1 or column.size != n:
                raise ValueError(f"WorkloadTrace.{name}: {column.size} values for {n} arrivals")
        if self.prompt_token_ids is not None and len(self.prompt_token_ids) != n:
            raise ValueError(f"WorkloadTrace.prompt_token_ids: {len(self.prompt_token_ids)} rows "
                             f"for {n} arrivals")
        if n and not (np.all(np.isfinite(self.arrival_s)) and np.all(np.diff(self.arrival_s) >= 0)):
            raise ValueError("WorkloadTrace.arrival_s: must be finite and sorted ascending")
        for name in ("num_prompt_tokens", "max_output_tokens"):
            if n and columns[name].min() < 1:
                raise invalid(f"WorkloadTrace.{name}", int(columns[name].min()), "token counts >= 1")
        if self.max_concurrency is not None and not (isinstance(self.max_concurrency, int)
                                                     and self.max_concurrency >= 1):
            raise invalid("WorkloadTrace.max_concurrency", self.max_concurrency, "an integer >= 1 or None")

    def __len__(self) -> int:
        return int(self.arrival_s.size)

    def fingerprint(self) -> str:
        """sha256 over every column's bytes (with names and sizes, so columns cannot alias)."""
        import hashlib  # on use: loading OpenSSL is ~8 ms of a run's start-up, and a run needs none
        digest = hashlib.sha256()
        parts = [("arrival_s", self.arrival_s), ("num_prompt_tokens", self.num_prompt_tokens),
                 ("max_output_tokens", self.max_output_tokens)]
        if self.priority is not None:
            parts.append(("priority", self.priority))
        if self.prompt_token_ids is not None:
            sizes = np.fromiter((len(ids) for ids in self.prompt_token_ids), np.int64, len(self))
            flat = np.fromiter((t for ids in self.prompt_token_ids for t in ids), np.int64, int(sizes.sum()))
            parts += [("prompt_token_ids.sizes", sizes), ("prompt_token_ids", flat)]
        for name, array in parts:
            digest.update(f"{name}:{array.dtype.str}:{array.size};".encode())
            digest.update(np.ascontiguousarray(array).tobytes())
        digest.update(f"max_concurrency:{self.max_concurrency}".encode())
        return digest.hexdigest()

    def slice(self, start: int | None = None, stop: int | None = None) -> WorkloadTrace:
        """Requests ``start:stop`` (arrival times unchanged)."""
        rows = slice(start, stop)
        return WorkloadTrace(
            self.arrival_s[rows], self.num_prompt_tokens[rows], self.max_output_tokens[rows],
            None if self.prompt_token_ids is None else self.prompt_token_ids[rows],
            None if self.priority is None else self.priority[rows], self.max_concurrency)

    def head(self, n: int) -> WorkloadTrace:
        """The first ``n`` requests."""
        return self.slice(0, n)

    def until(self, end_s: float) -> WorkloadTrace:
        """The requests arriving at or before ``end_s``."""
        return self.head(int(np.searchsorted(self.arrival_s, end_s, side="right")))

    def to_requests(self) -> list[Request]:
        """One fresh ``Request`` per row; ``request_id`` is the row index."""
        ids = self.prompt_token_ids or (None,) * len(self)
        priority = self.priority.tolist() if self.priority is not None else [0] * len(self)
        rows = zip(self.arrival_s.tolist(), self.num_prompt_tokens.tolist(), self.max_output_tokens.tolist(),
                   ids, priority)
        return [Request(i, *row) for i, row in enumerate(rows)]
