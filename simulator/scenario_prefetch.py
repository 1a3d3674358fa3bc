"""A scenario file read, and its workload drawn, by a forked child while the main process imports
what the run needs.

`servesim run` spends most of a short run importing: numpy alone takes ~110 ms on a 2-core VM,
PyYAML ~25 ms (most of it compiling a regular expression its C parser never uses) and
``numpy.random`` ~20 ms (it loads OpenSSL through ``secrets``). The file's mapping
(simulator/scenario_file.py: YAML, ``--set`` overrides) needs no numpy, and validation needs no
PyYAML. So where a second core and ``fork`` are there, ``ScenarioPrefetch`` has a child read the
file and send back its mapping, or the one-line error a user mistake gets, while the main process
imports numpy; the child then draws the workload (``numpy.random``, the run's seeded generator)
while the main process validates the file and builds the cost model and the schedulers. The main
process never imports PyYAML or ``numpy.random``.

The child pays only if it is done first, and the file's path is known only once click has parsed
the command line. So the `servesim run` process forks it before anything else loads
(``start_early``, from simulator/cli.py): it imports PyYAML while the main process imports click,
then waits for the path. It draws only a workload of at most ``MAX_DRAWN_REQUESTS`` requests.
Elsewhere (``servesim run`` called in process) ``ScenarioPrefetch`` forks a child that only reads
the file: forked that late, it would draw the workload after the main process needs it. Whole
1,000-request peer `sarathi` runs, medians of 50 and 40 interleaved, without and with the early
child drawing the workload: 0.501 -> 0.462 s and 0.514 -> 0.487 s (main-process instructions
0.918G -> 0.887G).

The main process uses the child's workload only if the child drew it from the same workload spec
and seed as the main process's own validation gave (the child builds the scenario by
simulator/scenario.py's quick path, ``quick_scenario``); otherwise, where no child can be forked,
or if the child fails in any way, the main process reads the file and draws the workload itself:
the mapping, the errors and the trace are the same either way (tests/test_scenario_prefetch.py).
"""
from __future__ import annotations

import os
import pickle
from pathlib import Path

from simulator.blas_threads import single_threaded_blas
from simulator.parallel_write import can_fork, read_to_end, reap_later, write_all
from simulator.scenario_error import ScenarioError

_early: "_Child | None" = None   # the child start_early forked, until a ScenarioPrefetch takes it
# The child draws a workload of at most this many requests (given as ``num_requests``; not a
# trace). A larger one costs the child more to draw and send than the main process saves: at
# 100,000 vLLM V1 requests of lognormal lengths the main process waited 12-87 ms for it, against
# 29-42 ms to load numpy.random and draw them itself, at 1,000,000 280-380 ms against 160-230 ms;
# at 10,000 peer requests 1-18 ms against 22-23 ms.
MAX_DRAWN_REQUESTS = 10_000


def start_early() -> None:
    """Fork the child now, before the command line is parsed, where that is possible: the first
    ``ScenarioPrefetch`` of this process gives it its file. A process that never creates one
    leaves it waiting on a pipe that closes when the process ends: it then exits."""
    global _early
    if _early is None and can_fork():
        _early = _Child(draw=True)


class ScenarioPrefetch:
    """``raw()``: the mapping of ``path`` with ``overrides`` applied (``read_raw_scenario``'s),
    read by the child where there is one. ``workload(spec, seed)``: the trace the child drew, if
    it drew it for that spec and seed."""

    def __init__(self, path: Path, overrides: tuple[str, ...] = ()):
        global _early
        self._path, self._overrides = Path(path), tuple(overrides)
        child, _early = _early, None
        if child is None and can_fork():   # Linux, a second core to read on, no other thread
            child = _Child(draw=False)   # forked this late, it would draw after the caller needs it
        self._child = child
        if child is not None:
            child.send_job(self._path, self._overrides)

    def raw(self) -> dict:
        """The mapping; a user mistake raises its ``ScenarioError``. Call once."""
        answer = self._child.raw_answer() if self._child is not None else None
        if answer is not None:
            kind, value = answer
            if kind == "error":
                raise ScenarioError(value)
            return value
        from simulator.scenario_file import read_raw_scenario
        return read_raw_scenario(self._path, self._overrides)

    def workload(self, spec, seed: int):
        """The child's trace if it drew it from ``spec`` and ``seed`` (the validated scenario's
        workload and seed), else None: the caller draws it. Call once, after ``raw``."""
        answer = self._child.workload_answer() if self._child is not None else None
        if answer is None:
            return None
        drawn_spec, drawn_seed, trace = answer
        return trace if (drawn_spec, drawn_seed) == (spec, seed) else None

    def close(self) -> None:
        """Let the child go, whatever it was still to send (a user mistake found first)."""
        if self._child is not None:
            self._child.close()


