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

    ``"cpu"`` is Fusion(NdArray): ops recorded lazily and run as generated C kernels (small
    ones at once on NdArray, where a kernel would not pay). When no C compiler is usable,
    ember says so once and gives plain NdArray, with identical results. ``fusion=False``
    gives plain NdArray; ``fusion=True`` insists on Fusion(NdArray) (a pass-through without
    a compiler).
    """
    if ":" in kind:
        kind, _, idx = kind.partition(":")
        try:
            index = int(idx)
        except ValueError:
            raise DeviceError(f"device: {kind + ':' + idx!r} has no device index after the "
                              f"colon; valid: a kind and a number, like 'cpu:0' or "
                              f"'cuda:1'") from None
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise DeviceError(f"device: index {index!r} is not a device number; valid: an int "
                          f">= 0")
    kind = kind.lower()
    if kind == "cpu":
        from ..backend.ndarray import NdArray
        dev = NdArray().device(index)
        if fusion or fusion is None:
            from ..backend.fusion import Fusion
            fused = Fusion(NdArray())
            if fusion or fused.fusing:
                dev = fused.device(index)
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
    """The device creation functions use when given none: `set_default_device`'s (per
    thread), else ``device("cpu")``."""
    d = getattr(_default, "device", None)
    if d is None:
        d = _CPU[0]
        if d is None:
            d = _CPU[0] = device("cpu")
    return d


_CPU = [None]     # device("cpu"), made on first use


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
