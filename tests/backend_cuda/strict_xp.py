"""A stand-in for a GPU on machines without one: the Cuda backend's op path run on NumPy
through a namespace that behaves like CuPy's where that matters for a device.

Arrays are `DevArray`s (a NumPy subclass). Outside the `STRICT` namespace's functions, they
refuse what CuPy refuses: NumPy functions called on them (``np.where(dev, ...)``: the op
reference forgot its ``xp``), and mixing with host arrays in arithmetic, indexing or
``take`` (a host constant not moved with ``device_array``). An op whose result is a host
array is caught by the backend. So the conformance cases run on `StrictXp` check, without a
GPU, that every reference runs on a device namespace.
"""
from __future__ import annotations

import threading

import numpy as np

from ember.backend.base import Backend
from ember.backend.cuda import ops as cuda_ops
from ember.backend.cuda.ops import BF16, BF16_NATIVE, F32, resolve

_inside = threading.local()


class LeakError(AssertionError):
    """A reference touched device arrays the way CuPy would refuse."""


def _is_inside():
    return getattr(_inside, "depth", 0) > 0


def _host(x):
    return type(x) is np.ndarray


def _check_index(key):
    for k in key if isinstance(key, tuple) else (key,):
        if _host(k):
            raise LeakError(f"a host array indexes a device array (shape {k.shape})")


class DevArray(np.ndarray):
    """NumPy memory posing as device memory."""

    def __array_function__(self, func, types, args, kwargs):
        if not _is_inside():
            raise LeakError(f"numpy.{func.__name__} called on a device array (use xp)")
        return super().__array_function__(func, types, args, kwargs)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if not _is_inside():
            for x in inputs + tuple(kwargs.get("out", ()) or ()):
                if _host(x):
                    raise LeakError(f"numpy.{ufunc.__name__}.{method} mixes a device array "
                                    f"with a host array of shape {x.shape}")
        args = [x.view(np.ndarray) if isinstance(x, DevArray) else x for x in inputs]
        if "out" in kwargs:
            kwargs["out"] = tuple(x.view(np.ndarray) if isinstance(x, DevArray) else x
                                  for x in kwargs["out"])
        out = getattr(ufunc, method)(*args, **kwargs)
        return _to_dev(out)

    def __getitem__(self, key):
        if not _is_inside():
            _check_index(key)
        return super().__getitem__(key)

    def __setitem__(self, key, value):
        if not _is_inside():
            _check_index(key)
            if _host(value):
                raise LeakError("a host array is written into a device array")
        return super().__setitem__(key, value)

    def take(self, indices, *args, **kwargs):
        if not _is_inside() and _host(indices):
            raise LeakError("take with host indices on a device array")
        return super().take(indices, *args, **kwargs)


def _to_dev(x):
    if isinstance(x, tuple):
        return tuple(_to_dev(v) for v in x)
    if isinstance(x, np.ndarray):
        return x if isinstance(x, DevArray) else x.view(DevArray)
    if isinstance(x, np.generic):
        return np.asarray(x).view(DevArray)
    return x


def _wrap(fn):
    def call(*args, **kwargs):
        _inside.depth = getattr(_inside, "depth", 0) + 1
        try:
            return _to_dev(fn(*args, **kwargs))
        finally:
            _inside.depth -= 1
    return call


class _UFunc:
    """A NumPy ufunc whose call and methods give device arrays."""

    def __init__(self, uf):
        self._uf = uf
        self.__name__ = uf.__name__

    def __call__(self, *a, **k):
        return _wrap(self._uf)(*a, **k)

    def __getattr__(self, name):
        return _wrap(getattr(self._uf, name))


class Namespace:
    """NumPy's functions, each giving device arrays; anything else as NumPy has it."""

    def __init__(self, mod):
        self._mod = mod

    def __getattr__(self, name):
        v = getattr(self._mod, name)
        if isinstance(v, np.ufunc):
            v = _UFunc(v)
        elif name in ("lib", "stride_tricks", "random"):
            v = Namespace(v)
        elif callable(v) and not isinstance(v, type):
            v = _wrap(v)
        setattr(self, name, v)
        return v


STRICT = Namespace(np)
# CuPy's argsort is always stable (and takes no ``kind``)
STRICT.argsort = _wrap(lambda a, axis=-1: np.argsort(a, axis=axis, kind="stable"))


class _Rng:
    def __init__(self, g):
        self._g = g

    def __getattr__(self, name):
        return _wrap(getattr(self._g, name))


class StrictXp(Backend):
    """The Cuda backend's op path (`ember.backend.cuda.ops`) on `DevArray`s."""

    name = "strict_xp"
    kind = "strict"

    def __init__(self):
        super().__init__()
        self._runners = {}
        self._rng = _Rng(np.random.default_rng(0))

    def execute(self, op, prims, attrs, meta, device):
        with np.errstate(all="ignore"):        # a device computes IEEE results silently
            return self._execute(op, prims, attrs, meta)

    def _execute(self, op, prims, attrs, meta):
        fn = self._runners.get(op)
        if fn is None:
            # CUDA_IMPLS entries are CuPy code (raw kernels, cuBLAS): their references stand in
            fn = _wrap(op.numpy) if cuda_ops.how(op) == "impl" else resolve(op, STRICT, STRICT)
            self._runners[op] = fn
        if op.category == "random":
            out = fn(self._rng, **attrs)
        else:
            if op.name not in BF16_NATIVE and any(
                    isinstance(p, np.ndarray) and p.dtype == BF16 for p in prims):
                prims = tuple(p.astype(F32) if isinstance(p, np.ndarray) and p.dtype == BF16
                              else p for p in prims)
            out = fn(*prims, **attrs)
        if op.nout == 1:
            return self._fix(op, out, meta)
        return tuple(self._fix(op, o, m) for o, m in zip(out, meta))

    @staticmethod
    def _fix(op, out, m):
        if not isinstance(out, DevArray):
            raise LeakError(f"{op.name} returned {type(out).__name__}, not a device array")
        return out if out.dtype == m[1].np else out.astype(m[1].np)

    def from_numpy(self, array, device):
        return np.array(array, copy=True).view(DevArray)

    def to_numpy(self, prim):
        return np.array(prim.view(np.ndarray), copy=True)

    def seed(self, device, seed):
        self._rng = _Rng(np.random.default_rng(seed))
