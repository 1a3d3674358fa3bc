"""A forked helper process that writes results alongside the parent, and the pipes they share.

Formatting floats as text is most of the cost of writing a large run's results (``repr`` of each
distinct float), and it is single-threaded Python, so on a machine with a second core a forked
child does part of it: ``Helper`` forks and runs a job that reads objects the parent sends over a
pipe, and reports its own exception back when it fails. Arrays travel as their raw bytes (pickle
protocol 5 with out-of-band buffers: only a small description of each object is pickled).
``PieceDealer`` shares a table's pieces between the two processes without a lock server.

Only on Linux, where forking a process that has imported numpy is safe, from a process with no
other Python thread (a sweep worker's RPC threads could hold locks the child needs), and with a
second core; otherwise callers write in the parent, as before.
"""
from __future__ import annotations

import fcntl
import os
import pickle
import select
import struct
import sys
import tempfile
import threading
from typing import Any, Callable

_PIPE_BYTES = 1 << 20   # a step-log chunk (8,192 rows, 720 kB) fits: the parent rarely waits
_PR_SET_PDEATHSIG = 1
_SPILLED = (1 << 64) - 1   # a frame's buffer count meaning "in the spill file, at this offset"
_DONE = b"done"   # the child's report once its job has succeeded (a failure's is a pickle)
_leaving: list[int] = []   # children done with their job, perhaps still exiting: reaped later


def can_fork() -> bool:
    """Whether a helper may be forked here (see the module's docstring)."""
    return (sys.platform == "linux" and (os.cpu_count() or 1) > 1
            and threading.active_count() == 1)


class Inbox:
    """The child's end of the pipe: ``receive()`` gives the objects ``Helper.send`` sent."""

    def __init__(self, fd: int, spill_fd: int):
        self._fd, self._spill_fd = fd, spill_fd

    def receive(self) -> Any:
        return self._decode(lambda num_bytes: _read_exactly(self._fd, num_bytes))

    def _decode(self, read: Callable[[int], bytearray]) -> Any:
        num_buffers, head_bytes = struct.unpack("<QQ", read(16))
        if num_buffers == _SPILLED:   # the object lies in the spill file, from offset head_bytes
            return self._decode(_spill_reader(self._spill_fd, head_bytes))
        sizes = struct.unpack(f"<{num_buffers}Q", read(8 * num_buffers))
        head = read(head_bytes)
        return pickle.loads(head, buffers=[read(n) for n in sizes])


