"""cuBLAS reads matmul operands where they lie (ember/backend/cuda/matmul.py, `layout`).

Without a GPU: for NumPy arrays of many layouts (transposed, row slices, batch permutations,
broadcast batches, flips), what `layout` tells cuBLAS to read -- matrix by matrix, with the
transpose flag, leading dimension and batch stride -- is the operand's data, and the
leading dimensions are valid; the usual autodiff operands (``w.T``, ``x.T``) need no copy.
The transpose flags (``ta``/``tb``) are checked the same way. On a GPU: products of such
operands match NumPy float64 for every float dtype."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.backend.cuda.matmul import layout


def _read(mem, off, lay, r, c, count):
    """The ``count`` r x c matrices cuBLAS reads from flat ``mem`` starting at ``off``."""
    trans, ld, stride = lay
    stride = stride if count > 1 else 0
    b = np.arange(count)[:, None, None] * stride
    i = np.arange(r)[None, :, None]
    j = np.arange(c)[None, None, :]
    idx = off + b + (i * ld + j if trans == 0 else j * ld + i)
    return mem[idx]


def _random_views(rng, n=4000):
    mem = np.arange(4096, dtype=np.float64)
    for _ in range(n):
        nd = int(rng.integers(2, 5))
        shape = tuple(int(x) for x in rng.integers(1, 4, size=nd))
        a = mem[:int(np.prod(shape))].reshape(shape)
        if rng.random() < 0.5:
            a = np.swapaxes(a, -1, -2)
        if rng.random() < 0.3 and a.ndim > 2:
            a = a.transpose(list(rng.permutation(a.ndim - 2)) + [a.ndim - 2, a.ndim - 1])
        if rng.random() < 0.3:
            a = a[..., ::2, :]
        if rng.random() < 0.2:
            a = a[..., ::-1]
        if rng.random() < 0.2:
            a = np.broadcast_to(a[..., :1, :], a.shape[:-2] + (3, a.shape[-1]))
        batch = a.shape[:-2]
        if rng.random() < 0.4:
            batch = (int(rng.integers(1, 3)),) + batch
        yield mem, a, batch


def test_layout_reads_the_operand():
    rng = np.random.default_rng(0)
    taken = copied = 0
    for mem, a, batch in _random_views(rng):
        lay = layout(a.shape, a.strides, a.itemsize, batch)
        if lay is None:
            copied += 1
            continue
        taken += 1
        trans, ld, _ = lay
        r, c = a.shape[-2:]
        assert ld >= max(1, c if trans == 0 else r), (a.shape, a.strides, lay)
        count = int(np.prod(batch))
        off = (a.__array_interface__["data"][0] - mem.__array_interface__["data"][0]) // 8
        got = _read(mem, off, lay, r, c, count)
        want = np.broadcast_to(a, batch + (r, c)).reshape(count, r, c)
        np.testing.assert_array_equal(got, want, err_msg=f"{a.shape} {a.strides} {batch}")
    assert taken > 1000 and copied > 200


def test_training_operands_need_no_copy():
    f = np.zeros((64, 784), np.float32)
    w = np.zeros((784, 256), np.float32)
    for x in (f, w, f.T, w.T, f[:, :100], f[8:40], w.T[:, 3:]):
        assert layout(x.shape, x.strides, 4, ()) is not None, x.strides
    q = np.zeros((8, 6, 256, 64), np.float32)          # [B, H, T, D] attention operands
    for x in (q, q.swapaxes(-1, -2), q[:, :, :128]):
        assert layout(x.shape, x.strides, 4, (8, 6)) is not None, x.strides
    # heads split off [B, T, H, D] without a copy step through B and H with two strides:
    # one strided batch cannot say that (copied)
    heads = np.zeros((8, 256, 6, 64), np.float32).swapaxes(1, 2)
    assert layout(heads.shape, heads.strides, 4, (8, 6)) is None
    assert layout(w.shape, w.strides, 4, (8, 6)) == (0, 256, 0)      # shared by the batch
    assert layout(q[:, :, ::-1].shape, q[:, :, ::-1].strides, 4, (8, 6)) is None   # flipped


# -- the gemm's arguments, without a GPU: cuBLAS emulated on host memory ----------------------
class _HostArray(np.ndarray):
    """A NumPy array that shows its address as CuPy's ``.data.ptr``."""

    @property
    def data(self):
        return type("Ptr", (), {"ptr": self.__array_interface__["data"][0]})()


