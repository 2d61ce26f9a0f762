"""Concatenation as one kernel launched directly: ``cupy.concatenate`` costs 33-38 µs of host
time a call on the H200 machine (torch.cat 8), and a GPT step makes 18 (the packed q/k/v
weights and biases, the packed q/k/v gradient).

C-contiguous inputs of one dtype, joined along ``axis``, are ``rows x width_k`` blocks
(``rows`` = the product of the dims before ``axis``) copied into column ranges of one
``rows x width`` output; `CONCAT_SLOTS` inputs a launch (``blockIdx.y`` picks the input),
their elements moved as unsigned integers of their size, so every dtype is one of four
kernels. Anything else (strided inputs, mixed dtypes, no NVRTC) goes to CuPy's.
"""
from __future__ import annotations

import math

from .ops import _direct_function

#: inputs one launch copies
CONCAT_SLOTS = 4
_BLOCK = 256
_WIDTHS = (1, 2, 4, 8)

CONCAT_SOURCE = r"""
#define EMBER_CONCAT(B, T)                                                                  \
  extern "C" __global__ void __launch_bounds__(256) ember_concat_b##B(                      \
      T* out, long long width, long long rows, const T* s0, const T* s1, const T* s2,       \
      const T* s3, long long w0, long long w1, long long w2, long long w3, long long c0,     \
      long long c1, long long c2, long long c3) {                                           \
    const T* src = s0;                                                                      \
    long long w = w0, col = c0;                                                             \
    switch (blockIdx.y) {                                                                   \
      case 1: src = s1; w = w1; col = c1; break;                                            \
      case 2: src = s2; w = w2; col = c2; break;                                            \
      case 3: src = s3; w = w3; col = c3; break;                                            \
      default: break;                                                                       \
    }                                                                                       \
    const long long n = rows * w;                                                           \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;            \
         i += (long long)gridDim.x * blockDim.x) {                                          \
      const long long r = i / w;                                                            \
      out[r * width + col + (i - r * w)] = src[i];                                          \
    }                                                                                       \
  }
EMBER_CONCAT(1, unsigned char)
EMBER_CONCAT(2, unsigned short)
EMBER_CONCAT(4, unsigned int)
EMBER_CONCAT(8, unsigned long long)
"""

_PARAMS = "=Qqq" + "Q" * CONCAT_SLOTS + "q" * (2 * CONCAT_SLOTS)


def concat_plan(shapes, axis: int):
    """``(out_shape, rows, widths, columns, width)`` of C-contiguous arrays of ``shapes``
    joined along ``axis`` (already in range): each input a ``rows x widths[k]`` block at
    column ``columns[k]`` of the ``rows x width`` output; None where the shapes do not join
    (CuPy's concatenate then says why)."""
    first = shapes[0]
    nd = len(first)
    if not 0 <= axis < nd:
        return None
    for s in shapes:
        if len(s) != nd or s[:axis] != first[:axis] or s[axis + 1:] != first[axis + 1:]:
            return None
    rows = math.prod(first[:axis])
    inner = math.prod(first[axis + 1:])
    widths = [s[axis] * inner for s in shapes]
    columns, c = [], 0
    for w in widths:
        columns.append(c)
        c += w
    out_shape = first[:axis] + (sum(s[axis] for s in shapes),) + first[axis + 1:]
    return out_shape, rows, widths, columns, c


class Concatenate:
    """``concatenate(arrays, axis=0)`` as CuPy's, on the current stream; ``run`` is the
    Cuda backend's direct path for the ``cat`` op (the thread's stream and reused outputs)."""

    def __init__(self, cp):
        from ...kernel.cuda.launch import DirectLauncher
        self.cp = cp
        self._direct = DirectLauncher()
        self._fns: dict = {}

    def _fn(self, width, dev):
        return _direct_function(self._fns, (width, dev), lambda _: CONCAT_SOURCE, None,
                                f"ember_concat_b{width}")

    def __call__(self, arrays, axis=0, **kwargs):
        if not kwargs and isinstance(arrays, (list, tuple)) and arrays:
            cp = self.cp
            out = self._concat(arrays, axis, None, cp.cuda.get_current_stream().ptr, None,
                               cp.cuda.runtime.getDevice())
            if out is not None:
                return out
        return self.cp.concatenate(arrays, axis=axis, **kwargs)

    def run(self, prims, attrs, meta, scope, device):
        shape, dtype = meta
        return self._concat(prims, attrs["dim"], (tuple(shape), dtype.np), scope.stream_ptr,
                            scope.outputs, device)

    def _concat(self, arrays, axis, meta, stream, outputs, device):
        """The joined array, or None where this path does not take the inputs."""
        nd = self.cp.ndarray
        a0 = arrays[0]
        if type(a0) is not nd:
            return None
        dtype = a0.dtype
        for a in arrays:
            if type(a) is not nd or a.dtype != dtype or not a._c_contiguous:
                return None
        item = dtype.itemsize
        if item not in _WIDTHS or type(axis) is not int:
            return None
        ndim = a0.ndim
        if axis < 0:
            axis += ndim
        plan = concat_plan([a.shape for a in arrays], axis)
        if plan is None:
            return None
        out_shape, rows, widths, columns, width = plan
        if meta is not None and (meta[0] != out_shape or meta[1] != dtype):
            return None
        f = self._fn(item, device)
        if f is None:
            return None
        nbytes = rows * width * item
        out = outputs.take(out_shape, dtype, nbytes) if outputs is not None and nbytes \
            else None
        if out is None:
            out = nd(out_shape, dtype)
        if not nbytes:
            return out
        direct = self._direct
        cap = direct.grid_cap(device, _BLOCK)
        live = [k for k, w in enumerate(widths) if w]
        for lo in range(0, len(live), CONCAT_SLOTS):
            part = live[lo:lo + CONCAT_SLOTS]
            pad = CONCAT_SLOTS - len(part)
            ptrs = [arrays[k].data.ptr for k in part] + [0] * pad
            ws = [widths[k] for k in part] + [0] * pad
            cols = [columns[k] for k in part] + [0] * pad
            grid = min(-(-rows * max(ws) // _BLOCK), cap)
            params = direct.pack(_PARAMS, out.data.ptr, width, rows, *ptrs, *ws, *cols)
            direct.raw_launch(f[1], grid, len(part), 1, _BLOCK, 1, 1, 0, stream, params, 0)
        return out