class Helper:
    """A forked child running ``job(inbox)``. The parent must end it, whatever happens: ``wait``
    (raises the child's own exception if it failed) or, on an error path, ``kill``."""

    def __init__(self, job: Callable[[Inbox], None]):
        reap_leaving()
        data_r, data_w = os.pipe()
        status_r, status_w = os.pipe()
        _widen(data_w)
        self._spill_fd, self._spill_end = _spill_file(), 0
        parent = os.getpid()
        try:
            pid = os.fork()
        except BaseException:
            for fd in (data_r, data_w, status_r, status_w, self._spill_fd):
                os.close(fd)
            raise
        if pid == 0:
            os.close(data_w)
            os.close(status_r)
            _run_child(job, Inbox(data_r, self._spill_fd), status_w, parent)
        os.close(data_r)
        os.close(status_w)
        self._pid: int | None = pid
        self._data_w: int | None = data_w
        self.status_fd = status_r   # readable once the child has ended (or is about to)

    def send(self, obj: Any, spill: bool = False) -> None:
        """Hand ``obj`` to the child; if the child has failed, raise its exception instead.
        ``spill``: put it in a shared in-memory file and only a note of where in the pipe, so
        the parent never waits for a busy child to read it (the file grows until ``wait``)."""
        parts = _encode(obj)
        if spill:
            offset = self._spill_end
            self._spill_end = _pwrite_all(self._spill_fd, parts, offset)
            parts = [struct.pack("<QQ", _SPILLED, offset)]
        try:
            for part in parts:
                write_all(self._data_w, memoryview(part))
        except BrokenPipeError:
            self.wait()   # the child has ended: its exception says why
            raise

    def wait(self) -> None:
        """Wait for the child to end its job; raise its exception if it failed. A child that
        succeeded is not waited for while it exits (the kernel taking back a forked process's
        memory takes milliseconds): it is reaped later (``reap_leaving``)."""
        self._close_data()
        report = read_to_end(self.status_fd)
        os.close(self.status_fd)
        if report == _DONE:
            reap_later(self._pid)
            self._pid = None
            return
        code = self._reap()
        if code != 0:
            error = pickle.loads(report) if report else None
            raise error if isinstance(error, BaseException) else OSError(
                f"the process writing results ended with status {code}")
        raise OSError("the process writing results ended without saying it had finished")

    def kill(self) -> None:
        """End the child now, if still there (an error path: its outcome no longer matters)."""
        self._close_data()
        if self._pid is not None:
            import signal   # here, an error path: its enums are ~0.25% of a 1k run's instructions
            os.kill(self._pid, signal.SIGKILL)
            os.close(self.status_fd)
            self._reap()

    def _reap(self) -> int:
        _, status = os.waitpid(self._pid, 0)
        self._pid = None
        return os.waitstatus_to_exitcode(status)

    def _close_data(self) -> None:
        if self._data_w is not None:
            os.close(self._data_w)
            os.close(self._spill_fd)
            self._data_w = None


class PieceDealer:
    """Pieces 0..n-1 of a table shared by two processes, one taking from the front, the other
    from the back, until they meet. A pipe holds a single token, (next front, next back): whoever
    reads it owns that state until writing it back. Create it before forking."""

    _TOKEN = struct.Struct("<qq")

    def __init__(self) -> None:
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)   # both wait in select: a lost race just retries

    def deal(self, num_pieces: int) -> None:
        os.write(self._write_fd, self._TOKEN.pack(0, num_pieces))

    def take_front(self, watch_fd: int | None = None) -> int | None:
        """The next front piece, or None when none is left or ``watch_fd`` is readable (the
        other process's status pipe: it ends only when no piece is left, or on a failure)."""
        return self._take(lambda front, back: (front, front + 1, back), watch_fd)

    def take_back(self, watch_fd: int | None = None) -> int | None:
        return self._take(lambda front, back: (back - 1, front, back - 1), watch_fd)

    def close(self) -> None:
        os.close(self._read_fd)
        os.close(self._write_fd)

    def _take(self, claim: Callable, watch_fd: int | None) -> int | None:
        token = self._acquire(watch_fd)
        if token is None:
            return None
        front, back = token
        piece, front, back = claim(front, back) if front < back else (None, front, back)
        os.write(self._write_fd, self._TOKEN.pack(front, back))
        return piece

    def _acquire(self, watch_fd: int | None) -> tuple[int, int] | None:
        watched = [self._read_fd] if watch_fd is None else [self._read_fd, watch_fd]
        while True:
            ready = select.select(watched, [], [])[0]
            if watch_fd in ready:   # the other process has ended: with no piece left, or failed
                return None
            try:
                return self._TOKEN.unpack(os.read(self._read_fd, self._TOKEN.size))
            except BlockingIOError:   # the other process took it first
                continue


def _run_child(job: Callable[[Inbox], None], inbox: Inbox, status_fd: int, parent: int) -> None:
    """The child's whole life: run the job, report any exception, leave without the parent's
    cleanup (atexit handlers, buffered output and ``finally`` blocks are the parent's)."""
    code = 0
    try:
        import signal   # here: the parent of a run that goes well never needs the module
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the parent's to handle
        _die_with_parent(parent)
        job(inbox)
        os.write(status_fd, _DONE)
        os.close(status_fd)   # the parent reads to the end of the pipe: it goes on now
    except BaseException as exc:   # noqa: BLE001 (sent to the parent, which raises it)
        _send_error(status_fd, exc)
        code = 1
    finally:
        os._exit(code)


