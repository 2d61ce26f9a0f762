"""Contiguous copies of strided CuPy arrays as kernels of ember's own renderer.

CuPy copies a non-contiguous array (``ascontiguousarray``, a ``reshape`` that cannot be a
view) with an indexing kernel that divides by sizes it learns at run time, in 64 bits: on an
H200 a permuted [32, 6, 256, 64] f32 array (3 MiB, the GPT step's attention heads) took
17 µs, 0.37 TB/s against the 4.27 TB/s of a plain copy. `StridedCopy` runs the copy as the
`ir.Elementwise` Fusion emits for a strided buffer -- one strided load per element, sizes
and strides compiled in, 32-bit indexing where they fit, vectorized stores -- on the kernel
runtime (NVRTC; binaries cached on disk), a program per layout: a training step's layouts
repeat. Elements move as integers of their width, so every bit (a NaN's payload too) is
kept. Where no kernel can run (no NVRTC, an empty array) CuPy copies.

`reshape_strides` is NumPy's rule for a reshape without a copy, asked of a dummy array of
the same layout: the Cuda backend's ``reshape`` views where it can and copies here where
it cannot.
"""
from __future__ import annotations

import numpy as np

from ... import dtype as dt
from ...kernel import ir
from ..fusion.lower import load_expr

#: element width in bytes -> the integer dtype that moves it
_BITS = {1: (np.dtype(np.uint8), dt.uint8), 2: (np.dtype(np.int16), dt.int16),
         4: (np.dtype(np.int32), dt.int32), 8: (np.dtype(np.int64), dt.int64)}


def copy_kernel(shape: tuple, strides: tuple, itemsize: int,
                count: int = 1) -> ir.Elementwise | None:
    """The kernel writing C-contiguous copies of ``count`` buffers of one ``shape`` and
    element ``strides`` (elements ``itemsize`` bytes wide; one output each), or None for a
    width it cannot move."""
    bits = _BITS.get(itemsize)
    if bits is None:
        return None
    d = bits[1]
    view = ir.BufferView(d, tuple(strides), 0)
    return ir.Elementwise(tuple(shape), (view,) * count,
                          tuple(load_expr(i, d) for i in range(count)), (d,) * count)


class StridedCopy:
    """``copy(x)``: ``x`` itself where C-contiguous, else a C-contiguous copy queued on the
    current stream (the caller's scope). ``runtime()`` gives the CUDA kernel runtime, or
    None where it cannot run."""

    #: programs kept per instance (past it the cache starts over)
    MAX_PROGRAMS = 512

    def __init__(self, cp, runtime):
        self.cp = cp
        self._runtime = runtime
        #: (shape, strides, dtype, arrays) -> program, or None (CuPy copies that layout)
        self._programs: dict = {}

    def __call__(self, x):
        if x._c_contiguous:
            return x
        prog = self._program(x, 1)
        if prog is None:
            return self.cp.ascontiguousarray(x)
        rt, program, bits = prog
        return rt.launch(program, (x.view(bits),))[0].view(x.dtype)

    def many(self, xs) -> list:
        """``[copy(x) for x in xs]``, the arrays of one layout (shape, strides, dtype) that
        need a copy copied by one kernel (attention's split heads: three arrays, one
        launch)."""
        out = list(xs)
        groups: dict = {}
        for i, x in enumerate(out):
            if not x._c_contiguous:
                groups.setdefault((x.shape, x.strides, x.dtype), []).append(i)
        for idx in groups.values():
            if len(idx) == 1:
                out[idx[0]] = self(out[idx[0]])
                continue
            x = out[idx[0]]
            prog = self._program(x, len(idx))
            if prog is None:
                for i in idx:
                    out[i] = self.cp.ascontiguousarray(out[i])
                continue
            rt, program, bits = prog
            copies = rt.launch(program, tuple(out[i].view(bits) for i in idx))
            for i, c in zip(idx, copies):
                out[i] = c.view(x.dtype)
        return out

    def _program(self, x, count):
        """``(runtime, program, integer dtype)`` copying ``count`` arrays laid out as
        ``x``, or None (CuPy copies)."""
        key = (x.shape, x.strides, x.dtype, count)
        prog = self._programs.get(key, False)
        if prog is False:
            prog = self._build(x, count)
            if len(self._programs) >= self.MAX_PROGRAMS:
                self._programs = {}
            self._programs[key] = prog
        return prog

    def _build(self, x, count=1):
        if x.size == 0 or x.ndim == 0:
            return None
        item = x.itemsize
        if any(s % item for s in x.strides):
            return None
        rt = self._runtime()
        k = copy_kernel(x.shape, tuple(s // item for s in x.strides), item, count)
        if rt is None or k is None:
            return None
        try:
            return rt, rt.compile(k), _BITS[item][0]
        except Exception:  # noqa: BLE001  (a layout the renderer cannot take: CuPy copies)
            return None


def reshape_strides(shape: tuple, strides: tuple, itemsize: int, new_shape: tuple):
    """The byte strides of a view of ``shape``/``strides`` reshaped to ``new_shape`` without
    a copy, or None where the reshape needs one (NumPy's rule, which CuPy shares)."""
    dummy = np.lib.stride_tricks.as_strided(np.empty(1, np.dtype((np.void, itemsize))),
                                            shape, strides)
    try:
        return np.reshape(dummy, new_shape, copy=False).strides
    except ValueError:
        return None
    except TypeError:                 # NumPy 2.0: no ``copy`` argument
        v = dummy.view()
        try:
            v.shape = new_shape
        except AttributeError:
            return None
        return v.strides
