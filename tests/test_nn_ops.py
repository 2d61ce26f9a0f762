"""Module ops beyond the conformance cases: bad inputs and their messages, argument forms
(unbatched inputs, 'same' padding, return_indices), parameter sweeps of forward values and
gradients against torch.nn.functional, and the functional running stats of batch_norm."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import ember as em
from ember.errors import DTypeError, IndexError_, ShapeError

AD = em.device("cpu").autodiff()
RNG = np.random.default_rng(0)


def T(*shape, device=None, dtype=em.float64):
    return em.tensor(RNG.normal(size=shape), dtype=dtype, device=device)


def message(exc_type, fn):
    with pytest.raises(exc_type) as info:
        fn()
    return str(info.value)


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch", reason="torch is the reference for these tests")
    torch.set_num_threads(1)
    return torch


def tt(torch, t, grad=False):
    out = torch.from_numpy(np.ascontiguousarray(t.numpy()))
    return out.requires_grad_(True) if grad else out


# -- bad inputs -----------------------------------------------------------------------------
def test_conv2d_channel_mismatch_names_op_shapes_and_expected_weight():
    x, w = T(2, 3, 8, 8), T(16, 4, 3, 3)
    msg = message(ShapeError, lambda: em.conv2d(x, w))
    assert "conv2d" in msg and "(2, 3, 8, 8)" in msg and "(16, 4, 3, 3)" in msg
    assert "(16, 3, 3, 3)" in msg  # the weight that would fit
    msg = message(ShapeError, lambda: em.conv2d(T(1, 4, 5, 5), T(6, 1, 3, 3), groups=2))
    assert "(6, 2, 3, 3)" in msg and "groups=2" in msg


@pytest.mark.parametrize("fn,frag", [
    (lambda: em.conv2d(T(3, 8, 8), T(4, 3, 3)), "4-d weight"),
    (lambda: em.conv2d(T(8, 8), T(4, 3, 3, 3)), "conv2d"),
    (lambda: em.conv1d(T(1, 2, 3, 4), T(2, 2, 3)), "3-d input"),
    (lambda: em.conv2d(T(1, 3, 2, 2), T(4, 3, 3, 3)), "larger than the padded input"),
    (lambda: em.conv2d(T(1, 3, 2, 2), T(4, 3, 2, 3), dilation=2, padding=1),
     "larger than the padded input"),
    (lambda: em.conv2d(T(1, 3, 5, 5), T(4, 1, 3, 3), groups=3), "does not divide the 4"),
    (lambda: em.conv2d(T(1, 4, 5, 5), T(4, 2, 3, 3), groups=3), "does not divide the 4"),
    (lambda: em.conv2d(T(1, 4, 5, 5), T(4, 4, 3, 3), T(3)), "bias (3,)"),
    (lambda: em.conv2d(T(1, 4, 5, 5), T(4, 4, 3, 3), stride=0), "stride (0, 0)"),
    (lambda: em.conv2d(T(1, 4, 5, 5), T(4, 4, 3, 3), padding=-1), "padding"),
    (lambda: em.conv2d(T(1, 4, 5, 5), T(4, 4, 2, 2), padding="same"), "uneven padding"),
    (lambda: em.conv2d(T(1, 4, 5, 5), T(4, 4, 3, 3), padding="same", stride=2), "stride 1"),
    (lambda: em.conv_transpose2d(T(1, 3, 4, 4), T(4, 2, 3, 3)), "[in, out/groups"),
    (lambda: em.conv_transpose2d(T(1, 3, 4, 4), T(3, 2, 3, 3), stride=2, output_padding=2),
     "output_padding"),
    (lambda: em.conv_transpose2d(T(1, 3, 1, 1), T(3, 2, 1, 1), padding=1), "output size"),
    (lambda: em.max_pool2d(T(1, 2, 4, 4), 2, padding=2), "at most half the kernel"),
    (lambda: em.max_pool2d(T(1, 2, 2, 2), 3), "larger than the padded input"),
    (lambda: em.avg_pool1d(T(1, 2, 4, 4), 2), "3-d input"),
    (lambda: em.max_pool2d(T(1, 2, 4, 4), (2, 2, 2)), "kernel_size"),
    (lambda: em.adaptive_avg_pool2d(T(1, 2, 0, 4), 2), "empty spatial dim"),
    (lambda: em.interpolate(T(1, 2, 4), size=3, mode="bilinear"), "4-d"),
    (lambda: em.interpolate(T(1, 2, 4, 4), scale_factor=0.1), "sizes must be >= 1"),
    (lambda: em.layer_norm(T(2, 3), (4,)), "trailing dims"),
    (lambda: em.layer_norm(T(2, 3), 3, T(4)), "weight (4,)"),
    (lambda: em.group_norm(T(2, 6, 3), 4), "divisor of the 6"),
    (lambda: em.batch_norm(T(1, 3), em.zeros(3, dtype=em.f64), em.ones(3, dtype=em.f64),
                           training=True), "more than one value per channel"),
    (lambda: em.batch_norm(T(4, 3), em.zeros(2, dtype=em.f64), em.ones(2, dtype=em.f64)),
     "running_mean (2,)"),
])
def test_shape_errors(fn, frag):
    assert frag in message(ShapeError, fn)


def test_dtype_errors():
    assert "f32" in message(DTypeError, lambda: em.conv2d(T(1, 2, 3, 3), T(2, 2, 1, 1,
                                                                         dtype=em.f32)))
    msg = message(DTypeError, lambda: em.conv2d(T(1, 2, 3, 3).int(), T(2, 2, 1, 1).int()))
    assert "conv2d" in msg and "float" in msg
    assert "bias" in message(DTypeError, lambda: em.conv2d(T(1, 2, 3, 3), T(2, 2, 1, 1),
                                                           T(2, dtype=em.f32)))
    assert "indices" in message(DTypeError, lambda: em.embedding(T(4, 2), T(3)))
    assert "max_pool2d" in message(DTypeError, lambda: em.max_pool2d(T(1, 1, 2, 2).int(), 2))
    assert "Tensor" in message(DTypeError, lambda: em.conv2d(np.zeros((1, 1, 2, 2)),
                                                             T(1, 1, 1, 1)))


def test_value_errors():
    with pytest.raises(ValueError, match="mode"):
        em.interpolate(T(1, 1, 2, 2), size=3, mode="bicubic")
    with pytest.raises(ValueError, match="align_corners"):
        em.interpolate(T(1, 1, 2, 2), size=3, align_corners=True)
    with pytest.raises(ValueError, match="exactly one"):
        em.interpolate(T(1, 1, 2, 2), size=3, scale_factor=2)


def test_embedding_index_out_of_range():
    w = T(5, 3)
    for bad in (5, -1):
        msg = message(IndexError_, lambda: em.embedding(w, em.tensor([[0, bad]])).numpy())
        assert "embedding" in msg and str(bad) in msg and "0..4" in msg


# -- argument forms -------------------------------------------------------------------------
def test_unbatched_inputs_and_methods(torch):
    F = torch.nn.functional
    x, w, b = T(3, 6, 5), T(4, 3, 3, 3), T(4)
    out = x.conv2d(w, b, padding=1)
    ref = F.conv2d(tt(torch, x), tt(torch, w), tt(torch, b), padding=1).numpy()
    np.testing.assert_allclose(out.numpy(), ref, atol=1e-12)
    vals, idx = em.max_pool2d(x, 2, return_indices=True)
    rv, ri = F.max_pool2d(tt(torch, x), 2, return_indices=True)
    np.testing.assert_array_equal(vals.numpy(), rv.numpy())
    np.testing.assert_array_equal(idx.numpy(), ri.numpy())
    assert idx.dtype == em.int64
    np.testing.assert_allclose(x.adaptive_avg_pool2d((2, None)).numpy(),
                               F.adaptive_avg_pool2d(tt(torch, x), (2, None)).numpy(),
                               atol=1e-12)
    y = T(2, 7)
    np.testing.assert_allclose(em.avg_pool1d(y, 3, 2, 1).numpy(),
                               F.avg_pool1d(tt(torch, y), 3, 2, 1).numpy(), atol=1e-12)


def test_bias_gradient_and_max_pool_indices_not_tracked():
    x, w, b = T(2, 3, 5, 5, device=AD), T(4, 3, 3, 3, device=AD), T(4, device=AD).require_grad()
    out = em.conv2d(x, w, b)
    grads = out.sum().backward()
    np.testing.assert_allclose(b.grad(grads).numpy(), np.full(4, 2 * 3 * 3.0))
    xr = x.require_grad()
    vals, idx = em.max_pool2d(xr, 2, return_indices=True)
    assert not idx.is_require_grad() and vals.is_require_grad()
    g = xr.grad(vals.sum().backward()).numpy()
    assert g.sum() == vals.numel() and set(np.unique(g)) <= {0.0, 1.0}


# -- sweeps against torch -------------------------------------------------------------------
def _check_grads(torch, em_fn, t_fn, arrays, atol=1e-10):
    ems = [em.tensor(a, device=AD).require_grad() for a in arrays]
    ts = [torch.from_numpy(a).requires_grad_(True) for a in arrays]
    out = em_fn(*ems)
    ref = t_fn(*ts)
    assert tuple(out.shape) == tuple(ref.shape)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=atol)
    gout = RNG.normal(size=tuple(ref.shape))
    grads = (out * em.tensor(gout, device=AD)).sum().backward()
    ref.backward(torch.from_numpy(gout))
    for e, t in zip(ems, ts):
        np.testing.assert_allclose(e.grad(grads).numpy(), t.grad.numpy(), atol=atol)


def test_conv2d_sweep_values_and_grads(torch):
    F = torch.nn.functional
    configs = itertools.product((1, 2, 3), (0, 1, 2), (1, 2), (1, 2), ((5, 6), (7, 4)))
    for stride, padding, dilation, groups, (h, w_) in configs:
        x = RNG.normal(size=(2, 2 * groups, h, w_))
        w = RNG.normal(size=(2 * groups, 2, 3, 2))
        if (h + 2 * padding - dilation * 2 - 1) < 0 or (w_ + 2 * padding - dilation - 1) < 0:
            continue
        kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
        _check_grads(torch, lambda a, b: em.conv2d(a, b, **kw),
                     lambda a, b: F.conv2d(a, b, **kw), [x, w])


def test_conv_transpose_sweep_values_and_grads(torch):
    F = torch.nn.functional
    for stride, padding, dilation, groups in itertools.product((1, 2, 3), (0, 1), (1, 2),
                                                               (1, 2)):
        for output_padding in range(stride):
            x = RNG.normal(size=(2, 2 * groups, 3, 4))
            w = RNG.normal(size=(2 * groups, 3, 2, 3))
            kw = dict(stride=stride, padding=padding, output_padding=output_padding,
                      dilation=dilation, groups=groups)
            _check_grads(torch, lambda a, b: em.conv_transpose2d(a, b, **kw),
                         lambda a, b: F.conv_transpose2d(a, b, **kw), [x, w])
            x1 = RNG.normal(size=(1, 2 * groups, 5))
            w1 = RNG.normal(size=(2 * groups, 2, 3))
            _check_grads(torch, lambda a, b: em.conv_transpose1d(a, b, **kw),
                         lambda a, b: F.conv_transpose1d(a, b, **kw), [x1, w1])


def test_pool_sweeps(torch):
    F = torch.nn.functional
    for k, s, p, d, ceil in itertools.product((1, 2, 3), (1, 2, 3), (0, 1), (1, 2),
                                              (False, True)):
        if p > k // 2:
            continue
        x = RNG.normal(size=(1, 2, 7, 6))
        xt = torch.from_numpy(x)
        if (7 + 2 * p - d * (k - 1) - 1) < 0:
            continue
        vals, idx = em.max_pool2d(em.tensor(x), k, s, p, d, ceil, return_indices=True)
        rv, ri = F.max_pool2d(xt, k, s, p, d, ceil, return_indices=True)
        np.testing.assert_array_equal(vals.numpy(), rv.numpy())
        np.testing.assert_array_equal(idx.numpy(), ri.numpy())
        _check_grads(torch, lambda a: em.max_pool1d(a, k, s, p, d, ceil),
                     lambda a: F.max_pool1d(a, k, s, p, d, ceil), [x[:, :, 0]])
        if d == 1:
            for cip in (False, True):
                _check_grads(torch, lambda a: em.avg_pool2d(a, k, s, p, ceil, cip),
                             lambda a: F.avg_pool2d(a, k, s, p, ceil, cip), [x])


def test_adaptive_and_interpolate_sweeps(torch):
    F = torch.nn.functional
    for n in range(1, 8):
        for o in range(1, 10):
            x = RNG.normal(size=(1, 1, n, n + 1))
            _check_grads(torch, lambda a: em.adaptive_avg_pool2d(a, (o, o + 1)),
                         lambda a: F.adaptive_avg_pool2d(a, (o, o + 1)), [x])
            for mode, ac in (("nearest", None), ("bilinear", False), ("bilinear", True)):
                _check_grads(torch, lambda a: em.interpolate(a, size=(o, o + 2), mode=mode,
                                                             align_corners=ac),
                             lambda a: F.interpolate(a, size=(o, o + 2), mode=mode,
                                                     align_corners=ac), [x])
    for sf in (0.5, 0.7, 1.3, 1.5, 2.0, 2.5, 3.0, 1 / 3):
        x = RNG.normal(size=(1, 2, 6, 5))
        for mode in ("nearest", "bilinear"):
            _check_grads(torch, lambda a: em.interpolate(a, scale_factor=sf, mode=mode),
                         lambda a: F.interpolate(a, scale_factor=sf, mode=mode), [x])
        _check_grads(torch, lambda a: em.interpolate(a, scale_factor=sf, mode="linear"),
                     lambda a: F.interpolate(a, scale_factor=sf, mode="linear"), [x[:, :, 0]])


def test_half_precision_conv_close_to_f32(torch):
    F = torch.nn.functional
    x, w = RNG.normal(size=(2, 8, 9, 9)), RNG.normal(size=(6, 4, 3, 3))
    ref = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1, groups=2).numpy()
    for dtype, tol in ((em.f16, 2e-2), (em.bf16, 2e-1)):
        xe = em.tensor(x, dtype=dtype)
        we = em.tensor(w, dtype=dtype)
        xr = xe.cast(em.f64).numpy()
        wr = we.cast(em.f64).numpy()
        ref = F.conv2d(torch.from_numpy(xr), torch.from_numpy(wr), padding=1, groups=2).numpy()
        out = em.conv2d(xe, we, padding=1, groups=2)
        assert out.dtype == dtype
        np.testing.assert_allclose(out.cast(em.f64).numpy(), ref, atol=tol, rtol=1e-2)


# -- batch_norm running stats ---------------------------------------------------------------
def test_batch_norm_running_stats(torch):
    F = torch.nn.functional
    x = T(5, 3, 4, device=AD).require_grad()
    rm, rv = em.zeros(3, dtype=em.f64, device=AD), em.ones(3, dtype=em.f64, device=AD)
    w, b = T(3, device=AD).require_grad(), T(3, device=AD)
    out, nm, nv = em.batch_norm(x, rm, rv, w, b, training=True, momentum=0.3)
    trm, trv = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    ref = F.batch_norm(tt(torch, x), trm, trv, tt(torch, w), tt(torch, b), training=True,
                       momentum=0.3)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), atol=1e-12)
    np.testing.assert_allclose(nm.numpy(), trm.numpy(), atol=1e-12)
    np.testing.assert_allclose(nv.numpy(), trv.numpy(), atol=1e-12)
    assert not nm.is_require_grad() and not nv.is_require_grad()
    assert rm.numpy().tolist() == [0.0] * 3  # functional: the inputs are unchanged
    # evaluation uses (and returns) the running stats
    out2, m2, v2 = em.batch_norm(x, nm, nv, w, b)
    ref2 = F.batch_norm(tt(torch, x), trm, trv, tt(torch, w), tt(torch, b))
    np.testing.assert_allclose(out2.numpy(), ref2.numpy(), atol=1e-12)
    assert m2 is nm and v2 is nv
    # without running stats, batch statistics normalize and None comes back
    out3, m3, v3 = em.batch_norm(x, None, None)
    ref3 = F.batch_norm(tt(torch, x), None, None, training=True)
    np.testing.assert_allclose(out3.numpy(), ref3.numpy(), atol=1e-12)
    assert m3 is None and v3 is None


def test_norms_in_half_precision_keep_dtype(torch):
    F = torch.nn.functional
    x = RNG.normal(size=(4, 6, 5)) * 3 + 1
    for dtype in (em.f16, em.bf16):
        xe = em.tensor(x, dtype=dtype)
        xr = torch.from_numpy(xe.cast(em.f64).numpy())
        for out, ref in ((em.layer_norm(xe, 5), F.layer_norm(xr, (5,))),
                         (em.group_norm(xe, 3), F.group_norm(xr, 3)),
                         (em.batch_norm(xe, training=True)[0],
                          F.batch_norm(xr, None, None, training=True))):
            assert out.dtype == dtype
            np.testing.assert_allclose(out.cast(em.f64).numpy(), ref.numpy(), atol=3e-2,
                                       rtol=2e-2)


def test_nearest_indices_match_torch(torch):
    """PyTorch's 'nearest' picks floor(dst * scale) in f32 arithmetic; an f64 formula differs
    at some sizes (e.g. 21 -> 69), so the indices are checked exactly over a sweep."""
    F = torch.nn.functional
    for n in range(1, 30):
        x = np.arange(n, dtype=np.float32).reshape(1, 1, 1, n)
        xe, xt = em.tensor(x), torch.from_numpy(x)
        for o in range(1, 90):
            np.testing.assert_array_equal(em.interpolate(xe, size=(1, o)).numpy(),
                                          F.interpolate(xt, size=(1, o)).numpy())
        for sf in (0.3, 0.7, 1.1, 1.3, 1.7, 2.5, 1 / 3, 2 / 3, 1 / 7, 4.2):
            if int(n * sf) >= 1:
                np.testing.assert_array_equal(
                    em.interpolate(xe, scale_factor=(1, sf)).numpy(),
                    F.interpolate(xt, scale_factor=(1, sf)).numpy())


def test_max_pool_nan_and_neg_inf_like_torch(torch):
    F = torch.nn.functional
    x = RNG.normal(size=(2, 2, 7, 6))
    x[0, 0, 0, :3] = np.nan
    x[0, 1, 4, 4] = np.nan
    x[1, 1, :4, :4] = -np.inf
    for kw in (dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2, stride=1),
               dict(kernel_size=3, stride=2, padding=1, dilation=2, ceil_mode=True)):
        vals, idx = em.max_pool2d(em.tensor(x), return_indices=True, **kw)
        rv, ri = F.max_pool2d(torch.from_numpy(x), return_indices=True, **kw)
        np.testing.assert_array_equal(vals.numpy(), rv.numpy())
        np.testing.assert_array_equal(idx.numpy(), ri.numpy())
        np.testing.assert_array_equal(em.max_pool2d(em.tensor(x), **kw).numpy(), rv.numpy())


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=3, stride=1, padding=1)])
def test_max_pool_gradient_of_channels_last_input(torch, kw):
    """A conv's output is laid out channels-last; max pooling's gradient keeps that layout
    (disjoint and overlapping windows), with the values of the NCHW input and of PyTorch."""
    F = torch.nn.functional
    x = RNG.normal(size=(3, 5, 8, 6)).astype(np.float32)
    g = RNG.normal(size=F.max_pool2d(torch.from_numpy(x), **kw).shape).astype(np.float32)
    xt = torch.from_numpy(x).requires_grad_()
    (F.max_pool2d(xt, **kw) * torch.from_numpy(g)).sum().backward()
    dev = em.device("cpu", fusion=False).autodiff()
    nhwc = em.tensor(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), device=dev)
    grads = []
    for xe in (em.tensor(x, device=dev), nhwc.permute(0, 3, 1, 2)):
        xe = xe.detach().require_grad()
        y = em.max_pool2d(xe, **kw)
        grads.append(xe.grad((y * em.tensor(g, device=dev)).sum().backward()))
    assert grads[1].primitive.strides[1] == 4, grads[1].primitive.strides  # channels innermost
    np.testing.assert_array_equal(grads[1].numpy(), grads[0].numpy())
    np.testing.assert_allclose(grads[0].numpy(), xt.grad.numpy(), rtol=1e-6, atol=1e-6)
