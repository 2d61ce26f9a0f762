"""The Cuda backend's ``linear_backward`` (ember/ops/linear.py): a linear layer's gradients as
one op -- ``dx = g @ weight^T`` and ``dweight = x^T g`` over all rows at once through cuBLAS
(`matmul.CublasMatmul`: the transposes read where they lie), and ``dbias``, the column sums
of g's rows, as one reduction kernel of ember's renderer (`column_sum_kernel`, launched on
the kernel runtime: NVRTC, the disk cache, the op's stream). Where the Tensor API's rules
took five or six ops a layer, each dispatched through Autodiff and Fusion, this is one.
f16 is computed in f32 (outputs rounded once by `Cuda._runner`, which also brings bf16 as
f32); any other dtype, or no kernel runtime, runs the reference."""
from __future__ import annotations

import math

import numpy as np

from ... import dtype as dt
from ...kernel import ir
from .ops import contiguous_of

_IR_DT = {np.dtype(np.float32): dt.float32, np.dtype(np.float64): dt.float64}
_F16 = np.dtype(np.float16)


def column_sum_kernel(rows: int, cols: int, dtype) -> ir.Reduce:
    """``out[0, j] = sum_i g[i, j]`` over a C-contiguous ``[rows, cols]`` buffer of
    ``dtype`` (f32 or f64, summed in it)."""
    d = _IR_DT[np.dtype(dtype)]
    return ir.Reduce((rows, cols), 0, (ir.BufferView(d, (cols, 1)),), ir.Load(0, d), "sum",
                     ir.Acc(d), d)


def linear_backward_impl(cp, xp):
    """``CUDA_IMPLS["linear_backward"]``."""
    from ...ops.linear import _bwd_numpy as reference
    runtime = getattr(xp, "ember_kernel_runtime", None)
    contiguous = contiguous_of(xp)
    programs: dict = {}

    def rows_of(a, rows):
        return contiguous(a).reshape(rows, a.shape[-1])   # (a itself where contiguous)

    def column_sum(rt, g2):
        rows, cols = g2.shape
        if rows == 0 or cols == 0:
            return xp.zeros(cols, g2.dtype)
        key = (rows, cols, g2.dtype)
        prog = programs.get(key)
        if prog is None:
            if len(programs) > 256:
                programs.clear()
            prog = programs[key] = rt.compile(column_sum_kernel(rows, cols, g2.dtype))
        (out,) = rt.launch(prog, (g2,), ())
        return out.reshape(cols)

    def linear_backward(g, x, weight, *, need_x, has_bias):
        if x.dtype == _F16:
            g, x, weight = (a.astype(np.float32) for a in (g, x, weight))
        rt = runtime() if runtime is not None else None
        if rt is None or x.dtype not in _IR_DT or g.dtype != x.dtype or \
                weight.dtype != x.dtype:
            return reference(g, x, weight, need_x=need_x, has_bias=has_bias, xp=xp)
        out = [xp.matmul(g, weight.swapaxes(-1, -2))] if need_x else []
        rows = math.prod(x.shape[:-1])
        g2 = rows_of(g, rows)
        out.append(xp.matmul(rows_of(x, rows).swapaxes(-1, -2), g2))
        if has_bias:
            out.append(column_sum(rt, g2))
        return tuple(out)
    return linear_backward
