"""Creating tensors: from data, constants, ranges, and random distributions."""
from __future__ import annotations

import numpy as np

from .. import dtype as dt
from ..errors import DTypeError, ShapeError
from ..ops import creation as C
from ..ops.rules import check_shape
from . import dispatch
from .data import TensorData
from .device import as_device
from .dispatch import create, wrap
from .distribution import Default, Distribution

__all__ = ["tensor", "from_numpy", "full", "zeros", "ones", "empty", "zeros_like", "ones_like",
           "full_like", "empty_like", "arange", "linspace", "eye", "random", "random_like",
           "seed"]


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
    if isinstance(data, dispatch.Tensor):
        out = data.to_device(as_device(device)) if device is not None else data
        return out.cast(dtype) if dtype is not None else out
    if isinstance(data, TensorData):
        arr = data.to_numpy()
        if dtype is None:
            dtype = data.dtype  # TensorData carries its dtype
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
    if not isinstance(value, (int, float, np.integer, np.floating, np.bool_)):
        raise DTypeError(f"full: value must be a real number, got {type(value).__name__} "
                         f"{value!r}")
    d = dt.as_dtype(dtype) if dtype is not None else dt.scalar_dtype(value)
    if d.kind == "int" and isinstance(value, (float, np.floating)) and \
            not float(value).is_integer():
        raise DTypeError(f"full: value {value} is not an integer but dtype is {d.short}")
    if d.kind == "float":
        value = float(value)
    elif d.kind == "bool":
        value = bool(value)
    else:
        value = int(value)
        info = np.iinfo(d.np)
        if not info.min <= value <= info.max:
            raise DTypeError(f"full: value {value} does not fit in {d.short} "
                             f"({info.min}..{info.max})")
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


# -- ranges ---------------------------------------------------------------------------------
def _number(op, name, v):
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise DTypeError(f"{op}: {name} must be an int or a float, got {type(v).__name__} "
                         f"{v!r}")
    return int(v) if isinstance(v, (int, np.integer)) else float(v)


def arange(start, stop=None, step=1, dtype=None, device=None):
    """``start, start + step, ...`` strictly before ``stop`` (``arange(n)`` is ``0..n-1``).
    The dtype is i64 when every argument is an int, else the default float (f32)."""
    if stop is None:
        start, stop = 0, start
    start = _number("arange", "start", start)
    stop = _number("arange", "stop", stop)
    step = _number("arange", "step", step)
    all_int = type(start) is int and type(stop) is int and type(step) is int
    if dtype is None:
        d = dt.DEFAULT_INT if all_int else dt.DEFAULT_FLOAT
    else:
        d = dt.as_dtype(dtype)
    if not (all_int and d.kind == "int"):
        start, stop, step = float(start), float(stop), float(step)
    return create(C.ARANGE, as_device(device),
                  {"start": start, "stop": stop, "step": step, "dtype": d})


def linspace(start, end, steps: int, dtype=None, device=None):
    """``steps`` evenly spaced values from ``start`` to ``end``, both included (f32 by
    default; int dtypes truncate toward zero)."""
    start = float(_number("linspace", "start", start))
    end = float(_number("linspace", "end", end))
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)):
        raise DTypeError(f"linspace: steps must be an int, got {type(steps).__name__}")
    d = dt.as_dtype(dtype) if dtype is not None else dt.DEFAULT_FLOAT
    return create(C.LINSPACE, as_device(device),
                  {"start": start, "end": end, "steps": int(steps), "dtype": d})


def eye(n: int, m: int | None = None, dtype=None, device=None):
    """An ``n x m`` (``n x n`` by default) matrix with ones on the main diagonal."""
    for name, v in (("n", n), ("m", m)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer))):
            raise DTypeError(f"eye: {name} must be an int, got {type(v).__name__} {v!r}")
    n = int(n)
    m = n if m is None else int(m)
    d = dt.as_dtype(dtype) if dtype is not None else dt.DEFAULT_FLOAT
    return create(C.EYE, as_device(device), {"n": n, "m": m, "dtype": d})


# -- random ---------------------------------------------------------------------------------
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
    """Reseed one device's random stream, or with no device every device of every base
    backend, including devices created later (the same seed gives the same tensors)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise DTypeError(f"seed: expects an int, got {type(value).__name__} {value!r}")
    value = int(value) & 0xFFFF_FFFF_FFFF_FFFF  # negative seeds are allowed, as in torch
    if device is not None:
        as_device(device).seed(value)
        return
    from ..backend import base
    base.GLOBAL_SEED = value
    for backend in _base_backends(base.Backend):
        for dev in list(backend._devices.values()):
            dev.seed(value)


def _base_backends(cls):
    """Every interned instance of a base (non-decorator) backend."""
    out = []
    stack = [cls]
    while stack:
        c = stack.pop()
        stack.extend(c.__subclasses__())
        for b in list(c.__dict__.get("_instances", {}).values()):
            if b.inner is None and b not in out:
                out.append(b)
    return out
