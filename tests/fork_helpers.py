"""Test helper: record the children a test's code forks."""
from __future__ import annotations

import os


def record_forks(monkeypatch) -> list[int]:
    """Patch ``os.fork`` (for the test's duration) to append each child's pid to the list
    returned."""
    pids: list[int] = []
    fork = os.fork

    def recording_fork():
        pid = fork()
        if pid:
            pids.append(pid)
        return pid
    monkeypatch.setattr(os, "fork", recording_fork)
    return pids
