"""Choosing devices: `em.device("cpu")`, the default device."""
from __future__ import annotations

import threading

from ..backend.base import Device
from ..errors import BackendUnavailableError, DeviceError

_default = threading.local()


def device(kind: str = "cpu", index: int = 0, *, fusion: bool | None = None,
           autodiff: bool = False) -> Device:
    """A device by name: ``"cpu"`` (or ``"cpu:0"``). With ``autodiff=True`` it tracks
    gradients (the same as ``.autodiff()``).

    ``fusion=True`` gives Fusion(NdArray): ops recorded lazily and run as generated C kernels
    (unfused, with identical results, when no C compiler is found). Until its speed targets are
    shown, plain NdArray stays the default (``fusion=None``/``False``).
    """
    if ":" in kind:
        kind, _, idx = kind.partition(":")
        index = int(idx)
    kind = kind.lower()
    if kind == "cpu":
        from ..backend.ndarray import NdArray
        if fusion:
            from ..backend.fusion import Fusion
            dev = Fusion(NdArray()).device(index)
        else:
            dev = NdArray().device(index)
    elif kind in ("cuda", "gpu"):
        # Fusion(Cuda) unless fusion=False (FUSION_BY_DEFAULT in ember/backend/cuda)
        from ..backend.cuda import cuda_device
        dev = cuda_device(index, fusion)
    elif kind in ("wgpu", "torch"):
        from ..backend.stacks import backend_info
        reasons = {b.name: b.reason for b in backend_info()}
        why = reasons.get(kind) or "this backend is not part of ember yet"
        raise BackendUnavailableError(f"device({kind!r}): not usable here: {why}")
    else:
        raise DeviceError(f"device: unknown device kind {kind!r}; valid: 'cpu'")
    return dev.autodiff() if autodiff else dev


def default_device() -> Device:
    d = getattr(_default, "device", None)
    if d is None:
        from ..backend.ndarray import NdArray
        d = NdArray().device(0)
    return d


def set_default_device(dev) -> None:
    """The device used by creation functions given no ``device`` (per thread)."""
    _default.device = as_device(dev) if dev is not None else None


def as_device(spec) -> Device:
    if spec is None:
        return default_device()
    if isinstance(spec, Device):
        return spec
    if isinstance(spec, str):
        return device(spec)
    raise DeviceError(f"expected a Device or a name like 'cpu', got {type(spec).__name__}")
