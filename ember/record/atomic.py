"""Atomic file writes: a file the framework writes is either the old one or the new one,
never half of each. The data goes to a temporary file in the target's directory, is flushed
and fsynced, then renamed over the target with ``os.replace`` (atomic on POSIX and Windows);
the directory is fsynced so the rename itself survives a crash. A failure removes the
temporary file and leaves the old target untouched."""
from __future__ import annotations

import contextlib
import os
import tempfile

__all__ = ["atomic_write", "write_bytes_atomic", "write_text_atomic"]

_TMP_SUFFIX = ".tmp"


def _umask() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


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


@contextlib.contextmanager
def atomic_write(path, mode: str = "wb", *, encoding: str | None = None):
    """``with atomic_write(path) as f: f.write(...)``: ``path`` is replaced only if the block
    finishes without an exception. ``mode`` is ``"wb"`` or ``"w"`` (text, ``encoding``
    defaults to UTF-8). The new file gets the old file's permissions, or the usual ones
    (0o666 less the umask) for a new file."""
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_write: mode must be 'wb' or 'w', got {mode!r}")
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    name = os.path.basename(path)
    try:
        perms = os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        perms = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=_TMP_SUFFIX, dir=directory)
    try:
        with os.fdopen(fd, mode, encoding=(encoding or "utf-8") if mode == "w" else None) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        try:
            os.chmod(tmp, perms)
        except OSError:
            pass
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(directory)


def write_bytes_atomic(path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_write(path, "wb") as f:
        f.write(data)


def write_text_atomic(path, text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically."""
    with atomic_write(path, "w", encoding=encoding) as f:
        f.write(text)
