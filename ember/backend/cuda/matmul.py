"""Batched matrix products on cuBLAS, with the compute type chosen here rather than by CuPy.

``cupy.matmul`` on stacks of matrices converts f16 to f32 (no tensor cores) and ignores the
TF32 setting; one ``cublasGemmStridedBatchedEx`` call does each product instead:

* f16, bf16: tensor cores, accumulating in f32, rounded once to the output dtype;
* f32: full f32 (``CUBLAS_COMPUTE_32F``) unless ``em.set_matmul_precision`` allows TF32;
* f64: f64. Int dtypes go to CuPy's own (wrapping) integer kernel.

Operands broadcast over their batch dims; a batch of one is read with stride 0 (no copy).
"""
from __future__ import annotations

import numpy as np

from .. import precision

_F16, _F32, _F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)


def _bf16():
    import ml_dtypes
    return np.dtype(ml_dtypes.bfloat16)


class CublasMatmul:
    """``matmul(a, b)`` for CuPy arrays of >= 2 dims (the registry's matmul primitive)."""

    def __init__(self, cupy):
        self.cp = cupy
        self._types = None      # cuBLAS is loaded on the first product, not at import

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

    def __call__(self, a, b):
        cp = self.cp
        if self._types is None:
            self._setup()
        types = self._types.get(a.dtype)
        if types is None or b.dtype != a.dtype or a.ndim < 2 or b.ndim < 2:
            return cp.matmul(a, b)            # ints (and anything unusual): CuPy's kernels
        cuda_t, compute, scalar_t = types
        if compute == self._c32 and a.dtype == _F32 and precision.allow_tf32():
            compute = self._c32_tf32
        n, k = a.shape[-2:]
        m = b.shape[-1]
        ba, bb = a.shape[:-2], b.shape[:-2]
        batch = ba if ba == bb else np.broadcast_shapes(ba, bb)
        out = cp.empty(batch + (n, m), a.dtype)
        if out.size == 0:
            return out
        if k == 0:
            out.fill(0)
            return out
        count = out.size // (n * m)
        a, sa = _operand(cp, a, batch, count)
        b, sb = _operand(cp, b, batch, count)
        one = np.ones((), scalar_t)
        zero = np.zeros((), scalar_t)
        # row-major C = A B is column-major C^T = B^T A^T: swap the operands
        self._cublas.gemmStridedBatchedEx(
            self._device.get_cublas_handle(), 0, 0, m, n, k, one.ctypes.data,
            b.data.ptr, cuda_t, m, sb, a.data.ptr, cuda_t, k, sa, zero.ctypes.data,
            out.data.ptr, cuda_t, m, n * m, count, compute, self._algo)
        return out


def _operand(cp, x, batch, count):
    """``x`` as contiguous matrices for a batch of ``count``, and its batch stride (0 for a
    single matrix shared by the whole batch)."""
    mat = x.shape[-2] * x.shape[-1]
    xb = x.shape[:-2]
    if int(np.prod(xb, dtype=np.int64)) == 1:
        return cp.ascontiguousarray(x.reshape(x.shape[-2:])), 0
    if xb != batch:
        x = cp.broadcast_to(x, batch + x.shape[-2:])
    return cp.ascontiguousarray(x), mat
