"""Atomic writes for the files the Learner writes (the records package's helpers), and an
fsync of a whole tree after a checkpoint directory is renamed into place."""
from __future__ import annotations

import os

from ..record.atomic import (atomic_write, fsync_dir, write_bytes_atomic,  # noqa: F401
                             write_text_atomic)

__all__ = ["atomic_write", "write_bytes_atomic", "write_text_atomic", "fsync_dir",
           "fsync_tree"]


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
