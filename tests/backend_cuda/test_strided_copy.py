"""Contiguous copies as generated kernels (ember/backend/cuda/copy.py) and the Cuda reshape
that views where NumPy's rule allows and copies with them where it does not.

Without a GPU: `reshape_strides` agrees with what NumPy's own reshape does (a view with
these strides, or a copy); the copy kernel, run by the IR interpreter (which indexes memory
from the data pointer, as the GPU does), gives NumPy's contiguous copy bit for bit (NaN
payloads included) for permuted, sliced, flipped and broadcast layouts, and compiles with
NVRTC; `StridedCopy` passes contiguous arrays through and lets CuPy copy where no kernel
runs. On a GPU: the copies and the reshapes of real CuPy arrays, against NumPy."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ember as em
from ember.backend.cuda.copy import StridedCopy, copy_kernel, reshape_strides
from ember.kernel.cuda.compiler import default_arch
from ember.kernel.cuda.render import render
from ember.kernel.interpret import evaluate
from tests.kernel_cuda._util import nvrtc_or_skip

gpu = pytest.mark.skipif(not em.cuda.is_available(),
                         reason=f"cuda: {em.cuda.why_unavailable()}")
BF16 = np.dtype(ml_dtypes.bfloat16)
INTS = {1: np.uint8, 2: np.int16, 4: np.int32, 8: np.int64}


def _layouts(dtype=np.float32, scramble=False):
    """(name, strided NumPy array) pairs: the layouts a training step copies and odd ones;
    ``scramble``: every 7th element's bits inverted first (NaNs with payloads, -0.0)."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(4, 6, 5, 8)).astype(dtype)
    if scramble:
        bits = a.reshape(-1).view(INTS[a.itemsize])
        bits[::7] = ~bits[::7]
    return [
        ("heads_merged", a.transpose(0, 2, 1, 3)),        # [b, h, t, d] -> [b, t, h, d]
        ("transposed", a[0, 0].T),
        ("row_slice", a[:, :, 1:4]),
        ("step_slice", a[:, ::2, :, ::3]),
        ("flipped", a[::-1, :, ::-1]),
        ("broadcast", np.broadcast_to(a[:1, :1], (3, 4, 5, 8))),
        ("one_column", a[..., 2]),
        ("permuted_5d", rng.normal(size=(2, 3, 1, 4, 5)).astype(dtype).transpose(4, 2, 0, 3, 1)),
    ]


def _estrides(x):
    return tuple(s // x.itemsize for s in x.strides)


# -- without a GPU --------------------------------------------------------------------------
def test_reshape_strides_follows_numpy():
    for name, x in _layouts():
        n = x.size
        shapes = [(n,), (x.shape[0], n // x.shape[0]),
                  x.shape[:-2] + (x.shape[-2] * x.shape[-1],), (1,) + x.shape,
                  tuple(reversed(x.shape))]
        for target in shapes:
            got = reshape_strides(x.shape, x.strides, x.itemsize, target)
            y = x.reshape(target)
            if np.shares_memory(x, y):
                assert got == y.strides, (name, target)
            else:
                assert got is None, (name, target)
    assert reshape_strides((6, 4), (4, 24), 1, (24,)) is None            # a transpose
    assert reshape_strides((6, 4), (32, 8), 8, (2, 3, 4)) == (96, 32, 8)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.float64, np.int8,
                                   np.bool_])
def test_copy_kernel_is_numpys_copy_bit_for_bit(dtype):
    for name, x in _layouts(dtype, scramble=np.dtype(dtype).kind != "b"):
        k = copy_kernel(x.shape, _estrides(x), x.itemsize)
        (out,) = evaluate(k, [x.view(INTS[x.itemsize])])
        want = np.ascontiguousarray(x)
        assert out.shape == want.shape and out.flags.c_contiguous, name
        assert np.array_equal(out.view(np.uint8), want.view(INTS[x.itemsize]).view(np.uint8)), \
            f"{name} {np.dtype(dtype).name}"


def test_copy_kernels_compile(tmp_path):
    compiler = nvrtc_or_skip(tmp_path)
    for itemsize in (1, 2, 4, 8):
        for name, x in _layouts():
            k = copy_kernel(x.shape, _estrides(x), itemsize)
            c = compiler.build(render(k).source, default_arch())
            assert c.binary, name
    # the GPT step's split heads, three at once: [32, 6, 256, 64] read from [32, 256, 384]
    k = copy_kernel((32, 6, 256, 64), (98304, 64, 384, 1), 4, count=3)
    assert compiler.build(render(k).source, default_arch()).binary
    assert copy_kernel((2, 3), (1, 2), 16) is None        # no integer of that width


