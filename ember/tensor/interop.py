"""Zero-copy exchange with other array libraries through DLPack."""
from __future__ import annotations

from .. import dtype as dt
from .device import as_device
from .dispatch import wrap


def from_dlpack(obj, device=None):
    """A tensor sharing memory with ``obj`` (a NumPy array, a PyTorch tensor, anything with
    ``__dlpack__``). On an autodiff device the result is an untracked leaf."""
    device = as_device(device)
    base = device.backend.inner if device.backend.is_autodiff else device.backend
    base_dev = device.inner if device.backend.is_autodiff else device
    prim = base.from_dlpack(obj, base_dev)
    arr_meta = (tuple(prim.shape), dt.from_numpy(prim.dtype))
    if device.backend.is_autodiff:
        prim = device.backend.wrap_inner(prim, arr_meta)
    return wrap(prim, device, arr_meta[0], arr_meta[1])
