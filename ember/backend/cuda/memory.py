"""GPU memory: CuPy's pool, its statistics, and out-of-memory errors that say what happened.

CuPy keeps freed blocks in a pool for reuse, so "in use" (bytes held by live arrays) and
"reserved" (bytes the pool took from the driver) differ; ``empty_cache`` gives the unused
part back to the driver (for other processes, or before a large allocation).

`Outputs`: each thread's stream scope reuses the CuPy arrays of its direct launches' small
outputs once they are dropped (making a CuPy array costs 2.5-3.5 µs of host time, of which
the pool's allocation is under 1 µs and the array object the rest; reusing a dropped array
costs a dict lookup and a few reference counts). They count as "in use" while kept.
"""
from __future__ import annotations

import collections
import os
import sys
import weakref

from ...errors import OutOfMemoryError

#: outputs of at most this many bytes are kept for reuse (`Outputs`)
OUTPUT_MAX_BYTES = 1 << 20
#: arrays kept per shape and dtype
OUTPUTS_PER_KEY = 8
#: bytes kept in all by one scope (past it the scope's arrays are let go, and kept anew)
OUTPUTS_MAX_TOTAL = 64 << 20
_CACHES = weakref.WeakSet()
_grc = sys.getrefcount


def outputs_enabled(env=None) -> bool:
    env = os.environ if env is None else env
    return env.get("EMBER_CUDA_OUTPUT_CACHE", "1") != "0"


class Outputs:
    """The CuPy arrays of one stream's small outputs, reused once dropped.

    ``take(shape, dtype, nbytes)`` gives a C-contiguous array of that shape and dtype whose
    contents are garbage, as ``cupy.ndarray(shape, dtype)`` would: an array this cache made
    earlier and that nothing else refers to any more -- no tensor, no view (a view refers to
    its base), no holder of its memory pointer or of the memory (their references are
    counted) -- or a new one, made with the scope's stream current (``new(shape, dtype)``).
    An array is only ever reused for the stream it was made for, so work queued on that
    stream with its old contents is ordered before work with the new ones: the rule of
    CuPy's own pool, whose free lists are per stream. Tensors are immutable values, so giving
    a dropped array object out again is safe; code that keeps only the array's integer
    device pointer (and no reference) must not use it after dropping the array, as with
    CuPy's pool.

    Per shape and dtype at most `OUTPUTS_PER_KEY` arrays are kept (of at most
    `OUTPUT_MAX_BYTES` each), at most `OUTPUTS_MAX_TOTAL` bytes in all (past it the cache
    lets go of everything and starts over); ``take`` looks at a key's two oldest arrays only
    (a busy one moves to the back), so its cost stays constant; None means "allocate as
    usual". `empty_cache` lets go of every cache's arrays (they return to the pool once
    dropped)."""

    __slots__ = ("_free", "_new", "_bytes", "_base", "__weakref__")

    def __init__(self, new):
        self._free: dict = {}
        self._new = new
        self._bytes = 0
        self._base = None            # the reference counts of a free array, as `take` sees
        _CACHES.add(self)

    def take(self, shape, dtype, nbytes: int):
        key = (shape, dtype)
        dq = self._free.get(key)
        if dq is not None:
            base = self._base
            for _ in range(2 if len(dq) > 1 else 1):
                a = dq[0]
                dq.rotate(-1)
                if _grc(a) == base[0]:
                    d = a.data
                    if _grc(d) == base[1] and _grc(d.mem) == base[2]:
                        return a
            if len(dq) >= OUTPUTS_PER_KEY:
                return None
        elif nbytes > OUTPUT_MAX_BYTES or nbytes <= 0:
            return None
        if self._bytes + nbytes > OUTPUTS_MAX_TOTAL:
            self.clear()
            dq = None
        a = self._new(shape, dtype)
        if dq is None:
            dq = self._free[key] = collections.deque()
        dq.append(a)
        self._bytes += nbytes
        if self._base is None:
            # what `take` sees for a free array: the deque's reference, the local name and
            # the call's argument; for its pointer, the array's, the name's and the
            # argument's; for the memory, the pointer's and the argument's
            d = a.data
            self._base = (_grc(a), _grc(d), _grc(d.mem))
        return a

    def clear(self) -> None:
        self._free = {}
        self._bytes = 0

    @property
    def kept_bytes(self) -> int:
        return self._bytes


def _fmt(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def stats(cp, index: int) -> dict:
    """Bytes in use and reserved by ember's (CuPy's) pool on device ``index``, and the
    device's free and total memory as the driver reports them."""
    with cp.cuda.Device(index):
        pool = cp.get_default_memory_pool()
        free, total = cp.cuda.runtime.memGetInfo()
        return {"in_use": int(pool.used_bytes()), "reserved": int(pool.total_bytes()),
                "device_free": int(free), "device_total": int(total)}


def empty_cache(cp, index: int | None = None) -> None:
    """Return the pool's unused blocks (and pinned host buffers) to the driver."""
    for c in list(_CACHES):
        c.clear()
    devices = range(cp.cuda.runtime.getDeviceCount()) if index is None else (index,)
    for i in devices:
        with cp.cuda.Device(i):
            cp.get_default_memory_pool().free_all_blocks()
    cp.get_default_pinned_memory_pool().free_all_blocks()


def out_of_memory(cp, op: str, err, index: int) -> OutOfMemoryError:
    """The ember error for CuPy's OutOfMemoryError ``err`` raised by ``op``."""
    size = getattr(err, "_size", None)
    asked = f"{size:,} bytes ({_fmt(size)})" if isinstance(size, int) else "memory"
    try:
        s = stats(cp, index)
        state = (f"ember's pool holds {_fmt(s['in_use'])} in live tensors and "
                 f"{_fmt(s['reserved'])} reserved; the device has {_fmt(s['device_free'])} "
                 f"free of {_fmt(s['device_total'])}")
    except Exception:  # the report must not fail on a device in trouble
        state = "the memory state could not be read"
    return OutOfMemoryError(
        f"{op}: out of memory on cuda:{index} allocating {asked}; {state}. Drop tensors you "
        f"no longer need, use smaller batches, or call em.cuda.empty_cache() if another "
        f"process needs the memory ({err})")
