"""Reuse of large kernel output arrays.

A fresh multi-megabyte NumPy array comes from ``mmap``: its first write page-faults and the
kernel zeroes every page, which costs about as much as a memory-bound kernel itself (a 64 MB
f32 GELU output: ~6 ms of faults for a ~5 ms kernel). The pool keeps the memory of large
outputs and hands it out again once no array uses it any more.

Each block is a 1-d ``uint8`` array owned by the pool; an output is a view of it (NumPy
points every view's ``base`` at the block itself), so the block's reference count says
whether any array, view, memoryview or DLPack capsule still reaches its memory: a block is
reused only when the pool holds the sole reference. Arrays below ``EMBER_POOL_MIN_BYTES``
(default 1 MiB) are plain ``np.empty`` (malloc reuses small blocks by itself). Memory held in
blocks that nothing uses is bounded by ``EMBER_POOL_BYTES`` (default 1 GiB, or an eighth
of the machine's memory if less; least recently used blocks are released first when a new
block is needed); ``trim()`` releases it all and
``EMBER_POOL=0`` turns pooling off. Outputs start at a 64-byte boundary (one cache line,
one AVX-512 vector).
"""
from __future__ import annotations

import os
import sys
import threading

import numpy as np

__all__ = ["BufferPool", "default_pool"]

_ALIGN = 64
_PAGE = 4096
_getrefcount = sys.getrefcount


def _count(block) -> int:
    return _getrefcount(block)


def _default_idle_bytes() -> int:
    """1 GiB, or an eighth of the machine's memory if that is less."""
    try:
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return 1 << 30
    return min(1 << 30, ram // 8) if ram > 0 else 1 << 30


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


class BufferPool:
    """``empty(shape, dtype)`` like ``np.empty``, reusing the memory of large arrays that
    are no longer referenced. ``stats``: ``hits`` (reused), ``misses`` (new blocks),
    ``released`` (blocks given back), ``unpooled`` (large requests served by np.empty)."""

    #: blocks of one size kept at most (beyond, requests get plain np.empty)
    MAX_PER_SIZE = 16

    def __init__(self, min_bytes: int | None = None, max_idle_bytes: int | None = None,
                 enabled: bool | None = None):
        self.min_bytes = _env_int("EMBER_POOL_MIN_BYTES", 1 << 20) if min_bytes is None \
            else int(min_bytes)
        self.max_idle_bytes = _env_int("EMBER_POOL_BYTES", _default_idle_bytes()) \
            if max_idle_bytes is None else int(max_idle_bytes)
        if enabled is None:
            enabled = os.environ.get("EMBER_POOL", "1").strip().lower() not in (
                "0", "false", "off", "no")
        self.enabled = bool(enabled)
        self._blocks: dict = {}         # block size -> [[block, last use], ...]
        self._clock = 0
        self._lock = threading.Lock()
        self.stats = {"hits": 0, "misses": 0, "released": 0, "unpooled": 0}

        # The reference counts of a block nothing else holds, seen through the same calls
        # as the checks below (how arguments count differs between Python versions).
        e = [np.empty(1, np.uint8), 0]
        self._idle_refs = self._refs(e[0])
        v = e[0][:1]
        self._excl_refs = self._exclusive_count(v)
        del e, v

    @staticmethod
    def _refs(block) -> int:
        return _count(block)

    @staticmethod
    def _exclusive_count(a) -> int:
        b = a.base
        return _count(b)

    def empty(self, shape, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        shape = tuple(int(s) for s in shape)
        n = dtype.itemsize
        for s in shape:
            n *= s
        if n < self.min_bytes or not self.enabled:
            return np.empty(shape, dtype)
        size = -(-(n + _ALIGN) // _PAGE) * _PAGE
        with self._lock:
            self._clock += 1
            entries = self._blocks.setdefault(size, [])
            block = None
            for e in entries:
                if self._refs(e[0]) <= self._idle_refs:
                    block = e[0]
                    e[1] = self._clock
                    self.stats["hits"] += 1
                    break
            if block is None:
                if len(entries) >= self.MAX_PER_SIZE:
                    self.stats["unpooled"] += 1
                    return np.empty(shape, dtype)
                self._release_idle(self.max_idle_bytes)
                block = np.empty(size, np.uint8)
                entries.append([block, self._clock])
                self.stats["misses"] += 1
            off = (-block.ctypes.data) % _ALIGN
            return block[off:off + n].view(dtype).reshape(shape)

    def _release_idle(self, keep_bytes: int):
        """Release least recently used idle blocks until at most ``keep_bytes`` stay."""
        idle = [(e[1], size, e) for size, entries in self._blocks.items() for e in entries
                if self._refs(e[0]) <= self._idle_refs]
        total = sum(size for _, size, _ in idle)
        if total <= keep_bytes:
            return
        idle.sort(key=lambda t: t[0])
        for _, size, e in idle:
            if total <= keep_bytes:
                break
            entries = self._blocks[size]
            del entries[next(i for i, x in enumerate(entries) if x is e)]
            total -= size
            self.stats["released"] += 1
        for size in [s for s, entries in self._blocks.items() if not entries]:
            del self._blocks[size]

    def trim(self):
        """Give back the memory of every block no array uses."""
        with self._lock:
            self._release_idle(0)

    def owns_exclusively(self, a: np.ndarray) -> bool:
        """Whether ``a`` is a pool array and the only one (no other view, memoryview or
        capsule) reaching its block: then overwriting ``a`` in place touches nobody else's
        data. (The caller checks that nobody else holds ``a`` itself.)"""
        b = a.base
        if type(b) is not np.ndarray or b.dtype != np.uint8 or b.ndim != 1:
            return False
        entries = self._blocks.get(b.size)
        if not entries or not any(e[0] is b for e in entries):
            return False
        del b, entries
        return self._exclusive_count(a) <= self._excl_refs

    def held_bytes(self) -> tuple:
        """``(in use, idle)`` bytes of the pool's blocks."""
        with self._lock:
            used = idle = 0
            for size, entries in self._blocks.items():
                for e in entries:
                    if self._refs(e[0]) <= self._idle_refs:
                        idle += size
                    else:
                        used += size
            return used, idle


_DEFAULT = None
_DEFAULT_LOCK = threading.Lock()


def default_pool() -> BufferPool:
    """The process-wide pool (created on first use)."""
    global _DEFAULT
    if _DEFAULT is None:
        with _DEFAULT_LOCK:
            if _DEFAULT is None:
                _DEFAULT = BufferPool()
    return _DEFAULT