def reap_later(pid: int) -> None:
    """Reap child ``pid`` now if it has exited, else once it has (``reap_leaving``): a forked
    child that has done its job takes milliseconds more to exit while the kernel takes back its
    memory, not worth waiting for."""
    if os.waitpid(pid, os.WNOHANG)[0] == 0:
        _leaving.append(pid)


def reap_leaving() -> None:
    """Reap the children that have finished exiting since their job ended (``reap_later``)."""
    for pid in list(_leaving):
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == 0:
                continue   # still exiting
        except ChildProcessError:   # reaped by someone else (a SIGCHLD handler of the caller's)
            pass
        _leaving.remove(pid)


def _die_with_parent(parent: int) -> None:
    """No child outlives its parent, even one killed outright: Linux sends the child SIGKILL."""
    import ctypes
    import signal
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):   # no prctl: a dead parent still ends the child's reads
        return
    if os.getppid() != parent:   # the parent died before prctl took effect
        os._exit(1)


def _send_error(fd: int, exc: BaseException) -> None:
    """The child's exception, pickled (its own type and message), or as text if it cannot be."""
    try:
        data = pickle.dumps(exc)
    except Exception:   # noqa: BLE001 (an unpicklable exception still reaches the parent as text)
        data = pickle.dumps(OSError(f"{type(exc).__name__}: {exc}"))
    with os.fdopen(fd, "wb") as pipe:
        pipe.write(data)


def _encode(obj: Any) -> list:
    """A frame (buffer count, head size, buffer sizes), the pickled head, then each array's raw
    bytes: pickle protocol 5 hands contiguous buffers over without copying them."""
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    frame = struct.pack(f"<QQ{len(raws)}Q", len(raws), len(head), *(r.nbytes for r in raws))
    return [frame, head, *raws]


def _spill_file() -> int:
    """An anonymous file both processes can read and write: in memory where Linux allows it."""
    try:
        return os.memfd_create("servesim-results")
    except OSError:
        fd, path = tempfile.mkstemp(prefix="servesim-results-")
        os.unlink(path)
        return fd


def _pwrite_all(fd: int, parts: list, offset: int) -> int:
    """Write ``parts`` one after another from ``offset``; returns where they end."""
    for part in parts:
        view = memoryview(part).cast("B")
        while view:
            written = os.pwrite(fd, view, offset)
            view, offset = view[written:], offset + written
    return offset


def _spill_reader(fd: int, offset: int) -> Callable[[int], bytearray]:
    position = offset

    def read(num_bytes: int) -> bytearray:
        nonlocal position
        data = bytearray(num_bytes)
        view, done = memoryview(data), 0
        while done < num_bytes:
            got = os.preadv(fd, [view[done:]], position + done)
            if not got:
                raise EOFError("the spill file ends early")
            done += got
        position += num_bytes
        return data
    return read


def _widen(fd: int) -> None:
    try:
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
    except OSError:   # a lower pipe-max-size: the default pipe works, with more waiting
        pass


def write_all(fd: int, view: memoryview) -> None:
    """Write all of ``view`` to the pipe or file ``fd``."""
    view = view.cast("B")
    while view:
        view = view[os.write(fd, view):]


def read_to_end(fd: int) -> bytes:
    """Everything the other end writes to pipe ``fd`` until it closes it."""
    parts = []
    while part := os.read(fd, 1 << 16):
        parts.append(part)
    return b"".join(parts)


def _read_exactly(fd: int, num_bytes: int) -> bytearray:
    data = bytearray(num_bytes)
    view, done = memoryview(data), 0
    while done < num_bytes:
        got = os.readv(fd, [view[done:]])
        if not got:
            raise EOFError("the parent process stopped sending results")
        done += got
    return data
