"""Exchange with other array libraries: DLPack (zero-copy) and NumPy's protocols.

* ``em.from_dlpack(obj)`` and ``Tensor.__dlpack__`` share memory with NumPy, PyTorch, CuPy...
  NumPy cannot put bf16 in a DLPack capsule, so bf16 travels as the bits of a u16 buffer
  whose capsule is relabelled bf16 (DLPack's ``kDLBfloat``), and a bf16 capsule from another
  library is read the same way in reverse: still zero-copy.
* ``__array_ufunc__``: NumPy scalars (``np.float32(2) * t``) combine with tensors like Python
  scalars, weakly, and give tensors; NumPy ufuncs of one tensor (``np.exp(t)``) run as ember
  ops. Mixing a tensor with a NumPy array is refused with a message saying how to convert.
"""
from __future__ import annotations

import ctypes
import operator

import numpy as np

from .. import dtype as dt
from ..errors import DeviceError, DTypeError
from .device import as_device
from .dispatch import wrap

# -- DLPack -------------------------------------------------------------------------------
_DL_CPU = 1
_DL_UINT, _DL_BFLOAT = 1, 4
_DEVICE_NAMES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal",
                 10: "rocm", 13: "cuda_managed", 14: "oneapi"}

_capi = ctypes.pythonapi
_capi.PyCapsule_GetPointer.restype = ctypes.c_void_p
_capi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capi.PyCapsule_GetName.restype = ctypes.c_char_p
_capi.PyCapsule_GetName.argtypes = [ctypes.py_object]

# Byte offset of DLTensor inside the managed struct: DLManagedTensor starts with it;
# DLManagedTensorVersioned has version (8), manager_ctx (8), deleter (8), flags (8) first.
# Inside DLTensor the dtype (code u8, bits u8, lanes u16) follows data (8), device (8),
# ndim (4), i.e. at byte 20.
_DLTENSOR_AT = {b"dltensor": 0, b"dltensor_versioned": 32}
_DTYPE_AT = 20


def _relabel(capsule, from_code: int, to_code: int, bits: int) -> None:
    """Change the dtype code of an unconsumed DLPack capsule in place (same bits)."""
    name = _capi.PyCapsule_GetName(capsule)
    if name not in _DLTENSOR_AT:
        raise DTypeError(f"DLPack: unexpected capsule {name!r}")
    base = _capi.PyCapsule_GetPointer(capsule, name) + _DLTENSOR_AT[name] + _DTYPE_AT
    code = ctypes.c_uint8.from_address(base)
    if code.value != from_code or ctypes.c_uint8.from_address(base + 1).value != bits:
        raise DTypeError(f"DLPack: capsule dtype code {code.value} is not the expected "
                         f"{from_code}")
    code.value = to_code


def _capsule_dtype(capsule):
    """(code, bits, lanes) of an unconsumed DLPack capsule."""
    name = _capi.PyCapsule_GetName(capsule)
    base = _capi.PyCapsule_GetPointer(capsule, name) + _DLTENSOR_AT[name] + _DTYPE_AT
    return (ctypes.c_uint8.from_address(base).value,
            ctypes.c_uint8.from_address(base + 1).value,
            ctypes.c_uint16.from_address(base + 2).value)


class _Capsule:
    """Hands NumPy one prepared capsule through the ``__dlpack__`` protocol."""

    __slots__ = ("capsule", "device")

    def __init__(self, capsule, device):
        self.capsule, self.device = capsule, device

    def __dlpack__(self, *args, **kwargs):
        cap, self.capsule = self.capsule, None
        if cap is None:
            raise BufferError("DLPack: this capsule was already consumed")
        return cap

    def __dlpack_device__(self):
        return self.device


def to_dlpack(t, *args, **kwargs):
    """``Tensor.__dlpack__``: a capsule sharing the tensor's memory."""
    src = t._device.backend.dlpack_source(t._prim)
    if t._dtype is dt.bfloat16 and isinstance(src, np.ndarray):
        cap = src.view(np.uint16).__dlpack__(*args, **kwargs)
        _relabel(cap, _DL_UINT, _DL_BFLOAT, 16)
        return cap
    try:
        return src.__dlpack__(*args, **kwargs)
    except BufferError as e:
        raise BufferError(f"__dlpack__: cannot export a tensor of shape {t._shape} and dtype "
                          f"{t._dtype.short} on {t._device}: {e}") from None


def dlpack_device(t):
    """``Tensor.__dlpack_device__``: ``(device_type, device_id)`` as DLPack numbers them."""
    return t._device.backend.dlpack_source(t._prim).__dlpack_device__()


def cuda_array_interface(t) -> dict:
    """``Tensor.__cuda_array_interface__`` (version 3): the device pointer, shape, strides and
    typestr of a CUDA tensor, and the stream its pending work is queued on."""
    base = t._device.backend
    while base.inner is not None:
        base = base.inner
    export = getattr(base, "cuda_array_interface", None)
    if export is None:
        raise AttributeError(f"__cuda_array_interface__: the tensor lives on {t._device}, not "
                             f"on a CUDA device; use __dlpack__ or numpy() instead")
    return export(t._device.backend.native(t._prim))


