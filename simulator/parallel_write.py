"""Write one result file in a forked child while the parent writes the others.

Formatting floats as text is most of the cost of writing a large run's results (``repr`` of each
distinct float), and it is single-threaded Python: on a machine with a second core, ``steps.csv``
can be formatted by a child process while the parent formats ``requests.csv``. The child is a
``fork`` of the parent, so it reads the step log where it lies (nothing is copied or pickled) and
writes its file through the same ``atomic_write``; the parent waits for it before the result
folder is put in place, and raises the child's error if it failed.

Only on Linux, where forking a process that has imported numpy is safe, from a process with no
other Python thread (a sweep worker's RPC threads could hold locks the child needs), and only for
logs long enough to pay for the fork; otherwise the file is written in the parent, as before.
"""
from __future__ import annotations

import os
import pickle
import sys
import threading
from typing import Callable

# Logs shorter than this are written in the parent: measured, a 69k-row log's files took 0.56 s
# in one process and 0.39 s with the child, a 110k-row log's 0.48 s and 0.25-0.40 s; shorter logs
# were not measured, and the fork's fixed cost weighs more on them.
MIN_PARALLEL_ROWS = 50_000


def start_writing(write: Callable[[], None], num_rows: int) -> Callable[[], None]:
    """Start ``write()``; returns ``finish()``, which waits for it and raises if it failed.

    ``finish`` must be called whatever happens to the parent meanwhile (``abandon`` on an
    error path), so that no child outlives the result folder it writes into."""
    if (num_rows < MIN_PARALLEL_ROWS or sys.platform != "linux" or os.cpu_count() == 1
            or threading.active_count() > 1):
        write()
        return lambda: None
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: write, report any error on the pipe, leave without cleanup
        os.close(read_fd)
        code = 0
        try:
            write()
        except BaseException as exc:   # noqa: BLE001 (sent to the parent, which raises it)
            _send_error(write_fd, exc)
            code = 1
        finally:
            os._exit(code)   # no atexit handlers or buffered output of the parent's: they are the parent's
    os.close(write_fd)
    return lambda: _finish(pid, read_fd)


def abandon(finish: Callable[[], None]) -> None:
    """Wait for a started write on an error path, ignoring its own outcome."""
    try:
        finish()
    except Exception:   # noqa: BLE001 (the parent's error is the one being raised)
        pass


def _send_error(fd: int, exc: BaseException) -> None:
    """The child's exception, pickled (its own type and message), or as text if it cannot be."""
    try:
        data = pickle.dumps(exc)
    except Exception:   # noqa: BLE001 (an unpicklable exception still reaches the parent as text)
        data = pickle.dumps(OSError(f"{type(exc).__name__}: {exc}"))
    with os.fdopen(fd, "wb") as pipe:
        pipe.write(data)


def _finish(pid: int, read_fd: int) -> None:
    with os.fdopen(read_fd, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        error = pickle.loads(data) if data else None
        raise error if isinstance(error, BaseException) else OSError(
            f"the process writing results ended with status {code}")
