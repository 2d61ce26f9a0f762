"""The layer-norm primitive (ember/ops/nn.py ``layer_norm``): its NumPy reference computes
what its decomposition (the composite em.layer_norm was before) computes, bit for bit on
NdArray; Fusion(NdArray) fuses the decomposition as before; a Fusion whose inner backend
lists the op in ``fused_ops`` runs the primitive there instead (what Fusion(Cuda) does with
its one-kernel layer norm)."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.backend import Autodiff, Fusion, NdArray
from ember.errors import DTypeError, ShapeError
from ember.ops import nn as N
from tests.conformance.specs_nn import P
from tests.fusion._util import counted

UNFUSED = NdArray().device(0)


def _args(rng, shape, nd, dtype, has_w, has_b):
    ns = shape[len(shape) - nd:]
    x = rng.normal(size=shape).astype(dtype) * 3 + 1
    wb = []
    if has_w:
        wb.append(rng.normal(size=ns).astype(dtype))
    if has_b:
        wb.append(rng.normal(size=ns).astype(dtype))
    return x, wb


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,nd", [((7, 33), 1), ((3, 5, 8), 2), ((2, 3, 4, 5), 1),
                                      ((9,), 1)])
@pytest.mark.parametrize("has_w,has_b", [(True, True), (True, False), (False, True),
                                         (False, False)])
def test_reference_is_the_decomposition_bit_for_bit(dtype, shape, nd, has_w, has_b):
    rng = np.random.default_rng(len(shape) * 10 + nd)
    x, wb = _args(rng, shape, nd, dtype, has_w, has_b)
    attrs = dict(ndim=nd, eps=1e-5, has_weight=has_w, has_bias=has_b)
    got = N._layer_norm_numpy(x, *wb, **attrs)
    ts = [em.tensor(a, device=UNFUSED) for a in [x] + wb]
    want = N._layer_norm_decompose(*ts, **attrs).numpy()
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_half_inputs_compute_in_f32():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 16)).astype(np.float16)
    w = rng.normal(size=(16,)).astype(np.float16)
    got = N._layer_norm_numpy(x, w, ndim=1, eps=1e-5, has_weight=True, has_bias=False)
    x32 = x.astype(np.float32)
    mu = x32.mean(-1, keepdims=True)
    ref = ((x32 - mu) / np.sqrt(((x32 - mu) ** 2).mean(-1, keepdims=True) + 1e-5) *
           w.astype(np.float32)).astype(np.float16)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), atol=2e-3)


def test_one_op_unfused_and_the_api_checks():
    x = em.tensor(np.ones((3, 4), np.float32), device=UNFUSED)
    em.fusion.reset_stats()
    y = em.layer_norm(x, 4)
    np.testing.assert_array_equal(y.numpy(), np.zeros((3, 4), np.float32))
    with pytest.raises(ShapeError):
        em.layer_norm(x, 3)
    with pytest.raises(ShapeError):
        em.layer_norm(x, 4, em.tensor(np.ones(3, np.float32), device=UNFUSED))
    with pytest.raises(DTypeError):
        em.layer_norm(em.tensor(np.ones((3, 4), np.int64), device=UNFUSED), 4)
    with pytest.raises(ShapeError):       # a flag without its tensor
        P("layer_norm", x, ndim=1, eps=1e-5, has_weight=True, has_bias=False)


def _fusion(inner, runtime="interpret"):
    b = Fusion(inner, runtime, 0)
    if b.runtime is None:
        pytest.skip(f"fusion runtime {runtime!r} unavailable")
    return b.device(0)


class _FusedLayerNorm(NdArray):
    """NdArray claiming a one-kernel layer norm (as Cuda does)."""
    fused_ops = frozenset({"layer_norm"})


def _case(dev):
    rng = np.random.default_rng(5)
    a = rng.normal(size=(3, 40, 6)).astype(np.float32)
    w, b = (rng.normal(size=(40,)).astype(np.float32) for _ in range(2))
    x, wt, bt = (em.tensor(v, device=dev) for v in (a, w, b))
    xs = np.swapaxes(a.astype(np.float64), 1, 2)
    mu = xs.mean(-1, keepdims=True)
    ref = (xs - mu) / np.sqrt(((xs - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * w + b
    return (lambda: em.layer_norm(x.swap_dims(1, 2), 40, wt, bt)), ref, \
        (lambda: em.layer_norm((x * 1.0).swap_dims(1, 2), 40, wt, bt))


def test_fusion_decomposes_it_on_ndarray():
    fn, ref, _ = _case(_fusion(NdArray()))
    got, st = counted(fn)
    assert st["inner_ops"] == 0 and 1 <= st["kernels"] <= 2, st
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_fusion_runs_it_on_an_inner_backend_that_fuses_it():
    fn, ref, pending = _case(_fusion(_FusedLayerNorm()))
    got, st = counted(fn)
    assert st["inner_ops"] == 1 and st["kernels"] == 0, st
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    got, st = counted(pending)        # a pending input: computed first, then the op there
    assert st["inner_ops"] == 1 and st["kernels"] == 1, st
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_gradients_through_the_inner_primitive_fuse():
    dev = Autodiff(Fusion(_FusedLayerNorm(), "interpret", 0)).device(0)
    if not dev.backend.inner.fusing:
        pytest.skip("no fusion runtime")
    rng = np.random.default_rng(6)
    a = rng.normal(size=(5, 8))
    w, b, g = rng.normal(size=8), rng.normal(size=8), rng.normal(size=(5, 8))
    x = em.tensor(a, device=dev).require_grad()
    wt = em.tensor(w, device=dev).require_grad()
    bt = em.tensor(b, device=dev).require_grad()
    grads = (em.layer_norm(x, 8, wt, bt) * em.tensor(g, device=dev)).sum().backward()
    mu = a.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt(((a - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    xhat = (a - mu) * rstd
    gw = g * w
    dx = rstd * (gw - gw.mean(-1, keepdims=True) - xhat * (gw * xhat).mean(-1, keepdims=True))
    np.testing.assert_allclose(x.grad(grads).numpy(), dx, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(wt.grad(grads).numpy(), (g * xhat).sum(0), rtol=1e-9)
    np.testing.assert_allclose(bt.grad(grads).numpy(), g.sum(0), rtol=1e-9)


# -- layer_norm_backward: the gradients as one primitive ------------------------------------
class _FusedLayerNormBoth(NdArray):
    """NdArray claiming one-kernel forms of layer norm and its gradient (as Cuda does)."""
    fused_ops = frozenset({"layer_norm", "layer_norm_backward"})


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("shape,nd", [((7, 33), 1), ((3, 5, 8), 2), ((2, 3, 4, 5), 1),
                                      ((9,), 1), ((0, 4), 1)])
def test_backward_reference_is_the_decomposition_bit_for_bit(dtype, shape, nd):
    rng = np.random.default_rng(len(shape) * 10 + nd)
    x, (w,) = _args(rng, shape, nd, dtype, True, False)
    g = rng.normal(size=shape).astype(dtype)
    for has_w, has_b in ((True, True), (True, False), (False, True), (False, False)):
        attrs = dict(ndim=nd, eps=1e-5, has_weight=has_w, has_bias=has_b)
        wb = [w] if has_w else []
        got = N._layer_norm_backward_numpy(g, x, *wb, **attrs)
        ts = [em.tensor(a, device=UNFUSED) for a in [g, x] + wb]
        want = [t.numpy() for t in N._layer_norm_backward_decompose(*ts, **attrs)]
        meta = N._lnb_infer(*ts, **attrs)
        assert len(got) == len(want) == len(meta) == 1 + has_w + has_b
        for a, b, (s, d) in zip(got, want, meta):
            assert a.dtype == b.dtype == d.np and a.shape == b.shape == s
            np.testing.assert_array_equal(a, b)


def test_backward_dtypes_and_checks():
    rng = np.random.default_rng(4)
    x = em.tensor(rng.normal(size=(3, 4)).astype(np.float16), device=UNFUSED)
    w = em.tensor(rng.normal(size=4), device=UNFUSED)          # f64 weight, f16 x
    dx, dw, db = P("layer_norm_backward", x, x, w, ndim=1, eps=1e-5, has_weight=True,
                   has_bias=True)
    assert (dx.dtype, dw.dtype, db.dtype) == (em.f16, em.f64, em.f32)  # dbias: compute dtype
    f32 = em.tensor(np.ones((3, 4), np.float32), device=UNFUSED)
    attrs = dict(ndim=1, eps=1e-5, has_weight=False, has_bias=False)
    with pytest.raises(ShapeError, match="layer_norm_backward: the gradient"):
        P("layer_norm_backward", f32.reshape((4, 3)), f32, **attrs)
    with pytest.raises(DTypeError, match="layer_norm_backward: inputs must share a dtype"):
        P("layer_norm_backward", x, f32, **attrs)
    with pytest.raises(DTypeError, match="layer_norm_backward: expects a float"):
        i64 = em.tensor(np.ones((3, 4), np.int64), device=UNFUSED)
        P("layer_norm_backward", i64, i64, **attrs)
    with pytest.raises(ShapeError, match="layer_norm_backward: ndim 3"):
        P("layer_norm_backward", f32, f32, **{**attrs, "ndim": 3})
    with pytest.raises(DTypeError, match="layer_norm_backward: eps must be a float"):
        P("layer_norm_backward", f32, f32, **{**attrs, "eps": 1})
    with pytest.raises(ShapeError, match="the bias is no input"):      # a weight too many
        P("layer_norm_backward", f32, f32, w, **attrs)
    with pytest.raises(ShapeError, match="has_weight=True asks for 1"):
        P("layer_norm_backward", f32, f32, **{**attrs, "has_weight": True})
    with pytest.raises(ShapeError, match="weight \\(3,\\) must have the normalized shape"):
        P("layer_norm_backward", f32, f32, em.tensor(np.ones(3), device=UNFUSED),
          **{**attrs, "has_weight": True})


def _vjp_args(dev, shape=(64, 40)):
    rng = np.random.default_rng(12)
    a, (w, b) = _args(rng, shape, 1, np.float32, True, True)
    g = rng.normal(size=shape).astype(np.float32)
    x, wt, bt, gt = (em.tensor(v, device=dev) for v in (a, w, b, g))
    y = em.layer_norm(x, shape[-1], wt, bt)
    y.numpy()
    return (g, a, w), (gt, x, wt, bt, y)


@pytest.mark.parametrize("needs", [(True, True, True), (True, False, False),
                                   (False, True, True), (False, False, True),
                                   (False, True, False), (False, False, False)])
def test_the_gradient_is_one_op_where_the_backend_fuses_it(needs):
    """Fusion over a backend listing layer_norm_backward in fused_ops (as Cuda does) runs
    the derivative as that one op: no recording, no kernels (24 recorded ops and 6 kernels
    before); the gradients asked for only (dbias alone: one sum)."""
    from tests.conformance.specs_norm import ref_lnb
    dev = _fusion(_FusedLayerNormBoth())
    (g, a, w), (gt, x, wt, bt, y) = _vjp_args(dev)
    em.fusion.reset_stats()
    outs = N._layer_norm_vjp(gt, (x, wt, bt), y, ndim=1, eps=1e-5, has_weight=True,
                             has_bias=True, needs=needs)
    got = [o.numpy() if o is not None else None for o in outs]
    st = em.fusion.stats()
    want = ref_lnb(g.astype(np.float64), a.astype(np.float64), w.astype(np.float64))
    assert [o is not None for o in got] == list(needs)
    for o, e in zip(got, want):
        if o is not None:
            np.testing.assert_allclose(o, e, rtol=2e-5, atol=2e-5 * np.abs(e).max())
    if needs[0] or needs[1]:
        assert st["inner_ops"] == 1 and st["kernels"] == 0 and st["recorded_ops"] == 0, st
    elif needs[2]:                       # the sum over the rows (and its reshape)
        assert st["inner_ops"] == 0 and st["kernels"] == 1, st
    else:
        assert st["inner_ops"] + st["recorded_ops"] == 0, st


def test_fusion_still_fuses_the_gradient_on_ndarray():
    dev = _fusion(NdArray())
    (g, a, w), (gt, x, wt, bt, y) = _vjp_args(dev)
    em.fusion.reset_stats()
    outs = N._layer_norm_vjp(gt, (x, wt, bt), y, ndim=1, eps=1e-5, has_weight=True,
                             has_bias=True, needs=(True, True, True))
    for o in outs:
        o.numpy()
    st = em.fusion.stats()
    assert st["inner_ops"] == 0 and 1 <= st["kernels"] <= 6, st
