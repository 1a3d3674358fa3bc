"""A scenario file read in a forked child while the main process imports what the run needs.

`servesim run` spends most of a short run importing: numpy alone takes ~110 ms on a 2-core VM,
and PyYAML ~25 ms, most of it compiling a regular expression that its C parser never uses. The
two are independent: the file's mapping (simulator/scenario_file.py: YAML, ``--set`` overrides)
needs no numpy, and validation needs no PyYAML. So where a second core and ``fork`` are there,
``ScenarioPrefetch`` forks a child (the process is small then: click and the CLI's own modules)
that reads the file and sends back its mapping, or the one-line error a user mistake gets, while
the main process imports numpy; the main process never imports PyYAML. Elsewhere, or if the
child fails in any other way, the file is read in the main process, as before: the mapping and
the errors are the same either way.
"""
from __future__ import annotations

import os
import pickle
from pathlib import Path

from simulator.parallel_write import can_fork, read_to_end, reap_later, write_all
from simulator.scenario_error import ScenarioError


class ScenarioPrefetch:
    """``raw()``: the mapping of ``path`` with ``overrides`` applied (``read_raw_scenario``'s),
    read by a child forked on creation where that is possible."""

    def __init__(self, path: Path, overrides: tuple[str, ...] = ()):
        self._path, self._overrides = Path(path), tuple(overrides)
        self._pid: int | None = None
        self._fd: int | None = None
        if can_fork():   # Linux, a second core to read on, no other thread
            read_fd, write_fd = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read_fd)
                _child(write_fd, self._path, self._overrides)   # does not return
            os.close(write_fd)
            self._pid, self._fd = pid, read_fd

    def raw(self) -> dict:
        """The mapping; a user mistake raises its ``ScenarioError``. Call once."""
        if self._fd is not None:
            answer = self._answer()
            if answer is not None:
                kind, value = answer
                if kind == "error":
                    raise ScenarioError(value)
                return value
        from simulator.scenario_file import read_raw_scenario
        return read_raw_scenario(self._path, self._overrides)

    def _answer(self) -> tuple[str, object] | None:
        """The child's ("raw", mapping) or ("error", message); None if it failed otherwise."""
        data = read_to_end(self._fd)
        os.close(self._fd)
        self._fd = None
        reap_later(self._pid)   # it has closed the pipe: exiting, not worth waiting for
        try:
            return pickle.loads(data)
        except Exception:   # noqa: BLE001 - nothing or a partial answer: read it here instead
            return None


def _child(fd: int, path: Path, overrides: tuple[str, ...]) -> None:
    """Read the file, send the answer, leave without the parent's exit handlers or buffers."""
    code = 0
    try:
        from simulator.scenario_file import read_raw_scenario
        try:
            answer = ("raw", read_raw_scenario(path, overrides))
        except ScenarioError as exc:
            answer = ("error", str(exc))
        write_all(fd, memoryview(pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)))
        os.close(fd)
    except BaseException:   # noqa: BLE001 - the parent reads the file itself
        code = 1
    finally:
        os._exit(code)