def _host_array(obj) -> np.ndarray:
    """A NumPy array sharing ``obj``'s host memory (bf16 included)."""
    if isinstance(obj, np.ndarray):
        return obj
    if not hasattr(obj, "__dlpack__"):
        raise DTypeError(f"from_dlpack: {type(obj).__name__} does not support DLPack "
                         f"(no __dlpack__); use em.tensor(...) to copy it")
    dev = tuple(obj.__dlpack_device__()) if hasattr(obj, "__dlpack_device__") else (_DL_CPU, 0)
    if dev[0] != _DL_CPU:
        name = _DEVICE_NAMES.get(int(dev[0]), f"type {int(dev[0])}")
        raise DeviceError(f"from_dlpack: the source lives on {name}:{dev[1]}, and ember's CPU "
                          f"devices read host memory only; copy it to the host first "
                          f"(e.g. .cpu() in PyTorch)")
    try:
        return np.from_dlpack(obj)
    except (RuntimeError, BufferError, TypeError) as first:
        # NumPy knows no bf16: take the capsule ourselves and read its bits as u16.
        try:
            cap = obj.__dlpack__(max_version=(1, 0))
        except TypeError:
            cap = obj.__dlpack__()
        except BufferError:
            raise first from None
        code, bits, lanes = _capsule_dtype(cap)
        if (code, bits, lanes) != (_DL_BFLOAT, 16, 1):
            raise DTypeError(f"from_dlpack: unsupported element type (DLPack code {code}, "
                             f"{bits} bits, {lanes} lanes): {first}; valid: "
                             f"{', '.join(d.short for d in dt.ALL)}") from None
        _relabel(cap, _DL_BFLOAT, _DL_UINT, 16)
        return np.from_dlpack(_Capsule(cap, dev)).view(dt.bfloat16.np)


def from_dlpack(obj, device=None):
    """A tensor sharing memory with ``obj`` (a NumPy array, a PyTorch tensor, an ember tensor,
    anything with ``__dlpack__``). On an autodiff device the result is an untracked tensor.
    The memory is shared: a change made through ``obj`` is seen by the tensor."""
    device = as_device(device)
    ad = device.backend.is_autodiff
    base_dev = device.inner if ad else device
    if base_dev.backend.kind != "cpu":
        prim = base_dev.backend.from_dlpack(obj, base_dev)
        shape, d = tuple(prim.shape), dt.from_numpy(prim.dtype)
    else:
        arr = _host_array(obj)
        shape, d = tuple(arr.shape), dt.from_numpy(arr.dtype)
        prim = base_dev.backend.from_numpy(arr, base_dev)
    if ad:
        prim = device.backend.wrap_inner(prim, (shape, d))
    return wrap(prim, device, shape, d)


# -- NumPy's protocols ----------------------------------------------------------------------
_OPERATORS = {
    np.add: operator.add, np.subtract: operator.sub, np.multiply: operator.mul,
    np.true_divide: operator.truediv, np.floor_divide: operator.floordiv,
    np.remainder: operator.mod, np.power: operator.pow, np.matmul: operator.matmul,
    np.equal: operator.eq, np.not_equal: operator.ne, np.less: operator.lt,
    np.less_equal: operator.le, np.greater: operator.gt, np.greater_equal: operator.ge,
    np.bitwise_and: operator.and_, np.bitwise_or: operator.or_, np.bitwise_xor: operator.xor,
    np.left_shift: operator.lshift, np.right_shift: operator.rshift,
    np.negative: operator.neg, np.positive: operator.pos, np.absolute: operator.abs,
    np.invert: operator.invert,
}
# ufuncs whose Tensor-API function has another name
_RENAMED = {"arcsin": "asin", "arccos": "acos", "arctan": "atan", "arctan2": "atan2",
            "isnan": "is_nan", "isinf": "is_inf", "isfinite": "is_finite",
            "reciprocal": "recip", "fmax": None, "fmin": None}


def _ember_fn(ufunc):
    fn = _OPERATORS.get(ufunc)
    if fn is not None:
        return fn
    name = _RENAMED.get(ufunc.__name__, ufunc.__name__)
    if name is None:
        return None
    from . import functional
    return getattr(functional, name, None)


def array_ufunc(t, ufunc, method, inputs, kwargs):
    """``Tensor.__array_ufunc__``: run the ember op for a NumPy ufunc on tensors and scalars."""
    from .tensor import Tensor
    if method != "__call__" or kwargs:
        raise DTypeError(f"numpy.{ufunc.__name__}.{method}: not supported on ember tensors "
                         f"{'with ' + ', '.join(kwargs) + ' ' if kwargs else ''}; convert "
                         f"with t.numpy() first")
    args = []
    for x in inputs:
        if isinstance(x, np.generic):
            x = x.item()
        elif isinstance(x, np.ndarray):
            if x.ndim == 0:
                x = x.item()
            else:
                raise DTypeError(
                    f"numpy.{ufunc.__name__}: cannot combine a tensor of shape {t._shape} "
                    f"with a NumPy array of shape {x.shape}; convert the array with "
                    f"em.tensor(array, device=...) or the tensor with t.numpy()")
        elif not isinstance(x, (Tensor, bool, int, float)):
            return NotImplemented
        args.append(x)
    fn = _ember_fn(ufunc)
    if fn is None:
        raise DTypeError(f"numpy.{ufunc.__name__}: no ember op implements it; convert with "
                         f"t.numpy() first")
    return fn(*args)
