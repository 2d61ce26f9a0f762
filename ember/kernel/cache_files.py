"""Files in the kernel cache: atomic writes and cross-process build locks.

Shared by the compilers that keep binaries in the user cache dir (`ember.kernel.c.compiler`
for C libraries, `ember.kernel.cuda.compiler` for CUDA binaries): a file is written to a
temporary name in its folder and renamed into place (readers see it whole or not at all),
and a ``fcntl`` lock (one of 256 stripes per folder, by key) makes concurrent processes build
each entry once.
"""
from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl
except ImportError:          # Windows: atomic renames only
    fcntl = None

__all__ = ["atomic_write", "build_lock"]


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="." + path.name + ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


@contextmanager
def build_lock(folder: Path, key: str):
    """Hold the exclusive lock of ``key``'s stripe in ``folder/locks`` (no-op without
    ``fcntl``)."""
    if fcntl is None:
        yield
        return
    ldir = Path(folder) / "locks"
    ldir.mkdir(exist_ok=True)
    with open(ldir / f"{key[:2]}.lock", "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
