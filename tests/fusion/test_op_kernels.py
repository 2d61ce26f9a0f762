"""Ops Fusion runs as kernels it builds for them on the CPU (ember/backend/fusion/pooling.py,
cross_entropy.py): max pooling and cross-entropy give the inner backend's results -- max
pooling bit for bit, values, argmax indices and layout; cross-entropy to rounding -- and
geometries the kernels do not cover run on the inner backend."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.backend import Fusion, NdArray
from ember.errors import IndexError_
from ember.ops.registry import OPS
from ember.tensor.dispatch import apply, wrap


def _device(min_numel=1 << 16):
    b = Fusion(NdArray(), "c", min_numel)
    if b.runtime is None:
        pytest.skip("fusion runtime 'c' unavailable: no C compiler")
    if not b._op_kernels:
        pytest.skip("Fusion's op kernels are turned off (EMBER_FUSION_OP_KERNELS=0)")
    return b.device(0)


REF = em.device("cpu", fusion=False)


def _t(a, dev):
    return wrap(a, dev, a.shape, em.dtype.from_numpy(a.dtype))


def _channels_last(a):
    """``a`` [N, C, *S] with channels innermost in memory, as a conv's output."""
    moved = np.ascontiguousarray(np.moveaxis(a, 1, -1))
    return moved.transpose((0, a.ndim - 1) + tuple(range(1, a.ndim - 1)))


def _input(rng, shape, dtype, layout):
    a = rng.standard_normal(shape) * 4
    if np.dtype(dtype).kind in "iu":
        a = np.round(a)
    a = a.astype(dtype)
    flat = a.reshape(-1)
    flat[1::7] = flat[0::7][:len(flat[1::7])]           # ties within windows
    if np.dtype(dtype).kind == "f":
        flat[3::29] = np.nan
        flat[5::31] = -0.0
    if layout == "channels_last":
        return _channels_last(a)
    if layout == "strided":                              # every other row of a larger array
        big = np.zeros(shape[:-1] + (shape[-1] * 2,), dtype)
        big[..., ::2] = a
        return big[..., ::2]
    return a


POOL_CASES = [
    # (input shape, kernel, stride, dilation): no padding, every window inside the input
    ((4, 3, 8, 8), 2, 2, 1),
    ((32, 16, 8, 8), 2, 2, 1),
    ((2, 5, 9, 7), 3, 2, 1),
    ((2, 5, 9, 7), 2, 1, 2),
    ((2, 3, 10, 6), (3, 2), (3, 2), 1),
    ((3, 4, 10), 2, 2, 1),
    ((3, 4, 11), 3, 3, 1),
]


#: (dtype, layout) pairs: every layout in f32, each narrow or wide dtype in one
LAYOUTS = [(np.float32, "contiguous"), (np.float32, "channels_last"), (np.float32, "strided"),
           (np.float64, "contiguous"), (np.float16, "channels_last"),
           (em.bfloat16.np, "contiguous")]


@pytest.mark.parametrize("dtype,layout", LAYOUTS)
@pytest.mark.parametrize("shape,kernel,stride,dilation", POOL_CASES)
def test_max_pool_kernels_are_the_inner_backend_bit_for_bit(shape, kernel, stride, dilation,
                                                            dtype, layout):
    dev = _device()
    nd = len(shape) - 2
    tup = (lambda v: (v,) * nd if isinstance(v, int) else v)
    attrs = dict(kernel=tup(kernel), stride=tup(stride), padding=(0,) * nd,
                 dilation=tup(dilation), ceil_mode=False)
    x = _input(np.random.default_rng(len(shape) * 7 + nd), shape, dtype, layout)
    got, want = [], []
    kernels = 0
    for d, into in ((dev, got), (REF, want)):
        em.fusion.reset_stats()
        best, idx = apply(OPS[f"max_pool{nd}d_with_indices"], (_t(x, d),), attrs)
        vals = apply(OPS[f"max_pool{nd}d"], (_t(x, d),), attrs)
        kernels += em.fusion.stats()["kernels"] if d is dev else 0
        g = best * 1.5 + 1.0
        g.numpy()     # computed here, so the count below is the backward's alone (whether
        #               g's small elementwise op runs as a kernel is Fusion's timed choice)
        em.fusion.reset_stats()
        grad = apply(OPS[f"max_pool{nd}d_backward"], (g, idx),
                     dict(input_size=shape[2:], disjoint=True))
        kernels += em.fusion.stats()["kernels"] if d is dev else 0
        into += [best._prim, idx._prim, vals._prim, grad.numpy()]
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    # the results are laid out as the inner backend lays them out (channels last stays)
    for a, b in zip(got[:3], want[:3]):
        assert a.strides == b.strides
    st = tuple(tup(stride))
    tiles = st == tup(kernel) and dilation == 1 and all(
        n % k == 0 for n, k in zip(shape[2:], st))
    assert kernels == 2 + tiles