class _Child:
    """The forked child and the three pipes to it: the job (the file) in, the mapping out, the
    workload out."""

    def __init__(self, draw: bool) -> None:
        job_read, self._job_fd = os.pipe()
        self._raw_fd, raw_write = os.pipe()
        self._workload_fd, workload_write = os.pipe()
        pid = os.fork()
        if pid == 0:
            for fd in (self._job_fd, self._raw_fd, self._workload_fd):
                os.close(fd)
            _child(job_read, raw_write, workload_write if draw else None)   # does not return
        for fd in (job_read, raw_write, workload_write):
            os.close(fd)
        self._pid: int | None = pid

    def send_job(self, path: Path, overrides: tuple[str, ...]) -> None:
        try:
            write_all(self._job_fd, memoryview(pickle.dumps((path, overrides))))
        except OSError:   # the child is gone: the answers are empty, the parent reads itself
            pass
        os.close(self._job_fd)

    def raw_answer(self) -> tuple[str, object] | None:
        """("raw", mapping) or ("error", message); None if the child failed otherwise."""
        answer, self._raw_fd = _read_answer(self._raw_fd), None
        return answer

    def workload_answer(self) -> tuple | None:
        """(workload spec, seed, trace); None if the child drew none."""
        answer, self._workload_fd = _read_answer(self._workload_fd), None
        self.close()
        return answer

    def close(self) -> None:
        """Close the pipes still open (a child still writing gets EPIPE and exits) and reap the
        child once it has exited: not worth waiting for while the kernel takes its memory."""
        for fd in (self._raw_fd, self._workload_fd):
            if fd is not None:
                os.close(fd)
        self._raw_fd = self._workload_fd = None
        if self._pid is not None:
            reap_later(self._pid)
            self._pid = None


def _read_answer(fd: int | None):
    if fd is None:
        return None
    data = read_to_end(fd)
    os.close(fd)
    try:
        return pickle.loads(data)
    except Exception:   # noqa: BLE001 - nothing or a partial answer: the parent does it itself
        return None


def _child(job_fd: int, raw_fd: int, workload_fd: int | None) -> None:
    """Wait for the file, read it, send the mapping, draw the workload (given ``workload_fd``),
    send it; leave without the parent's exit handlers or buffers."""
    import gc
    gc.disable()   # a short life making objects that all live on
    code = 0
    try:
        from simulator.scenario_file import read_raw_scenario   # PyYAML, while the job comes
        job = read_to_end(job_fd)
        os.close(job_fd)
        if not job:   # the parent never sent one: it left, or did not run a scenario
            return
        path, overrides = pickle.loads(job)
        try:
            answer = ("raw", read_raw_scenario(path, overrides))
        except ScenarioError as exc:
            answer = ("error", str(exc))
        _send(raw_fd, answer)
        if answer[0] == "raw" and workload_fd is not None:
            _draw_workload(workload_fd, answer[1], path.parent)
    except BaseException:   # noqa: BLE001 - the parent does it itself
        code = 1
    finally:
        os._exit(code)


def _draw_workload(fd: int, raw: dict, base_dir: Path) -> None:
    """The workload of the file's scenario, with its spec and seed for the parent to check,
    where the file is plainly valid and the workload small (else none: the parent draws it)."""
    single_threaded_blas()
    from simulator.scenario import quick_scenario
    scenario = quick_scenario(raw, base_dir)
    if scenario is None:
        return
    spec = scenario.workload
    if spec.is_trace or spec.num_requests is None or spec.num_requests > MAX_DRAWN_REQUESTS:
        return
    from simulator.workload.generate import generate_seeded_workload
    _send(fd, (spec, scenario.seed, generate_seeded_workload(spec, scenario.seed)))


def _send(fd: int, answer: object) -> None:
    write_all(fd, memoryview(pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)))
    os.close(fd)
