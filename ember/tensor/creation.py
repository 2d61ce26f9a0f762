"""Creating tensors: from data, constants, ranges, and random distributions."""
from __future__ import annotations

import numpy as np

from .. import dtype as dt
from ..errors import DTypeError, ShapeError
from ..ops import creation as C
from ..ops.rules import check_shape
from .device import as_device
from .dispatch import create, wrap
from .distribution import Default, Distribution


def _shape_arg(op, shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return check_shape(op, shape)


def from_numpy(array: np.ndarray, device=None):
    """A tensor sharing ``array``'s memory where the device allows (the CPU)."""
    device = as_device(device)
    array = np.asarray(array)
    d = dt.from_numpy(array.dtype)
    return wrap(device.backend.from_numpy(array, device), device, tuple(array.shape), d)


def tensor(data, dtype=None, device=None):
    """A new tensor holding a copy of ``data``: nested lists, scalars, NumPy arrays,
    `TensorData`, or another tensor. Python floats default to f32, ints to i64."""
    from .data import TensorData
    from .tensor import Tensor
    if isinstance(data, Tensor):
        out = data.to_device(as_device(device)) if device is not None else data
        return out.cast(dtype) if dtype is not None else out
    if isinstance(data, TensorData):
        arr = data.to_numpy()
    else:
        arr = _to_numpy(data)
    if dtype is not None:
        d = dt.as_dtype(dtype)
    else:
        d = _default_dtype(data, arr)
    arr = np.array(arr, dtype=d.np, copy=True, order="C")
    return from_numpy(arr, device)


def _to_numpy(data):
    if isinstance(data, np.ndarray):
        return data
    if isinstance(data, (bool, int, float, np.generic)):
        return np.asarray(data)
    if hasattr(data, "__array__") or hasattr(data, "__dlpack__"):
        return np.asarray(data)
    if isinstance(data, (list, tuple)):
        try:
            arr = np.asarray(data)
        except ValueError as e:
            raise ShapeError(f"tensor: nested sequences of uneven lengths ({e})") from None
        if arr.dtype == object:
            raise DTypeError("tensor: data must be numbers of one nesting depth")
        return arr
    raise DTypeError(f"tensor: cannot make a tensor from {type(data).__name__}; valid: "
                     f"numbers, nested lists, NumPy arrays, TensorData")


def _default_dtype(data, arr):
    if isinstance(data, np.ndarray) or isinstance(data, np.generic):
        return dt.from_numpy(arr.dtype)
    k = arr.dtype.kind
    if k == "b":
        return dt.bool_
    if k in "iu":
        return dt.DEFAULT_INT
    if k == "f":
        return dt.DEFAULT_FLOAT
    try:
        return dt.from_numpy(arr.dtype)
    except Exception:
        raise DTypeError(f"tensor: unsupported element type {arr.dtype}") from None


def full(shape, value, dtype=None, device=None):
    """A tensor of ``shape`` filled with ``value``."""
    shape = check_shape("full", shape)
    d = dt.as_dtype(dtype) if dtype is not None else dt.scalar_dtype(value)
    if d.kind == "int" and isinstance(value, float) and not float(value).is_integer():
        raise DTypeError(f"full: value {value} is not an integer but dtype is {d.short}")
    value = float(value) if d.kind == "float" else (bool(value) if d.kind == "bool"
                                                     else int(value))
    return create(C.FULL, as_device(device), {"shape": shape, "value": value, "dtype": d})


def zeros(*shape, dtype=None, device=None):
    return full(_shape_arg("zeros", shape), 0, dtype or dt.DEFAULT_FLOAT, device)


def ones(*shape, dtype=None, device=None):
    return full(_shape_arg("ones", shape), 1, dtype or dt.DEFAULT_FLOAT, device)


def empty(*shape, dtype=None, device=None):
    """A tensor of ``shape`` whose values are unspecified (zeros on NdArray)."""
    return zeros(*shape, dtype=dtype, device=device)


def zeros_like(x, dtype=None):
    return full(x._shape, 0, dtype or x._dtype, x._device)


def ones_like(x, dtype=None):
    return full(x._shape, 1, dtype or x._dtype, x._device)


def full_like(x, value, dtype=None):
    return full(x._shape, value, dtype or x._dtype, x._device)


def empty_like(x, dtype=None):
    return zeros_like(x, dtype)


def random(shape, distribution: Distribution | None = None, dtype=None, device=None):
    """Samples of ``distribution`` (Default: uniform [0, 1)) from the device's stream, which
    ``device.seed(n)`` or ``em.seed(n)`` makes reproducible."""
    shape = check_shape("random", shape)
    distribution = distribution or Default()
    if not isinstance(distribution, Distribution):
        raise DTypeError(f"random: expected a Distribution, got {type(distribution).__name__}")
    d = dt.as_dtype(dtype) if dtype is not None else dt.DEFAULT_FLOAT
    return create(C.RANDOM, as_device(device),
                  {"shape": shape, "distribution": distribution, "dtype": d})


def random_like(x, distribution=None, dtype=None):
    return random(x._shape, distribution, dtype or x._dtype, x._device)


def seed(value: int, device=None) -> None:
    """Reseed one device's stream, or with no device every device ember has made."""
    if device is not None:
        as_device(device).seed(value)
        return
    from ..backend.ndarray import NdArray
    nd = NdArray()
    for dev in list(nd._devices.values()) or [nd.device(0)]:
        dev.seed(value)
