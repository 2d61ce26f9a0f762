"""Atomic writes for the files the Learner writes (the records package's helpers), and an
fsync of a directory after renames inside it."""
from __future__ import annotations

import os

from ..record.atomic import atomic_write, write_bytes_atomic, write_text_atomic  # noqa: F401

__all__ = ["atomic_write", "write_bytes_atomic", "write_text_atomic", "fsync_dir",
           "fsync_tree"]


def fsync_dir(directory) -> None:
    """Flush a directory's entries (renames, new files) to disk; a no-op off POSIX."""
    if os.name != "posix":
        return
    try:
        fd = os.open(os.fspath(directory), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_tree(directory) -> None:
    """fsync every file under ``directory`` and the directories themselves."""
    for root, dirs, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            try:
                os.fsync(fd)
            except OSError:
                pass
            finally:
                os.close(fd)
        fsync_dir(root)
