"""Batched matrix products on cuBLAS, with the compute type chosen here rather than by CuPy.

``cupy.matmul`` on stacks of matrices converts f16 to f32 (no tensor cores) and ignores the
TF32 setting; one ``cublasGemmStridedBatchedEx`` call does each product instead:

* f16, bf16: tensor cores, accumulating in f32, rounded once to the output dtype;
* f32: full f32 (``CUBLAS_COMPUTE_32F``) unless ``em.set_matmul_precision`` allows TF32;
* f64: f64. Int dtypes go to CuPy's own (wrapping) integer kernel.

Operands are read where they lie (`layout`): a transposed operand (``w.transpose()`` in a
backward pass) with cuBLAS's transpose flag, a slice of rows with its row stride as the
leading dimension, batch dims broadcast against the other operand's (a single matrix with
batch stride 0) or stepping with one stride. Only what cuBLAS cannot express (negative or
overlapping strides, batch dims that broadcast partially) is copied first.
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from .. import precision

_F16, _F32, _F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)


def _bf16():
    import ml_dtypes
    return np.dtype(ml_dtypes.bfloat16)


class CublasMatmul:
    """``matmul(a, b)`` for CuPy arrays of >= 2 dims (the registry's matmul primitive)."""

    #: plans kept (past it the dict starts over)
    MAX_PLANS = 4096

    def __init__(self, cupy, contiguous=None):
        self.cp = cupy
        #: ``contiguous(x)``: a C-contiguous copy of an operand cuBLAS cannot read as it lies
        #: (`copy.StridedCopy`; CuPy's by default)
        self.contiguous = contiguous or cupy.ascontiguousarray
        self._types = None      # cuBLAS is loaded on the first product, not at import
        #: (shapes, strides, dtype, TF32 allowed) -> `_plan`'s gemm arguments, or None
        #: (operands to copy first: the general path)
        self._plans: dict = {}

    def _setup(self):
        from cupy.cuda import cublas, device, runtime
        self._cublas, self._device = cublas, device
        c32 = getattr(cublas, "CUBLAS_COMPUTE_32F", 68)
        self._c32_tf32 = getattr(cublas, "CUBLAS_COMPUTE_32F_FAST_TF32", 77)
        self._c32 = c32
        self._algo = getattr(cublas, "CUBLAS_GEMM_DEFAULT", -1)
        # dtype -> (cuda data type, compute type, scalar dtype for alpha/beta)
        self._types = {
            _F16: (getattr(runtime, "CUDA_R_16F", 2), c32, _F32),
            _bf16(): (getattr(runtime, "CUDA_R_16BF", 14), c32, _F32),
            _F32: (getattr(runtime, "CUDA_R_32F", 0), c32, _F32),
            _F64: (getattr(runtime, "CUDA_R_64F", 1), getattr(cublas, "CUBLAS_COMPUTE_64F", 70),
                   _F64),
        }
        # alpha = 1, beta = 0 as host scalars (read by cuBLAS before the call returns),
        # kept alive here: (address of 1, address of 0) per scalar dtype
        self._keep = {t: (np.ones((), t), np.zeros((), t)) for t in (_F32, _F64)}
        self._scalars = {t: (o.ctypes.data, z.ctypes.data) for t, (o, z) in self._keep.items()}
        self._gemm = cublas.gemmStridedBatchedEx

    def __call__(self, a, b, ta=False, tb=False, out=None):
        """``a @ b`` (each transposed first where ``ta``/``tb``); ``out``: a C-contiguous
        array of the product's shape and dtype to write it into (attention's backward pass
        writes dq, dk, dv into one buffer), else a new array."""
        if ta:          # (the primitive's transpose flags: a view, read with cuBLAS's own)
            a = a.swapaxes(-1, -2)
        if tb:
            b = b.swapaxes(-1, -2)
        # operands of a layout seen before (a training step's products, every step): the
        # gemm's arguments as worked out then, without the layout analysis below
        key = (a.shape, a.strides, b.shape, b.strides, a.dtype, b.dtype,
               precision.allow_tf32())
        plan = self._plans.get(key, False)
        if plan is False:
            if self._types is None:
                self._setup()
            plan = self._plan(a, b, key[-1])
            if len(self._plans) >= self.MAX_PLANS:
                self._plans = {}
            self._plans[key] = plan
        if plan is None:
            res = self._general(a, b)
            if out is None:
                return res
            self._check_out(out, res.shape, res.dtype)
            out[...] = res
            return out
        out_shape, dtype, tb, ta, m, n, k, one, ldb, sb, lda, sa, zero, cuda_t, stride, \
            count, compute = plan
        if out is None:
            out = self.cp.ndarray(out_shape, dtype)
        else:
            self._check_out(out, out_shape, dtype)
        self._gemm(self._device.get_cublas_handle(), tb, ta, m, n, k, one, b.data.ptr,
                   cuda_t, ldb, sb, a.data.ptr, cuda_t, lda, sa, zero, out.data.ptr, cuda_t,
                   m, stride, count, compute, self._algo)
        return out

    @staticmethod
    def _check_out(out, shape, dtype):
        if tuple(out.shape) != tuple(shape) or out.dtype != dtype or not out._c_contiguous:
            raise ShapeError(f"matmul: out= must be a C-contiguous {np.dtype(dtype)} array of "
                             f"shape {tuple(shape)}; got {out.dtype} {tuple(out.shape)}"
                             f"{'' if out._c_contiguous else ' (strided)'}")

    def _plan(self, a, b, tf32):
        """The gemm's arguments for operands laid out as ``a`` and ``b`` (all but the
        pointers), or None where `_general` must run: an operand to copy first, an empty
        product, a dtype cuBLAS does not take here."""
        types = self._types.get(a.dtype)
        if types is None or b.dtype != a.dtype or a.ndim < 2 or b.ndim < 2:
            return None
        ashape, bshape = a.shape, b.shape
        n, k = ashape[-2:]
        m = bshape[-1]
        ba, bb = ashape[:-2], bshape[:-2]
        batch = ba if ba == bb else np.broadcast_shapes(ba, bb)
        count = int(np.prod(batch, dtype=np.int64)) if batch else 1
        if count == 0 or n * m == 0 or k == 0:
            return None
        la = layout(ashape, a.strides, a.itemsize, batch)
        lb = layout(bshape, b.strides, b.itemsize, batch)
        if la is None or lb is None:
            return None
        (ta, lda, sa), (tb, ldb, sb) = la, lb
        if count == 1:
            sa = sb = 0
        cuda_t, compute, scalar_t = types
        if compute == self._c32 and a.dtype == _F32 and tf32:
            compute = self._c32_tf32
        out_shape = batch + (n, m)
        if count > 1 and sb == 0 and ta == _OP_N and sa == n * lda:
            n, count = n * count, 1          # (as in `_general`)
        one, zero = self._scalars[scalar_t]
        return (out_shape, a.dtype, tb, ta, m, n, k, one, ldb, sb, lda, sa, zero, cuda_t,
                n * m, count, compute)

    def _general(self, a, b):
        """Any product: operands cuBLAS cannot read as they lie are copied first."""
        cp = self.cp
        if self._types is None:
            self._setup()
        types = self._types.get(a.dtype)
        if types is None or b.dtype != a.dtype or a.ndim < 2 or b.ndim < 2:
            return cp.matmul(a, b)            # ints (and anything unusual): CuPy's kernels
        cuda_t, compute, scalar_t = types
        if compute == self._c32 and a.dtype == _F32 and precision.allow_tf32():
            compute = self._c32_tf32
        ashape, bshape = a.shape, b.shape
        n, k = ashape[-2:]
        m = bshape[-1]
        ba, bb = ashape[:-2], bshape[:-2]
        batch = ba if ba == bb else np.broadcast_shapes(ba, bb)
        out = cp.ndarray(batch + (n, m), a.dtype)
        count = out.size // (n * m) if n * m else 0
        if count == 0:
            return out
        if k == 0:
            out.fill(0)
            return out
        a, ta, lda, sa = _operand(cp, self.contiguous, a, n, k, batch, count)
        b, tb, ldb, sb = _operand(cp, self.contiguous, b, k, m, batch, count)
        if count > 1 and sb == 0 and ta == _OP_N and sa == n * lda:
            # one right matrix for the whole batch (a linear layer on [batch, seq, d]) and
            # the left matrices' rows evenly spaced: one product of all the rows
            n, count = n * count, 1
        one, zero = self._scalars[scalar_t]
        # row-major C = A B is column-major C^T = B^T A^T: swap the operands (a row-major
        # operand is its column-major transpose as it lies; a transposed one is read with
        # the transpose flag)
        self._gemm(self._device.get_cublas_handle(), tb, ta, m, n, k, one,
                   b.data.ptr, cuda_t, ldb, sb, a.data.ptr, cuda_t, lda, sa, zero,
                   out.data.ptr, cuda_t, m, n * m, count, compute, self._algo)
        return out


_OP_N, _OP_T = 0, 1


def layout(shape, strides, itemsize, batch):
    """How cuBLAS reads an operand of ``shape``/``strides`` (bytes) as ``prod(batch)``
    row-major matrices of its last two dims, without a copy: ``(trans, ld, batch stride)``
    in elements, or None where it cannot (then the operand is copied).

    The matrices are read as they lie when each row is contiguous (``trans`` N, ``ld`` the
    row stride) or each column is (a transposed operand: ``trans`` T, ``ld`` the column
    stride); the batch dims, broadcast against ``batch``, must step through the matrices
    with one stride (0 for a single matrix shared by the batch)."""
    r, c = shape[-2], shape[-1]
    s0, s1 = strides[-2], strides[-1]
    if s0 % itemsize or s1 % itemsize:
        return None
    s0 //= itemsize
    s1 //= itemsize
    if (c == 1 or s1 == 1) and (r == 1 or s0 >= max(1, c)):
        trans, ld = _OP_N, (s0 if r > 1 else max(1, c))
    elif (r == 1 or s0 == 1) and (c == 1 or s1 >= max(1, r)):
        trans, ld = _OP_T, (s1 if c > 1 else max(1, r))
    else:
        return None
    # the batch: from the innermost dim out, each dim of size > 1 must step by the stride
    # of one matrix times the matrices inside it (or every stride is 0: broadcast)
    xb = len(shape) - 2
    stride = None
    inner = 1
    for i in range(1, len(batch) + 1):
        size = batch[-i]
        if size == 1:
            continue
        if i <= xb and shape[xb - i] != 1:
            s = strides[xb - i]
            if s % itemsize:
                return None
            s //= itemsize
        else:
            s = 0
        if stride is None:
            if s < 0:
                return None
            stride = s
        elif s != stride * inner:
            return None
        inner *= size
    return trans, ld, (stride or 0)


def _operand(cp, contiguous, x, r, c, batch, count):
    """``(array, trans, ld, batch stride)`` of operand ``x`` (logical matrices r x c) for a
    batch of ``count``: ``x`` itself where cuBLAS can read its layout, else a contiguous
    copy (of ``x`` broadcast to the batch where its batch dims do not fit one stride)."""
    lay = layout(x.shape, x.strides, x.itemsize, batch)
    if lay is not None:
        trans, ld, stride = lay
        return x, trans, ld, (stride if count > 1 else 0)
    if x.shape[:-2] != batch and count > 1:
        x = cp.broadcast_to(x, batch + x.shape[-2:])
        if layout(x.shape, x.strides, x.itemsize, batch) is None:
            x = contiguous(x)
    else:
        x = contiguous(x)
    trans, ld, stride = layout(x.shape, x.strides, x.itemsize, batch)
    return x, trans, ld, (stride if count > 1 else 0)
