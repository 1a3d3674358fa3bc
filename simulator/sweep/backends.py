"""Where sweep runs execute: this process, a local process pool, or a Ray cluster.

A backend maps a module-level function over argument tuples and yields ``(index, result)`` as
each task finishes, in completion order; callers put results back in plan order themselves, so
every backend writes the same bytes. ``share(obj)`` hands a large object (a prepared workload) to
the backend once so that many tasks can use it: Ray stores it in its object store; the local
pool pickles it per task, which is cheap next to a simulation.
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

BACKENDS = ("local", "ray")
RAY_FIRST_TASK_TIMEOUT_S = 120.0   # a Ray whose workers cannot start would otherwise wait forever
_REPO_ROOT = str(Path(__file__).resolve().parents[2])


class BackendError(ValueError):
    """A backend that cannot start (Ray missing or unreachable): one line for the user."""


class LocalBackend:
    """``workers`` processes (spawned, so no state leaks from the parent); 1 runs in-process."""

    def __init__(self, workers: int | None = None):
        self.workers = max(1, workers or os.cpu_count() or 1)
        self._pool: cf.ProcessPoolExecutor | None = None

    def __enter__(self) -> "LocalBackend":
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=exc[0] is None, cancel_futures=True)

    def share(self, obj: Any) -> Any:
        return obj

    def map_unordered(self, fn: Callable, tasks: Sequence[tuple]) -> Iterator[tuple[int, Any]]:
        if self.workers == 1 or len(tasks) <= 1:
            for i, args in enumerate(tasks):
                yield i, fn(*args)
            return
        if self._pool is None:   # started on first use, no bigger than the work
            self._pool = cf.ProcessPoolExecutor(min(self.workers, len(tasks)),
                                                mp_context=multiprocessing.get_context("spawn"),
                                                initializer=exit_with_parent, initargs=(os.getpid(),))
        futures = {self._pool.submit(fn, *args): i for i, args in enumerate(tasks)}
        for future in cf.as_completed(futures):
            yield futures[future], future.result()


def exit_with_parent(parent_pid: int) -> None:
    """A pool worker's initializer: leave as soon as the sweep's process is gone (killed by a
    signal it could not catch), instead of finishing its point for no one."""
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.2)
        os._exit(1)
    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


class RayBackend:
    """Ray tasks: a new local instance (``address`` None) or an existing cluster (``auto`` or
    ``ray://host:port``). Workers of a cluster need servesim installed; a local instance is given
    this checkout on its PYTHONPATH."""

    def __init__(self, address: str | None = None, workers: int | None = None):
        self.address = address
        self.workers = workers
        self._ray = None
        self._started = False

    def __enter__(self) -> "RayBackend":
        try:
            import ray
        except ImportError:
            raise BackendError("backend ray: Ray is not installed; pip install 'servesim[ray]' "
                               "(or use --backend local)") from None
        self._ray = ray
        if not ray.is_initialized():
            self._started = True
            try:
                ray.init(**self._init_args())
            except Exception as exc:  # Ray raises many types; the user needs the one line
                raise BackendError(f"backend ray: cannot start or reach Ray at "
                                   f"{self.address or 'a new local instance'} "
                                   f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
                                   ) from None
        self._check_runs_tasks()
        return self

    def _check_runs_tasks(self) -> None:
        """One trivial task, bounded in time: Ray can start yet never run a worker (a sandbox
        that blocks its processes or sockets), and the sweep's tasks would then wait forever."""
        ray = self._ray
        try:
            ray.get(ray.remote(_ready).remote(), timeout=RAY_FIRST_TASK_TIMEOUT_S)
        except Exception as exc:  # GetTimeoutError or a worker that died at start
            if self._started:
                ray.shutdown()
            raise BackendError(f"backend ray: Ray started but ran no task within "
                               f"{RAY_FIRST_TASK_TIMEOUT_S:g} s ({type(exc).__name__}); "
                               f"use --backend local") from None

    def _init_args(self) -> dict:
        args: dict[str, Any] = {"address": self.address, "log_to_driver": False,
                                "ignore_reinit_error": True}
        if self.address is None:
            path = os.pathsep.join(p for p in (_REPO_ROOT, os.environ.get("PYTHONPATH")) if p)
            args.update(include_dashboard=False, num_cpus=self.workers,
                        runtime_env={"env_vars": {"PYTHONPATH": path}})
        return args

    def __exit__(self, *exc) -> None:
        if self._started:
            self._ray.shutdown()

    def share(self, obj: Any) -> Any:
        return self._ray.put(obj)

    def map_unordered(self, fn: Callable, tasks: Sequence[tuple]) -> Iterator[tuple[int, Any]]:
        ray = self._ray
        remote = ray.remote(fn)
        pending = {remote.remote(*args): i for i, args in enumerate(tasks)}
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                yield pending.pop(done[0]), ray.get(done[0])
        finally:
            for ref in pending:
                ray.cancel(ref)


def _ready() -> bool:
    return True


def make_backend(name: str, workers: int | None = None, address: str | None = None):
    if name == "local":
        if address is not None:
            raise BackendError("--address: only used with --backend ray")
        return LocalBackend(workers)
    if name == "ray":
        return RayBackend(address, workers)
    raise BackendError(f"--backend: {name!r} is not one of {', '.join(BACKENDS)}")