@pytest.mark.parametrize("padding,ceil_mode,shape", [
    (1, False, (2, 3, 8, 8)),         # padding
    (0, True, (2, 3, 9, 9)),          # ceil mode: a window past the edge
])
def test_max_pool_geometries_without_a_kernel_run_on_the_inner_backend(padding, ceil_mode,
                                                                       shape):
    dev = _device()
    attrs = dict(kernel=(2, 2), stride=(2, 2), padding=(padding,) * 2, dilation=(1, 1),
                 ceil_mode=ceil_mode)
    x = _input(np.random.default_rng(3), shape, np.float32, "contiguous")
    em.fusion.reset_stats()
    got = apply(OPS["max_pool2d_with_indices"], (_t(x, dev),), attrs)
    assert em.fusion.stats()["kernels"] == 0
    want = apply(OPS["max_pool2d_with_indices"], (_t(x, REF),), attrs)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_max_pool_backward_takes_only_indices_of_its_own_forward():
    """Indices made elsewhere may point outside their window (the op scatters wherever they
    point): the inner backend's scatter runs them."""
    dev = _device()
    rng = np.random.default_rng(5)
    g = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    idx = rng.integers(0, 64, (2, 3, 4, 4))
    em.fusion.reset_stats()
    got = apply(OPS["max_pool2d_backward"], (_t(g, dev), _t(idx, dev)),
                dict(input_size=(8, 8), disjoint=True)).numpy()
    assert em.fusion.stats()["kernels"] == 0
    want = apply(OPS["max_pool2d_backward"], (_t(g, REF), _t(idx, REF)),
                 dict(input_size=(8, 8), disjoint=True)).numpy()
    np.testing.assert_array_equal(got, want)


def test_cnn_training_matches_ndarray_exactly():
    """A conv -> relu -> max-pool step's gradients on Fusion (pooling kernels, replayed
    elementwise ops) are NdArray's, bit for bit."""
    dev = _device().autodiff()
    rng = np.random.default_rng(7)
    x0 = rng.standard_normal((8, 3, 8, 8)).astype(np.float32)
    w0 = (rng.standard_normal((6, 3, 3, 3)) * 0.3).astype(np.float32)
    grads = []
    for d in (dev, REF.autodiff()):
        for _ in range(12):             # past the elementwise ops' probing
            x = em.tensor(x0, device=d)
            w = em.tensor(w0, device=d).require_grad()
            y = em.max_pool2d(em.conv2d(x, w, padding=1).relu(), 2)
            gw = w.grad((y * y).sum().backward())
        grads.append(gw.numpy())
    np.testing.assert_array_equal(grads[0], grads[1])


CE_CASES = [((32, 10), np.float32, -100), ((7, 3), np.float64, 1), ((5, 4), np.float16, -100),
            ((64, 1000), np.float32, 3)]


@pytest.mark.parametrize("shape,dtype,ignore", CE_CASES)
def test_cross_entropy_kernels_match_the_inner_backend(shape, dtype, ignore):
    dev = _device()
    rng = np.random.default_rng(shape[0])
    m, c = shape
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    x[0, 0] = np.inf                    # a row whose max is infinite
    x[1, :] = -np.inf                   # a row of -inf
    t = rng.integers(0, c, m)
    t[2] = ignore if 0 <= ignore < c or ignore < 0 else t[2]
    g = rng.standard_normal(m).astype(dtype)
    res = {}
    for name, d in (("fusion", dev), ("ndarray", REF)):
        em.fusion.reset_stats()
        with np.errstate(invalid="ignore", divide="ignore"):
            loss, valid = apply(OPS["cross_entropy_rows"], (_t(x, d), _t(t, d)),
                                dict(ignore_index=ignore))
            dx = apply(OPS["cross_entropy_rows_backward"], (_t(g, d), _t(x, d), _t(t, d)),
                       dict(ignore_index=ignore))
        res[name] = [a.numpy() for a in (loss, valid, dx)]
        if d is dev:
            assert em.fusion.stats()["kernels"] == 8
    tol = dict(rtol=2e-3, atol=2e-3) if dtype is np.float16 else \
        dict(rtol=1e-6, atol=1e-6) if dtype is np.float32 else dict(rtol=1e-13, atol=1e-13)
    for a, b in zip(res["fusion"], res["ndarray"]):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), **tol)


@pytest.mark.parametrize("op", ["cross_entropy_rows", "cross_entropy_rows_backward"])
def test_cross_entropy_kernels_reject_a_target_out_of_range(op):
    dev = _device()
    x = np.zeros((3, 4), np.float32)
    t = np.array([0, 4, 1])
    ins = (x, t) if op == "cross_entropy_rows" else (np.ones(3, np.float32), x, t)
    with pytest.raises(IndexError_, match="target class 4 is out of range for 4 classes"):
        apply(OPS[op], tuple(_t(a, dev) for a in ins), dict(ignore_index=-100))


def test_op_kernels_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("EMBER_FUSION_OP_KERNELS", "0")
    b = Fusion(NdArray(), "c", (1 << 16) + 17)     # (backends are interned by their args)
    assert b.runtime is None or b._op_kernels == {}
    x = np.arange(64, dtype=np.float32).reshape(1, 1, 8, 8)
    em.fusion.reset_stats()
    y = apply(OPS["max_pool2d"], (_t(x, b.device(0)),), dict(
        kernel=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1), ceil_mode=False))
    assert em.fusion.stats()["kernels"] == 0
    np.testing.assert_array_equal(y.numpy(), x[:, :, 1::2, 1::2])
