"""``em.cuda``: questions about NVIDIA GPUs and their memory, answered without a GPU too.

    em.cuda.is_available()          # False, and em.cuda.why_unavailable() says why
    em.cuda.device_count()
    em.cuda.memory_stats("cuda:0")  # {"in_use": ..., "reserved": ..., "device_free": ...}
    em.cuda.empty_cache()           # give the pool's unused memory back to the driver

Importing ember never imports CuPy; these functions do, on first use.
"""
from __future__ import annotations

from .errors import BackendUnavailableError, DeviceError

__all__ = ["is_available", "why_unavailable", "device_count", "memory_stats", "empty_cache",
           "synchronize"]


def why_unavailable() -> str | None:
    """None when CUDA devices can be used here, else why not."""
    from .backend.cuda import _cupy
    return _cupy.reason()


def is_available() -> bool:
    return why_unavailable() is None


def device_count() -> int:
    from .backend.cuda import _cupy
    return _cupy.device_count()


def _cupy_or_raise(what: str):
    from .backend.cuda import _cupy
    cp, why = _cupy.load()
    if cp is None:
        raise BackendUnavailableError(f"em.cuda.{what}: CUDA is not usable here: {why}")
    return cp


def _index(device) -> int:
    """A device index from None (0), an int, "cuda" / "cuda:1", or an ember Device."""
    if device is None:
        return 0
    if isinstance(device, int) and not isinstance(device, bool):
        index = device
    elif isinstance(device, str):
        kind, _, idx = device.partition(":")
        if kind.lower() not in ("cuda", "gpu"):
            raise DeviceError(f"em.cuda: {device!r} is not a CUDA device; valid: 'cuda', "
                              f"'cuda:<index>', an int, or a cuda Device")
        index = int(idx) if idx else 0
    elif getattr(device, "kind", None) == "cuda":
        index = device.index
    else:
        raise DeviceError(f"em.cuda: {device!r} is not a CUDA device; valid: 'cuda', "
                          f"'cuda:<index>', an int, or a cuda Device")
    n = device_count()
    if not 0 <= index < n:
        raise DeviceError(f"em.cuda: no device cuda:{index}; this machine has {n}")
    return index


def memory_stats(device=None) -> dict:
    """Bytes of GPU memory: ``in_use`` by live tensors and ``reserved`` by ember's (CuPy's)
    pool on the device, and the device's ``device_free`` / ``device_total``."""
    cp = _cupy_or_raise("memory_stats")
    from .backend.cuda import memory
    return memory.stats(cp, _index(device))


def empty_cache(device=None) -> None:
    """Give the pool's unused blocks back to the driver (every device when None)."""
    cp = _cupy_or_raise("empty_cache")
    from .backend.cuda import memory
    memory.empty_cache(cp, None if device is None else _index(device))


def synchronize(device=None) -> None:
    """Wait for all work queued on the device (the same as ``em.sync(device)``)."""
    cp = _cupy_or_raise("synchronize")
    cp.cuda.Device(_index(device)).synchronize()