class _HostCupy:
    """What `CublasMatmul` calls of CuPy, on NumPy arrays (`_HostArray`)."""

    @staticmethod
    def ndarray(shape, dtype):
        return np.full(shape, np.nan, dtype).view(_HostArray)

    @staticmethod
    def ascontiguousarray(x):
        return np.ascontiguousarray(x).view(_HostArray)

    @staticmethod
    def broadcast_to(x, shape):
        return np.broadcast_to(x, shape).view(_HostArray)

    @staticmethod
    def matmul(a, b):
        raise AssertionError("float products go to the gemm")


def _host_gemm(calls):
    """``cublasGemmStridedBatchedEx`` on host memory (column-major, as cuBLAS reads it)."""
    import ctypes
    sizes = {0: 4, 1: 8}

    def read(ptr, itemsize, trans, rows, cols, ld, stride, count):
        # op(X) is rows x cols; X lies column-major with leading dim ld (transposed: cols x
        # rows); matrix i starts stride elements after matrix i - 1
        step = (1, ld) if trans == 0 else (ld, 1)
        span = 1 + (count - 1) * stride + (rows - 1) * step[0] + (cols - 1) * step[1]
        ct = ctypes.c_float if itemsize == 4 else ctypes.c_double
        flat = np.ctypeslib.as_array((ct * span).from_address(ptr))
        return np.lib.stride_tricks.as_strided(
            flat, (count, rows, cols), (stride * itemsize, step[0] * itemsize,
                                        step[1] * itemsize))

    def gemm(handle, ta, tb, m, n, k, alpha, a, at, lda, sa, b, bt, ldb, sb, beta, c, ct,
             ldc, sc, count, compute, algo):
        calls.append((ta, tb, m, n, k, count))
        size = sizes[at]
        assert at == bt == ct and lda >= (m if ta == 0 else k) and \
            ldb >= (k if tb == 0 else n) and ldc >= m
        prod = read(a, size, ta, m, k, lda, sa, count) @ read(b, size, tb, k, n, ldb, sb,
                                                                 count)
        read(c, size, 0, m, n, ldc, sc, count)[...] = prod
    return gemm


def _host_matmul():
    from ember.backend.cuda.matmul import CublasMatmul
    mm = CublasMatmul(_HostCupy())
    calls = []
    keep = {t: (np.ones((), t), np.zeros((), t)) for t in (np.float32, np.float64)}
    mm._types = {np.dtype(np.float32): (0, 68, np.dtype(np.float32)),
                 np.dtype(np.float64): (1, 70, np.dtype(np.float64))}
    mm._c32, mm._c32_tf32, mm._algo = 68, 77, -1
    mm._scalars = {np.dtype(t): (o.ctypes.data, z.ctypes.data) for t, (o, z) in keep.items()}
    mm._keep = keep
    mm._gemm = _host_gemm(calls)
    mm._device = type("Dev", (), {"get_cublas_handle": staticmethod(lambda: 0)})
    return mm, calls


def test_gemm_arguments_compute_the_product_on_every_layout():
    """The arguments `CublasMatmul` gives cuBLAS -- worked out anew, or from the plan kept
    for a layout seen before -- compute ``a @ b`` for the random layouts above (as left and
    right operands, with a batch-shared right matrix folded into rows), in NumPy."""
    mm, calls = _host_matmul()
    rng = np.random.default_rng(3)
    checked = planned = 0
    for _, a, batch in _random_views(rng, n=600):
        k = a.shape[-1]
        for right in (rng.normal(size=batch + (k, 3)), rng.normal(size=(k, 2)),
                      rng.normal(size=(1,) * len(batch) + (k, 4)).swapaxes(-1, -2)
                      .swapaxes(-1, -2)):
            y = right.view(_HostArray)
            want = np.matmul(np.asarray(a, np.float64), np.asarray(right))
            for _ in range(2):             # the second call: the plan kept by the first
                got = mm(np.asarray(a).view(_HostArray), y)
                np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12,
                                           err_msg=f"{a.shape} {a.strides} @ {right.shape}")
            checked += 1
        planned = sum(p is not None for p in mm._plans.values())
    assert checked >= 1800 and planned > 100 and len(calls) >= 2 * checked - 50
    # a linear layer on [batch, seq, d]: one product of all the rows, planned once
    mm2, calls2 = _host_matmul()
    x = rng.normal(size=(4, 5, 6)).view(_HostArray)
    w = rng.normal(size=(6, 3)).view(_HostArray)
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(mm2(x, w)), np.asarray(x) @ np.asarray(w),
                                   rtol=1e-12)
    assert calls2 == [(0, 0, 3, 20, 6, 1)] * 3 and len(mm2._plans) == 1


