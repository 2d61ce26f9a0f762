"""GPU memory: CuPy's pool, its statistics, and out-of-memory errors that say what happened.

CuPy keeps freed blocks in a pool for reuse, so "in use" (bytes held by live arrays) and
"reserved" (bytes the pool took from the driver) differ; ``empty_cache`` gives the unused
part back to the driver (for other processes, or before a large allocation).
"""
from __future__ import annotations

from ...errors import OutOfMemoryError


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
