"""Whether CUDA kernels can run here (CuPy importable, a device visible), and the facts about
a device the launches need (compute capability, multiprocessors). Imports CuPy only when
asked."""
from __future__ import annotations

import threading
from dataclasses import dataclass

__all__ = ["cupy_or_reason", "DeviceInfo", "device_info", "cuda_runtime_major"]

_STATE: dict = {}
_LOCK = threading.Lock()


def cupy_or_reason() -> tuple:
    """``(cupy, "")`` when CuPy imports and sees at least one CUDA device, else
    ``(None, why not)``. Computed once per process."""
    r = _STATE.get("cupy")
    if r is not None:
        return r
    with _LOCK:
        r = _STATE.get("cupy")
        if r is None:
            r = _STATE["cupy"] = _probe()
    return r


def _probe() -> tuple:
    try:
        import cupy
    except ImportError as e:
        return None, (f"CuPy is not installed ({e}); pip install 'ember[cuda12]' or "
                      f"'ember[cuda13]'")
    except Exception as e:          # a broken CuPy install must not break ember
        return None, f"CuPy does not import: {type(e).__name__}: {e}"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        return None, f"CuPy sees no CUDA device: {type(e).__name__}: {e}"
    if n <= 0:
        return None, "CuPy sees no CUDA device (device count 0)"
    return cupy, ""


def cuda_runtime_major() -> int | None:
    """The CUDA major version of CuPy's runtime (to pick the matching NVRTC), or None."""
    cp, _ = cupy_or_reason()
    if cp is None:
        return None
    try:
        return int(cp.cuda.runtime.runtimeGetVersion()) // 1000
    except Exception:
        return None


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """``arch``: compute capability as ``major * 10 + minor``; ``sms``: multiprocessors;
    ``threads_per_sm``: resident threads per multiprocessor; ``smem_optin``: the shared
    memory a block may take once its function opts in (bytes, static and dynamic)."""
    index: int
    name: str
    arch: int
    sms: int
    threads_per_sm: int
    smem_optin: int = 48 * 1024


def device_info(index: int) -> DeviceInfo:
    r = _STATE.get(("dev", index))
    if r is None:
        cp, why = cupy_or_reason()
        if cp is None:
            raise RuntimeError(why)
        p = cp.cuda.runtime.getDeviceProperties(index)
        name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
        r = DeviceInfo(index, name, int(p["major"]) * 10 + int(p["minor"]),
                       int(p["multiProcessorCount"]),
                       int(p.get("maxThreadsPerMultiProcessor", 2048)),
                       int(p.get("sharedMemPerBlockOptin", 48 * 1024)))
        _STATE[("dev", index)] = r
    return r
