"""User CUDA kernels: `CustomKernel` (CUDA C of your own, compiled by NVRTC through ember's
kernel cache, launched on CuPy arrays on the current stream) and `register_kernel` (an
implementation of a registry op that the Cuda backend runs instead of its own).

::

    from ember.kernel.cuda import CustomKernel, register_kernel

    relu6 = CustomKernel(r'''
    extern "C" __global__ void relu6(const float *x, float *y, long long n) {
      for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
           i += (long long)gridDim.x * blockDim.x)
        y[i] = fminf(fmaxf(x[i], 0.0f), 6.0f);
    }''', "relu6")

    @register_kernel("relu", dtypes=["float32"])
    def my_relu(x):                      # CuPy arrays in, a CuPy array out
        y = cupy.empty_like(x)
        relu_kernel((blocks,), (256,), (x, y, x.size))
        return y

A registered implementation receives the op's tensor operands as CuPy arrays (C-contiguous,
on the current device) and its attributes as keywords, and returns the output array (or a
tuple for ops with several outputs) of the op's inferred shape and dtype. The Cuda backend
asks `lookup(op, dtypes)` before running an op; under Fusion an op with a registered kernel
is not fused (`has_kernel`), so the hand-written kernel runs as it is. Registrations are
process-wide; `unregister` (or the handle's ``remove()``) takes one back.
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass

from ...errors import BackendUnavailableError, ConfigError

__all__ = ["CustomKernel", "register_kernel", "unregister", "lookup", "has_kernel",
           "registered", "Registration"]


class CustomKernel:
    """A hand-written CUDA C kernel: ``source`` holds ``extern "C" __global__`` function
    ``name``. Compiled on first call for the current device (NVRTC, with ember's options
    and disk cache; ``options`` adds NVRTC flags), then ``kernel(grid, block, args,
    shared_mem=0)`` launches it on CuPy's current stream: ``args`` are CuPy arrays (passed
    as pointers), NumPy scalars (by value) or Python ints/floats (as int64/float64)."""

    def __init__(self, source: str, name: str, *, options=()):
        if not re.search(rf"\b{re.escape(name)}\s*\(", source):
            raise ConfigError(f"CustomKernel: function {name!r} does not appear in the source")
        self.source = source
        self.name = name
        self.options = tuple(options)
        self._fns: dict = {}
        self._lock = threading.Lock()

    def _function(self):
        from .compiler import get_compiler
        from .device import cupy_or_reason, cuda_runtime_major, device_info
        cp, why = cupy_or_reason()
        if cp is None:
            raise BackendUnavailableError(f"CustomKernel {self.name!r}: {why}")
        dev = cp.cuda.runtime.getDevice()
        fn = self._fns.get(dev)
        if fn is not None:
            return fn
        with self._lock:
            fn = self._fns.get(dev)
            if fn is None:
                comp = get_compiler(prefer_major=cuda_runtime_major())
                if not comp.available:
                    raise BackendUnavailableError(f"CustomKernel {self.name!r}: "
                                                  f"{comp.reason}")
                c = comp.build(self.source, device_info(dev).arch, self.options)
                mod = cp.cuda.function.Module()
                mod.load(c.binary)
                fn = self._fns[dev] = (mod, mod.get_function(self.name))
        return fn

    def compile(self):
        """Compile (and load) now, for the current device; returns self."""
        self._function()
        return self

    def __call__(self, grid, block, args, *, shared_mem: int = 0):
        _, fn = self._function()
        grid = tuple(grid) if isinstance(grid, (tuple, list)) else (int(grid),)
        block = tuple(block) if isinstance(block, (tuple, list)) else (int(block),)
        fn(grid, block, tuple(args), shared_mem=shared_mem)


@dataclass(frozen=True)
class Registration:
    """One registered implementation (``dtypes``: the input dtype names it handles, None
    for any). ``remove()`` unregisters it."""
    op: str
    fn: object
    dtypes: frozenset | None

    def remove(self):
        with _LOCK:
            if _REGISTRY.get(self.op) is self:
                del _REGISTRY[self.op]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


_REGISTRY: dict = {}
_LOCK = threading.Lock()


def _dtype_name(d) -> str:
    """The ember dtype name of ``d`` (a DType, a name such as "f32", a NumPy dtype)."""
    from ... import dtype as dt
    return dt.as_dtype(d).name


def register_kernel(op: str, fn=None, *, dtypes=None, replace: bool = True):
    """Register ``fn`` as the Cuda implementation of registry op ``op`` (usable as a
    decorator). ``dtypes``: the input dtypes it handles (names or ember dtypes; default
    any). Returns the `Registration` (or, as a decorator, ``fn``)."""
    from ...ops.registry import OPS
    if op not in OPS:
        close = sorted(n for n in OPS if n.startswith(op[:3]))[:6]
        raise ConfigError(f"register_kernel: {op!r} is not a registry op"
                          + (f" (did you mean {', '.join(close)}?)" if close else "")
                          + "; the ops are listed in ember.ops.registry.OPS")

    def add(f):
        if not callable(f):
            raise ConfigError(f"register_kernel({op!r}): the implementation must be callable "
                              f"(got {type(f).__name__})")
        names = None if dtypes is None else frozenset(_dtype_name(d) for d in dtypes)
        reg = Registration(op, f, names)
        with _LOCK:
            if op in _REGISTRY and not replace:
                raise ConfigError(f"register_kernel: {op!r} already has a registered kernel "
                                  f"({_REGISTRY[op].fn!r}); pass replace=True")
            _REGISTRY[op] = reg
        return reg

    if fn is None:
        def deco(f):
            add(f)
            return f
        return deco
    return add(fn)


def unregister(op: str) -> bool:
    """Remove ``op``'s registered kernel; True if there was one."""
    with _LOCK:
        return _REGISTRY.pop(op, None) is not None


def has_kernel(op: str) -> bool:
    """Whether ``op`` has a registered kernel (for any dtype)."""
    return op in _REGISTRY


def lookup(op: str, dtypes=()):
    """The registered implementation of ``op`` for inputs of ``dtypes``, or None."""
    reg = _REGISTRY.get(op)
    if reg is None:
        return None
    if reg.dtypes is not None and any(_dtype_name(d) not in reg.dtypes for d in dtypes):
        return None
    return reg.fn


def registered() -> dict:
    """``{op: Registration}`` of every registered kernel."""
    return dict(_REGISTRY)