class _Dev(np.ndarray):
    """A NumPy array with CuPy's ``_c_contiguous``."""
    @property
    def _c_contiguous(self):
        return self.flags.c_contiguous


class _Runtime:
    """The kernel runtime's compile/launch on the IR interpreter."""
    def __init__(self):
        self.launched = []

    def compile(self, kernel):
        return kernel

    def launch(self, program, inputs, args=()):
        self.launched.append(program)
        return [o.view(_Dev) for o in evaluate(program, [np.asarray(i) for i in inputs])]


def test_many_copies_arrays_of_one_layout_in_one_kernel():
    """Attention's split heads: q, k, v of one layout, one launch (a kernel with three
    outputs); an array of another layout its own; a contiguous one passes through."""
    cp = type("cp", (), {"ascontiguousarray": staticmethod(lambda a: np.ascontiguousarray(a))})
    rt = _Runtime()
    copy = StridedCopy(cp, lambda: rt)
    rng = np.random.default_rng(3)
    heads = [np.swapaxes(rng.normal(size=(2, 5, 3, 4)).astype(np.float32), 1, 2).view(_Dev)
             for _ in range(3)]
    other = rng.normal(size=(4, 6)).astype(np.float32).T.view(_Dev)
    plain = np.ones((3, 4), np.float32).view(_Dev)
    out = copy.many(heads + [other, plain])
    assert len(rt.launched) == 2 and len(rt.launched[0].exprs) == 3
    for a, b in zip(out, heads + [other, plain]):
        assert a.flags.c_contiguous and a.dtype == b.dtype
        np.testing.assert_array_equal(a, np.ascontiguousarray(b))
    assert out[-1] is plain


def test_strided_copy_passes_contiguous_arrays_and_falls_back_to_cupy():
    cp = type("cp", (), {"ascontiguousarray": staticmethod(lambda a: np.ascontiguousarray(a))})
    rt = _Runtime()
    copy = StridedCopy(cp, lambda: rt)
    for name, x in _layouts(np.float16):
        x = x.view(_Dev)
        out = copy(x)
        assert out.dtype == x.dtype and np.array_equal(out, np.ascontiguousarray(x)), name
    assert len(rt.launched) == len(_layouts())
    c = np.ones((3, 4), np.float32).view(_Dev)
    assert copy(c) is c                                   # contiguous: itself
    empty = np.ones((0, 4), np.float32).T.view(_Dev)
    assert copy(empty).shape == (4, 0)                    # empty: CuPy's copy
    none = StridedCopy(cp, lambda: None)                  # no kernel runtime: CuPy's copy
    x = _layouts()[0][1].view(_Dev)
    assert np.array_equal(none(x), np.ascontiguousarray(x))
    assert len(rt.launched) == len(_layouts())


# -- on a GPU -------------------------------------------------------------------------------
@gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.float64, np.int64,
                                   np.bool_])
def test_copies_and_reshapes_on_the_gpu(dtype):
    import cupy as cp

    from ember.backend.cuda import ops as cuda_ops
    dev = em.device("cuda", fusion=False)
    backend = dev.backend
    launches = backend.kernel_runtime.launches
    for name, x in _layouts(dtype, scramble=np.dtype(dtype).kind != "b"):
        base = x
        while base.base is not None:
            base = base.base
        off = (x.__array_interface__["data"][0] - base.__array_interface__["data"][0])
        scope = backend.scope(0)
        with scope:             # (ember's stream: the upload, the copy and the read in order)
            arr = cp.asarray(base)
            view = cp.ndarray(x.shape, x.dtype, arr.data + off, strides=x.strides)
            out = backend.contiguous(view)
            got = cp.asnumpy(out, stream=scope.stream)
        assert out.flags.c_contiguous and out.dtype == x.dtype, name
        assert np.array_equal(got.view(np.uint8), np.ascontiguousarray(x).view(np.uint8)), name
        reshape = cuda_ops.CUDA_IMPLS["reshape"](cp, backend.xp)
        with scope:
            r = reshape(view, (x.size,))
            got = cp.asnumpy(r, stream=scope.stream)
        assert np.array_equal(got.view(np.uint8),
                              np.ascontiguousarray(x.reshape(-1)).view(np.uint8)), name
        if reshape_strides(x.shape, x.strides, x.itemsize, (x.size,)) is not None:
            assert r.data.ptr == view.data.ptr, f"{name}: a reshape that views copied"
    assert backend.kernel_runtime.launches > launches, "no copy ran as ember's kernel"
