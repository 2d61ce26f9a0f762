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


def copy_kernel(shape: tuple, strides: tuple, itemsize: int) -> ir.Elementwise | None:
    """The kernel writing a C-contiguous copy of a buffer of ``shape`` and element
    ``strides`` (elements ``itemsize`` bytes wide), or None for a width it cannot move."""
    bits = _BITS.get(itemsize)
    if bits is None:
        return None
    d = bits[1]
    return ir.Elementwise(tuple(shape), (ir.BufferView(d, tuple(strides), 0),),
                          (load_expr(0, d),), (d,))


class StridedCopy:
    """``copy(x)``: ``x`` itself where C-contiguous, else a C-contiguous copy queued on the
    current stream (the caller's scope). ``runtime()`` gives the CUDA kernel runtime, or
    None where it cannot run."""

    #: programs kept per instance (past it the cache starts over)
    MAX_PROGRAMS = 512

    def __init__(self, cp, runtime):
        self.cp = cp
        self._runtime = runtime
        #: (shape, strides, dtype) -> program, or None (CuPy copies that layout)
        self._programs: dict = {}

    def __call__(self, x):
        if x._c_contiguous:
            return x
        key = (x.shape, x.strides, x.dtype)
        prog = self._programs.get(key, False)
        if prog is False:
            prog = self._build(x)
            if len(self._programs) >= self.MAX_PROGRAMS:
                self._programs = {}
            self._programs[key] = prog
        if prog is None:
            return self.cp.ascontiguousarray(x)
        rt, program, bits = prog
        return rt.launch(program, (x.view(bits),))[0].view(x.dtype)

    def _build(self, x):
        if x.size == 0 or x.ndim == 0:
            return None
        item = x.itemsize
        if any(s % item for s in x.strides):
            return None
        rt = self._runtime()
        k = copy_kernel(x.shape, tuple(s // item for s in x.strides), item)
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
