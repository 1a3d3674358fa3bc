"""Files and folders that appear whole or not at all: temp file, fsync, ``os.replace``.

A result folder is written into a sibling staging folder (``<name>.tmp-PID-XXXX``), each file
itself through a temp file, and the staging folder is then renamed into place, replacing an older
one. A later run removes the staging folders of processes that no longer exist.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, TextIO

# mkstemp/mkdtemp create owner-only files; results get the usual umask-derived modes instead.
_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write(path: Path, write: Callable[[TextIO], Any]) -> None:
    """Write a text file through a temp file in the same folder, fsync, then ``os.replace``."""
    tmp = temp_file(path)
    try:
        with open_text(tmp, "w") as f:
            write(f)
        commit(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def temp_file(path: Path) -> Path:
    """A new empty temp file beside ``path``, with the mode ``path`` will have."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)
    finally:
        os.close(fd)
    return Path(tmp)


def open_text(path: Path, mode: str) -> TextIO:
    return open(path, mode, newline="", encoding="utf-8")


def commit(tmp: Path, path: Path) -> None:
    """Put a finished temp file in place: its bytes on disk first, then the rename."""
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def staging_folder(target: Path) -> Path:
    """A new empty sibling of ``target`` to write a result folder in, named after this process;
    staging folders that killed runs left beside ``target`` go first."""
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_siblings(target)
    staging = Path(tempfile.mkdtemp(prefix=f"{target.name}.tmp-{os.getpid()}-", dir=target.parent))
    os.chmod(staging, 0o777 & ~_UMASK)
    return staging


def remove_stale_siblings(target: Path) -> None:
    """Remove ``<name>.tmp-PID-*`` and ``<name>.old-PID-*`` folders whose process is gone (a run
    killed by a signal it could not catch); a live process's, or an unrecognised name, stay."""
    pattern = re.compile(rf"{re.escape(target.name)}\.(tmp|old)-(\d+)-[^/]+")
    with contextlib.suppress(OSError):
        for sibling in target.parent.iterdir():
            match = pattern.fullmatch(sibling.name)
            if match and sibling.is_dir() and not _alive(int(match.group(2))):
                shutil.rmtree(sibling, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True   # another user's process: alive, and not ours to judge
    return True


def put_in_place(staging: Path, target: Path) -> None:
    """Rename a finished staging folder to ``target``, replacing an older folder there."""
    fsync_dir(staging)
    _swap_into_place(staging, target)
    fsync_dir(target.parent)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _swap_into_place(staging: Path, target: Path) -> None:
    if not target.exists():
        os.replace(staging, target)
        return
    # rename() may replace an empty folder: park the old results there, then drop them.
    old = Path(tempfile.mkdtemp(prefix=f"{target.name}.old-{os.getpid()}-", dir=target.parent))
    try:
        os.replace(target, old)
    except BaseException:
        old.rmdir()
        raise
    try:
        os.replace(staging, target)
    except BaseException:
        os.replace(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)
