"""The user cache directory ember keeps compiled kernels and autotune results in.

``EMBER_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/ember``, else ``~/.cache/ember``. If that
cannot be created or written (a read-only home, a sandbox), a per-user folder in the system
temp dir is used instead, so caching degrades to per-boot rather than failing.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["cache_dir", "default_cache_root"]


def default_cache_root() -> Path:
    """The configured cache root (not created)."""
    env = os.environ.get("EMBER_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg).expanduser() / "ember"
    return Path.home() / ".cache" / "ember"


def _usable(p: Path) -> bool:
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(p, os.W_OK | os.X_OK)


def cache_dir(sub: str | None = None, root: str | os.PathLike | None = None) -> Path:
    """The cache directory (or its subfolder ``sub``), created if missing.

    ``root`` overrides the configured root (tests pass a temporary folder)."""
    base = Path(root).expanduser() if root is not None else default_cache_root()
    if not _usable(base):
        uid = os.getuid() if hasattr(os, "getuid") else os.getpid()
        base = Path(tempfile.gettempdir()) / f"ember-cache-{uid}"
        base.mkdir(parents=True, exist_ok=True)
    if sub:
        base = base / sub
        base.mkdir(parents=True, exist_ok=True)
    return base
