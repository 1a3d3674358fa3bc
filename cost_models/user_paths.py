"""Tests of paths a user typed: a name no file system accepts (too long, a NUL byte) names no
file, instead of raising from ``os.stat``."""
from __future__ import annotations

from pathlib import Path


def is_file(path: str | Path) -> bool:
    try:
        return Path(path).is_file()
    except (OSError, ValueError):
        return False


def is_dir(path: str | Path) -> bool:
    try:
        return Path(path).is_dir()
    except (OSError, ValueError):
        return False


def exists(path: str | Path) -> bool:
    try:
        return Path(path).exists()
    except (OSError, ValueError):
        return False
