"""The cases that broke Burn's fusion -- views mixed with reductions -- fused vs unfused
(NdArray) and vs NumPy float64. Each runs on a ready input (views of the inner backend's
array) and on a pending one (views folded into the kernels' index arithmetic)."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
from tests.fusion._util import RUNTIMES, UNFUSED, assert_close, fusion_device


@pytest.fixture(params=RUNTIMES)
def dev(request):
    return fusion_device(request.param)


PENDING = (False, True)


def _t(a, device, pending):
    t = em.tensor(a, device=device)
    return t * 1.0 + 0.0 if pending else t


def _both(dev, arrays, fn, rtol=1e-5, atol=1e-5):
    for pending in PENDING:
        fused = fn(*[_t(a, dev, pending) for a in arrays])
        plain = fn(*[_t(a, UNFUSED, pending) for a in arrays])
        fused = fused if isinstance(fused, tuple) else (fused,)
        plain = plain if isinstance(plain, tuple) else (plain,)
        for f, p in zip(fused, plain):
            assert_close(f.numpy(), p.numpy(), rtol, atol, what=f"pending={pending}")
    return [f.numpy() for f in fused]


def _ln_ref(x, axis=-1, eps=1e-5):
    return (x - x.mean(axis, keepdims=True)) / np.sqrt(x.var(axis, keepdims=True) + eps)


def test_layer_norm_after_swap_dims(dev):
    a = np.random.default_rng(0).normal(size=(4, 16, 12)).astype(np.float32)
    (got,) = _both(dev, [a], lambda x: em.layer_norm(x.swap_dims(1, 2), 16))
    assert_close(got, _ln_ref(np.swapaxes(a.astype(np.float64), 1, 2)), atol=1e-5)


def test_layer_norm_after_reshape_of_conv_output(dev):
    rng = np.random.default_rng(1)
    a = rng.normal(size=(2, 3, 7, 6)).astype(np.float32)
    w = rng.normal(size=(8, 3, 3, 3)).astype(np.float32) * 0.3

    def fn(x, wt):
        y = em.conv2d(x, wt, padding=1)                 # [2, 8, 7, 6], unfused
        y = (y * 1.5).reshape(2, 8, 42).swap_dims(1, 2)  # [2, 42, 8]
        return em.layer_norm(y, 8)

    (got,) = _both(dev, [a, w], fn)
    ref = em.conv2d(em.tensor(a.astype(np.float64)), em.tensor(w.astype(np.float64)),
                    padding=1).numpy()
    ref = np.swapaxes((ref * 1.5).reshape(2, 8, 42), 1, 2)
    assert_close(got, _ln_ref(ref), atol=2e-5)


def test_var_and_mean_along_a_swapped_dim(dev):
    a = np.random.default_rng(2).normal(size=(5, 6, 7)).astype(np.float32)
    var, mean = _both(dev, [a], lambda x: (x.swap_dims(0, 2).var(1),
                                           x.swap_dims(0, 2).mean(1)))
    s = np.swapaxes(a.astype(np.float64), 0, 2)
    assert_close(var, s.var(1, ddof=1))
    assert_close(mean, s.mean(1))
    vm = _both(dev, [a], lambda x: x.swap_dims(0, 1).var_mean(2, keepdim=True))
    s = np.swapaxes(a.astype(np.float64), 0, 1)
    assert_close(vm[0], s.var(2, ddof=1, keepdims=True))
    assert_close(vm[1], s.mean(2, keepdims=True))


@pytest.mark.parametrize("dim", [0, 1, -2])
def test_softmax_on_a_non_last_dim(dev, dim):
    a = np.random.default_rng(3).normal(size=(5, 6, 7)).astype(np.float32) * 3
    (got,) = _both(dev, [a], lambda x: em.softmax(x, dim))
    e = np.exp(a.astype(np.float64) - a.max(dim, keepdims=True))
    assert_close(got, e / e.sum(dim, keepdims=True))
    (got,) = _both(dev, [a], lambda x: em.log_softmax(x.swap_dims(0, 2), dim))
    s = np.swapaxes(a.astype(np.float64), 0, 2)
    m = s.max(dim, keepdims=True)
    assert_close(got, s - m - np.log(np.exp(s - m).sum(dim, keepdims=True)))


def test_negative_step_slice_then_reduction(dev):
    a = np.random.default_rng(4).normal(size=(9, 8, 5)).astype(np.float32)
    s1, s2, s3 = _both(dev, [a], lambda x: (x[::-2].sum(0), x[:, ::-3].max(1),
                                            x[7:1:-2, ::-1, 1:].mean((0, 2))))
    a64 = a.astype(np.float64)
    assert_close(s1, a64[::-2].sum(0))
    assert_close(s2, a64[:, ::-3].max(1))
    assert_close(s3, a64[7:1:-2, ::-1, 1:].mean((0, 2)))
    (f,) = _both(dev, [a], lambda x: x.flip(1).cumsum(1).flip(1).sum(2))
    assert_close(f, np.flip(np.cumsum(np.flip(a64, 1), 1), 1).sum(2), rtol=1e-5, atol=1e-4)


def test_reduce_then_broadcast_over_permuted_and_expanded_inputs(dev):
    rng = np.random.default_rng(5)
    a = rng.normal(size=(6, 1, 5)).astype(np.float32)
    b = rng.normal(size=(4, 5)).astype(np.float32)

    def fn(x, y):
        z = (x.expand(6, 4, 5) + y).permute(2, 0, 1)      # [5, 6, 4]
        return z - z.max(1, keepdim=True), (z * z).sum((0, 2))

    got = _both(dev, [a, b], fn)
    z = np.transpose(np.broadcast_to(a, (6, 4, 5)).astype(np.float64) + b, (2, 0, 1))
    assert_close(got[0], z - z.max(1, keepdims=True))
    assert_close(got[1], (z * z).sum((0, 2)))


def test_reshapes_that_fold_and_that_do_not(dev):
    a = np.random.default_rng(6).normal(size=(4, 6, 10)).astype(np.float32)

    def fn(x):
        y = x.swap_dims(1, 2)                            # [4, 10, 6]
        r1 = (y * 2.0).reshape(40, 6).sum(1)             # merge of permuted dims: no fold
        r2 = (x * 2.0).reshape(4, 3, 2, 10).sum(2)      # split: folds
        r3 = (x + 1.0).reshape(24, 10)[::-5].reshape(-1)
        return r1, r2, r3

    got = _both(dev, [a], fn)
    a64 = a.astype(np.float64)
    assert_close(got[0], (np.swapaxes(a64, 1, 2) * 2).reshape(40, 6).sum(1))
    assert_close(got[1], (a64 * 2).reshape(4, 3, 2, 10).sum(2))
    assert_close(got[2], (a64 + 1).reshape(24, 10)[::-5].reshape(-1))


def test_unfold_folds_into_strides(dev):
    a = np.random.default_rng(7).normal(size=(3, 11)).astype(np.float32)
    (got,) = _both(dev, [a], lambda x: (x * 3.0).unfold(1, 4, 2).sum(-1))
    w = np.lib.stride_tricks.sliding_window_view(a.astype(np.float64) * 3, 4, axis=1)[:, ::2]
    assert_close(got, w.sum(-1))


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f64", "i32", "bool"])
def test_dtypes_through_reductions(dev, dtype):
    rng = np.random.default_rng(8)
    a = rng.normal(size=(5, 9)) * 3
    if dtype == "bool":
        a = a > 0
    arr = np.asarray(a).astype(em.dtype.as_dtype(dtype).np)

    def fn(x):
        if dtype == "bool":
            return x.sum(1), x.swap_dims(0, 1).sum(1), x.any(0)
        return x.sum(1), (x * 2).swap_dims(0, 1).max(1), x.prod(0)

    tol = {"f16": (4e-3, 4e-3), "bf16": (2e-2, 2e-2)}.get(dtype, (1e-9, 1e-9))
    _both(dev, [arr], fn, *tol)