def test_transpose_flags_compute_the_transposed_products():
    """matmul's ``ta``/``tb`` attrs (its derivative's transposes): the gemm's arguments
    compute ``a^T @ b``, ``a @ b^T`` and ``a^T @ b^T`` for the random layouts above, in NumPy,
    through both paths (worked out anew, and the plan kept for the layout)."""
    mm, calls = _host_matmul()
    rng = np.random.default_rng(4)
    checked = 0
    for _, a, batch in _random_views(rng, n=300):
        k = a.shape[-2]                       # a read transposed: (..., k, n) -> (..., n, k)
        a64 = np.asarray(a, np.float64)
        at = np.swapaxes(a64, -1, -2)
        for right, tb in ((rng.normal(size=batch + (k, 3)), False),
                          (rng.normal(size=(2, k)), True),
                          (rng.normal(size=batch + (4, k)), True)):
            y = np.ascontiguousarray(right).view(_HostArray)
            want = np.matmul(at, np.swapaxes(right, -1, -2) if tb else right)
            for _ in range(2):
                got = mm(np.asarray(a).view(_HostArray), y, ta=True, tb=tb)
                np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12,
                                           err_msg=f"{a.shape} {a.strides}^T tb={tb}")
            checked += 1
        # a @ b^T with a as the left operand as it lies
        right = rng.normal(size=(5, a.shape[-1]))
        got = mm(np.asarray(a).view(_HostArray), np.ascontiguousarray(right).view(_HostArray),
                 tb=True)
        np.testing.assert_allclose(np.asarray(got), a64 @ right.T, rtol=1e-12, atol=1e-12)
    assert checked == 900 and calls


# -- on a GPU -------------------------------------------------------------------------------
@pytest.mark.skipif(not em.cuda.is_available(), reason=f"cuda: {em.cuda.why_unavailable()}")
@pytest.mark.parametrize("d", ["f64", "f32", "f16", "bf16"])
def test_strided_products_match_numpy(d):
    import cupy as cp
    import ml_dtypes
    from ember.backend.cuda.matmul import CublasMatmul
    npd = np.dtype(ml_dtypes.bfloat16) if d == "bf16" else em.dtype.as_dtype(d).np
    tol = {"f64": 1e-12, "f32": 1e-5, "f16": 2e-3, "bf16": 2e-2}[d]
    mm = CublasMatmul(cp)
    rng = np.random.default_rng(1)

    def dev(h):
        return cp.asarray(h.view(np.uint16)).view(npd) if d == "bf16" else cp.asarray(h)

    def host(x):
        return (cp.asnumpy(x.view(cp.uint16)).view(npd) if d == "bf16" else
                cp.asnumpy(x)).astype(np.float64)

    cases = []
    A = rng.normal(size=(5, 3, 7, 9)).astype(npd)
    B = rng.normal(size=(5, 3, 9, 4)).astype(npd)
    a, b = dev(A), dev(B)
    cases += [(a, b), (a.swapaxes(-1, -2).swapaxes(-1, -2), b),
              (dev(np.ascontiguousarray(A.swapaxes(-1, -2))).swapaxes(-1, -2), b),
              (a, dev(np.ascontiguousarray(B.swapaxes(-1, -2))).swapaxes(-1, -2)),
              (a[:, :, ::2], b), (a[..., 1:], b[..., 1:, :]),
              (a, b[0, 0]), (a[0, 0], b), (a[:, :1], b), (a[::-1], b),
              (dev(np.ascontiguousarray(A.transpose(1, 0, 2, 3))).transpose(1, 0, 2, 3), b),
              (a[:, :, ::-1], b), (a[..., 0:1, :], b), (a, b[..., 0:1]),
              # one right matrix: the batch folds into the rows where they are evenly spaced
              (a[..., :5], b[0, 0, :5]), (a[:, :, ::2], b[0, 0]), (a.swapaxes(0, 1), b[0, 0])]
    for x, y in cases:
        got = host(mm(x, y))
        want = np.matmul(host(x), host(y))
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 9)
