"""Loading CuPy, and what it says about this machine's CUDA devices (for the Cuda backend,
`ember info` and the test suite). Nothing here raises: each question has an answer or a
reason."""
from __future__ import annotations

import functools
import importlib.util

INSTALL_HINT = "pip install 'ember[cuda12]' (or 'ember[cuda13]' for CUDA 13 drivers)"


@functools.lru_cache(maxsize=1)
def load():
    """``(cupy, None)`` when CuPy imports and sees at least one device, else ``(None, why)``."""
    if importlib.util.find_spec("cupy") is None:
        return None, f"CuPy is not installed ({INSTALL_HINT})"
    try:
        import cupy
        import cupy.lib.stride_tricks  # noqa: F401  (the op references use it as xp.lib...)
    except Exception as e:  # a broken install must not take ember down
        return None, f"CuPy is installed but cannot be imported ({_short(e)})"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        return None, f"no CUDA device found ({_driver(cupy)}; {_short(e)})"
    if n < 1:
        return None, f"no CUDA device found ({_driver(cupy)})"
    return cupy, None


def reason() -> str | None:
    """None when the Cuda backend can run here, else why not."""
    return load()[1]


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")


def _driver(cupy) -> str:
    try:
        v = cupy.cuda.runtime.driverGetVersion()
    except Exception:
        return "no NVIDIA driver could be loaded"
    if not v:
        return "no NVIDIA driver is installed"
    return f"driver for CUDA {v // 1000}.{v % 1000 // 10}"


def device_count() -> int:
    cupy, _ = load()
    return cupy.cuda.runtime.getDeviceCount() if cupy is not None else 0


@functools.lru_cache(maxsize=None)
def properties(index: int) -> dict:
    """Name, compute capability and memory of device ``index``."""
    cupy, _ = load()
    p = cupy.cuda.runtime.getDeviceProperties(index)
    name = p["name"]
    return {"name": name.decode() if isinstance(name, bytes) else str(name),
            "compute_capability": f"{p['major']}.{p['minor']}",
            "total_memory": int(p["totalGlobalMem"])}


def describe() -> str:
    """One line per device and the library versions, for `ember info`."""
    cupy, why = load()
    if cupy is None:
        return why
    parts = []
    for i in range(device_count()):
        p = properties(i)
        parts.append(f"cuda:{i} {p['name']} (compute {p['compute_capability']}, "
                     f"{p['total_memory'] / 2**30:.1f} GiB)")
    try:
        rt = cupy.cuda.runtime.runtimeGetVersion()
        rt = f"CUDA runtime {rt // 1000}.{rt % 1000 // 10}"
    except Exception:
        rt = "CUDA runtime unknown"
    return "; ".join(parts) + f"; CuPy {cupy.__version__}, {rt}, {_driver(cupy)}"
