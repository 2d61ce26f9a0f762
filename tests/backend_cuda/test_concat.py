"""Concatenation as one directly launched kernel (ember/backend/cuda/concat.py): the source
compiles with NVRTC wherever it is found, and the kernel's index arithmetic (re-enacted over
NumPy) joins arrays as ``np.concatenate`` does -- no GPU needed; on a GPU, the ``cat`` op on
the Cuda stacks and the namespace's ``concatenate`` match NumPy bit for bit, through the
kernel (checked by its launches) where the inputs are C-contiguous, through CuPy's
elsewhere."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ember as em
from ember.backend.cuda import concat
from ember.kernel.cuda.compiler import default_arch
from tests.kernel_cuda._util import nvrtc_or_skip


def test_concat_source_compiles(tmp_path):
    c = nvrtc_or_skip(tmp_path).build(concat.CONCAT_SOURCE, default_arch())
    missing = [f"ember_concat_b{w}" for w in (1, 2, 4, 8)
               if f"ember_concat_b{w}".encode() not in c.binary]
    assert not missing, missing


def concat_reference(arrays, axis):
    """What the kernel computes (`concat.CONCAT_SOURCE`, index arithmetic as there), in
    NumPy."""
    arrays = [np.ascontiguousarray(a) for a in arrays]
    axis = axis + arrays[0].ndim if axis < 0 else axis
    out_shape, rows, widths, columns, width = concat.concat_plan([a.shape for a in arrays], axis)
    flat = np.empty(rows * width, arrays[0].dtype)
    for a, w, c in zip(arrays, widths, columns):
        src = a.reshape(-1)
        for i in range(rows * w):
            r = i // w
            flat[r * width + c + (i - r * w)] = src[i]
    return flat.reshape(out_shape)


_CASES = [
    ([(3, 4), (3, 4), (3, 4)], 1),          # the packed q/k/v weights
    ([(4,), (4,), (4,)], 0),                # ... and biases
    ([(2, 5, 3), (2, 5, 6)], -1),           # the packed gradient's last axis
    ([(2, 1, 3), (2, 4, 3), (2, 0, 3)], 1),  # an empty input
    ([(1, 2)] * 9, 0),                      # more inputs than one launch takes
    ([(2, 3, 4), (5, 3, 4)], 0),
]


@pytest.mark.parametrize("shapes, axis", _CASES)
def test_kernel_arithmetic_is_numpys_concatenate(shapes, axis):
    rng = np.random.default_rng(len(shapes))
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    np.testing.assert_array_equal(concat_reference(xs, axis),
                                  np.concatenate(xs, axis=axis))


def test_plan_refuses_shapes_that_do_not_join():
    assert concat.concat_plan([(2, 3), (3, 3)], 1) is None
    assert concat.concat_plan([(2, 3), (2, 3, 1)], 0) is None
    assert concat.concat_plan([(2, 3)], 2) is None


_GPU = pytest.mark.skipif(not em.cuda.is_available(),
                          reason=f"cuda: {em.cuda.why_unavailable()}")


def _bits(a):
    w = a.dtype.itemsize
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[w])


@_GPU
@pytest.mark.parametrize("d", ["f32", "f64", "f16", "bf16", "i64", "i8", "bool"])
@pytest.mark.parametrize("fusion", [False, True], ids=["cuda", "fusion(cuda)"])
def test_cat_op_on_cuda_is_numpys(d, fusion):
    dev = em.device("cuda", fusion=fusion)
    npd = np.dtype(ml_dtypes.bfloat16) if d == "bf16" else em.dtype.as_dtype(d).np
    rng = np.random.default_rng(3)
    for shapes, axis in _CASES:
        xs = [(rng.standard_normal(s) * 50).astype(npd) for s in shapes]
        got = em.cat([em.tensor(x, device=dev) for x in xs], dim=axis).numpy()
        want = np.concatenate(xs, axis=axis)
        assert got.shape == want.shape and got.dtype == want.dtype, (shapes, axis)
        np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=f"{shapes} {axis}")


@_GPU
def test_namespace_concatenate_uses_the_kernel_where_it_can():
    import cupy as cp
    backend = em.device("cuda", fusion=False).backend
    cat = backend.concatenate
    assert cat is not None and backend.xp.concatenate is cat
    launches = []
    raw = cat._direct.raw_launch
    cat._direct.raw_launch = lambda *a: (launches.append(a[2]), raw(*a))[1]
    try:
        rng = np.random.default_rng(5)
        xs = [cp.asarray(rng.standard_normal((6, 7)).astype(np.float32)) for _ in range(6)]
        got = cat(xs, axis=1)
        cp.cuda.get_current_stream().synchronize()
        np.testing.assert_array_equal(cp.asnumpy(got),
                                      np.concatenate([cp.asnumpy(x) for x in xs], axis=1))
        assert launches == [4, 2]                   # 6 inputs: two launches (4 + 2 slots)
        launches.clear()
        strided = [x[:, ::2] for x in xs[:3]]       # not C-contiguous: CuPy's concatenate
        got = cat(strided, axis=0)
        np.testing.assert_array_equal(cp.asnumpy(got),
                                      np.concatenate([cp.asnumpy(x) for x in strided]))
        assert launches == []
        with pytest.raises(ValueError):             # CuPy says why shapes do not join
            cat([xs[0], xs[1][:3]], axis=1)
    finally:
        cat._direct.raw_launch = raw
