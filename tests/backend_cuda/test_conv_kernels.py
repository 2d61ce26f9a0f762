"""The Cuda backend's convolutions (`ember.backend.cuda.conv`: columns by one kernel, products
on cuBLAS) and its max-pool backward scatter (`ops.MAX_POOL_SOURCE`) against the NumPy
references of ember/ops/nn.py in float64.

Without a GPU the host code runs on NumPy arrays with each kernel re-enacted in NumPy, index
arithmetic as in its source (`FakeKernels`), over outputs poisoned with NaN -- so the
launches' parameters, layouts and the products' operand orders are checked everywhere (the
sources compile with NVRTC in test_cuda_loss_pool_kernels.py). On a GPU the same cases run the real kernels, and a LeNet-like
training step's gradients are compared with the CPU device's."""
from __future__ import annotations

import ctypes
import itertools
import types

import numpy as np
import pytest

import ember as em
from ember.backend.cuda import conv as C
from ember.backend.cuda import ops as cuda_ops
from ember.ops import nn as N

gpu = pytest.mark.skipif(not em.cuda.is_available(),
                         reason=f"cuda: {em.cuda.why_unavailable()}")


# -- without a GPU: the host code over NumPy, the kernels re-enacted --------------------
# (the column source compiles in test_cuda_loss_pool_kernels.py)
class _Data:
    __slots__ = ("ptr",)

    def __init__(self, ptr):
        self.ptr = ptr


class Dev(np.ndarray):
    """NumPy memory with CuPy's ``.data.ptr``."""

    @property
    def data(self):
        return _Data(self.__array_interface__["data"][0])


def _dev(a):
    return np.asarray(a).view(Dev)


def _flat(a):
    """``(the memory under a as a flat array, element offset of a's first element in it)``
    (the memory of the array that owns a's, from its lowest address: any layout)."""
    base = a
    while isinstance(base.base, np.ndarray):
        base = base.base
    lo = base.__array_interface__["data"][0] + sum(
        (n - 1) * s for n, s in zip(base.shape, base.strides) if s < 0)
    ext = sum((n - 1) * abs(s) for n, s in zip(base.shape, base.strides)) + base.itemsize
    flat = np.ctypeslib.as_array((ctypes.c_char * ext).from_address(lo)).view(a.dtype)
    return flat, (a.__array_interface__["data"][0] - lo) // a.itemsize


def _emu_im2col(x, cols, total, Q, NP, Cg, H, W, OH, OW, sn, sc, sh, sw, kh, kw, sth, stw,
                ph, pw, dh, dw):
    e = np.arange(total)
    q, r = e % Q, e // Q
    j, t = q % kw, q // kw
    i, c = t % kh, t // kh
    p, g = r % NP, r // NP
    ow, u = p % OW, p // OW
    oh, n = u % OH, u // OH
    h, w = oh * sth - ph + i * dh, ow * stw - pw + j * dw
    ok = (h >= 0) & (h < H) & (w >= 0) & (w < W)
    flat, off = _flat(x)
    src = off + n * sn + (g * Cg + c) * sc + h * sh + w * sw
    out = np.zeros(total, cols.dtype)
    out[ok] = flat[src[ok]]
    cols.reshape(-1)[:] = out


def _emu_gather4(x, out, total, off, D1, D2, D3, s0, s1, s2, s3):
    e = np.arange(total)
    d3, t = e % D3, e // D3
    d2, u = t % D2, t // D2
    d1, d0 = u % D1, u // D1
    flat, o0 = _flat(x)
    out.reshape(-1)[:] = flat[o0 + off + d0 * s0 + d1 * s1 + d2 * s2 + d3 * s3]


def _emu_scatter(g, idx, out, total, C_, OH, OW, plane, gn, gc, gh, gw, in_, ic, ih, iw,
                 cl):
    e = np.arange(total)
    ow, t = e % OW, e // OW
    oh, u = t % OH, t // OH
    c, n = u % C_, u // C_
    fi, oi = _flat(idx)
    p = fi[oi + n * in_ + c * ic + oh * ih + ow * iw]
    keep = (p >= 0) & (p < plane)
    fg, og = _flat(g)
    dst = np.where(cl, (n * plane + p) * C_ + c, (n * C_ + c) * plane + p)
    out.reshape(-1)[dst[keep]] = fg[og + (n * gn + c * gc + oh * gh + ow * gw)[keep]]


class FakeKernels:
    """`ops._Kernels` with each kernel re-enacted in NumPy (its parameters as the launch
    packs them: arrays, then the 64-bit and the 32-bit integers)."""
    calls: list = []

    def __init__(self, cp, source):
        self.source = source

    def launch(self, name, grid, block, arrays, i64s=(), i32s=(), smem=0):
        FakeKernels.calls.append(name)
        args = (*arrays, *i64s, *i32s)
        if name.startswith("ember_im2col_"):
            assert name.endswith(("f32", "f64")) and arrays[1].dtype == arrays[0].dtype
            _emu_im2col(*args)
        elif name.startswith("ember_gather4_"):
            _emu_gather4(*args)
        elif name.startswith("ember_max_pool_scatter_"):
            _emu_scatter(*args)
        else:
            raise AssertionError(f"unexpected kernel {name}")


def _fake_cp():
    def ndarray(shape, dtype):
        return _dev(np.full(shape, np.nan, dtype) if np.dtype(dtype).kind == "f" else
                    np.empty(shape, dtype))

    def memset(ptr, value, nbytes, stream):
        ctypes.memset(ptr, value, nbytes)

    cuda = types.SimpleNamespace(
        runtime=types.SimpleNamespace(memsetAsync=memset, getDevice=lambda: 0),
        get_current_stream=lambda: types.SimpleNamespace(ptr=0))
    return types.SimpleNamespace(ndarray=ndarray, ascontiguousarray=np.ascontiguousarray,
                                 cuda=cuda)


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(C, "_Kernels", FakeKernels)
    monkeypatch.setattr(cuda_ops, "_Kernels", FakeKernels)
    FakeKernels.calls = []
    return _fake_cp(), np          # (xp: the references of the fallbacks run on NumPy)


def _conv_cases(nd):
    """(x shape, weight shape, attrs) cases: strides, padding, dilation, groups."""
    sp = (9, 8) if nd == 2 else (11,)
    for (c, o, g), st, p, d in itertools.product(((3, 4, 1), (4, 6, 2), (1, 6, 1)),
                                                 (1, 2), (0, 1), (1, 2)):
        k = (3, 2) if nd == 2 else (3,)
        yield ((2, c) + sp, (o, c // g) + k,
               {"stride": (st,) * nd, "padding": (p,) * nd, "dilation": (d,) * nd,
                "groups": g})


def _views(x):
    """x as contiguous, channels-last and reversed views."""
    nd = x.ndim - 2
    cl = np.ascontiguousarray(np.moveaxis(x, 1, -1))
    yield "contiguous", x
    yield "channels_last", np.moveaxis(cl, -1, 1)
    yield "reversed", np.ascontiguousarray(x[(slice(None),) * 2 + (slice(None, None, -1),)
                                             * nd])[(slice(None),) * 2 +
                                                    (slice(None, None, -1),) * nd]


def _run_conv_cases(cp, xp, to_dev, to_host, tol):
    rng = np.random.default_rng(0)
    n = 0
    for nd in (1, 2):
        conv = cuda_ops.CUDA_IMPLS[f"conv{nd}d"](cp, xp)
        wgrad = cuda_ops.CUDA_IMPLS[f"conv{nd}d_weight_backward"](cp, xp)
        tconv = cuda_ops.CUDA_IMPLS[f"conv_transpose{nd}d"](cp, xp)
        for xs, ws, at in _conv_cases(nd):
            if at["groups"] > 1 and ws[1] == 1:
                continue              # depthwise: the reference's own path
            x = rng.normal(size=xs)
            w = rng.normal(size=ws)
            try:
                want = N._conv_np(nd)(x, w, **at)
            except Exception:        # noqa: BLE001  (a kernel larger than the input)
                continue
            gy = rng.normal(size=want.shape)
            want_gw = N._conv_weight_backward_np(nd)(x, gy, ws[2:], **at)
            for vname, xv in _views(x):
                for dt_ in (np.float64, np.float32):
                    what = f"{nd}d {xs} {ws} {at} {vname} {np.dtype(dt_)}"
                    t = tol[np.dtype(dt_)]
                    y = conv(to_dev(xv.astype(dt_)), to_dev(w.astype(dt_)), **at)
                    assert y.shape == want.shape and y.dtype == dt_, what
                    np.testing.assert_allclose(to_host(y), want, rtol=t, atol=t, err_msg=what)
                    gw = wgrad(to_dev(xv.astype(dt_)), to_dev(gy.astype(dt_)),
                               kernel=ws[2:], **at)
                    assert gw.shape == ws, what
                    np.testing.assert_allclose(to_host(gw), want_gw, rtol=t, atol=t * 10,
                                               err_msg="weight grad " + what)
                    n += 1
            # the input gradient: a transposed conv of gy (stride 1, one group: the
            # kernels; otherwise the reference runs)
            opad = N._grad_output_padding(xs[2:], want.shape[2:], ws[2:], at["stride"],
                                          at["padding"], at["dilation"])
            tat = dict(at, output_padding=opad)
            want_gx = N._conv_transpose_np(nd)(gy, w, **tat)
            for vname, gv in _views(gy):
                got = tconv(to_dev(gv), to_dev(w), **tat)
                np.testing.assert_allclose(to_host(got), want_gx, rtol=1e-10, atol=1e-10,
                                           err_msg=f"input grad {nd}d {at} {vname}")
    assert n > 50


def test_convolutions_emulated(fake):
    cp, xp = fake
    _run_conv_cases(cp, xp, _dev, np.asarray,
                    {np.dtype(np.float64): 1e-10, np.dtype(np.float32): 2e-5})
    assert {"ember_im2col_f32", "ember_im2col_f64", "ember_gather4_f64"} <= \
        set(FakeKernels.calls)


def test_conv_output_layout_and_fallbacks_emulated(fake):
    cp, xp = fake
    conv = cuda_ops.CUDA_IMPLS["conv2d"](cp, xp)
    x = _dev(np.ones((2, 3, 6, 6)))
    y = conv(x, _dev(np.ones((5, 3, 3, 3))), stride=(1, 1), padding=(0, 0),
             dilation=(1, 1), groups=1)
    assert y.strides[1] == y.itemsize, "channels innermost, as the reference lays it out"
    np.testing.assert_array_equal(np.asarray(y), 27.0)
    FakeKernels.calls = []
    # f16 and depthwise convs: the references (no kernel)
    conv(x.astype(np.float16).view(Dev), _dev(np.ones((5, 3, 3, 3), np.float16)),
         stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1)
    conv(x, _dev(np.ones((6, 1, 3, 3))), stride=(1, 1), padding=(0, 0), dilation=(1, 1),
         groups=3)
    assert FakeKernels.calls == []


def _pool_bwd_cases():
    for nd, shape, k in ((2, (2, 3, 8, 6), (2, 2)), (2, (1, 1, 7, 5), (3, 2)),
                         (1, (2, 4, 9), (3,)), (2, (2, 5, 6, 6), (2, 3))):
        yield nd, shape, {"kernel": k, "stride": k, "padding": (0,) * nd,
                          "dilation": (1,) * nd, "ceil_mode": nd == 1}


def _run_pool_bwd_cases(cp, xp, to_dev, to_host):
    rng = np.random.default_rng(1)
    fn = cuda_ops.CUDA_IMPLS["max_pool2d_backward"](cp, xp)
    n = 0
    for nd, shape, at in _pool_bwd_cases():
        x = rng.normal(size=shape)
        for cl in (False, True):
            xv = np.moveaxis(np.ascontiguousarray(np.moveaxis(x, 1, -1)), -1, 1) if cl else x
            _, idx = N._max_pool_idx_np(nd)(xv, **at)
            assert not cl or shape[1] == 1 or idx.strides[1] == idx.itemsize
            g = rng.normal(size=idx.shape)
            for dt_ in (np.float64, np.float32, np.float16):
                want = N._max_pool_backward_np(g.astype(dt_), idx, shape[2:], True)
                got = fn(to_dev(g.astype(dt_)), to_dev(idx), input_size=shape[2:],
                         disjoint=True)
                assert got.dtype == dt_ and got.shape == want.shape
                assert got.strides == want.strides, "the reference's layout"
                np.testing.assert_array_equal(to_host(got), want)
                n += 1
    assert n == 24


def test_max_pool_backward_emulated(fake):
    cp, xp = fake
    _run_pool_bwd_cases(cp, xp, _dev, np.asarray)
    assert set(FakeKernels.calls) == {"ember_max_pool_scatter_f64",
                                      "ember_max_pool_scatter_f32",
                                      "ember_max_pool_scatter_f16"}


# -- on a GPU -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dev():
    return em.device("cuda", fusion=False)


def _to_gpu(cp):
    def to_dev(a):
        """The same view of a device copy of a's memory."""
        flat, off = _flat(a)
        d = cp.asarray(flat)
        return cp.ndarray(a.shape, a.dtype, d.data + off * a.itemsize, strides=a.strides)
    return to_dev


@gpu
def test_convolutions_on_the_gpu(dev):
    cp, xp = dev.backend.cp, dev.backend.xp
    _run_conv_cases(cp, xp, _to_gpu(cp), cp.asnumpy,
                    {np.dtype(np.float64): 1e-10, np.dtype(np.float32): 2e-5})


@gpu
def test_max_pool_backward_on_the_gpu(dev):
    cp, xp = dev.backend.cp, dev.backend.xp
    _run_pool_bwd_cases(cp, xp, _to_gpu(cp), cp.asnumpy)


@gpu
@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_lenet_like_gradients_match_the_cpu(dtype):
    """Convs (one with padding and two groups), relu, 2x2 max pooling and their gradients
    on Autodiff(Fusion(Cuda)) against the CPU device."""
    rng = np.random.default_rng(2)
    npd = em.dtype.as_dtype(dtype).np
    host = [rng.normal(size=s).astype(npd) for s in
            ((4, 2, 28, 28), (6, 2, 5, 5), (6,), (16, 3, 3, 3), (16,))]
    got, want = [], []
    for d, out in ((em.device("cuda").autodiff(), got), (em.device("cpu").autodiff(), want)):
        x, w1, b1, w2, b2 = (em.tensor(a, device=d).require_grad() for a in host)
        h = em.max_pool2d(em.conv2d(x, w1, b1).relu(), 2)
        h = em.max_pool2d(em.conv2d(h, w2, b2, padding=1, groups=2).relu(), 2)
        loss = (h * h).sum()
        grads = loss.backward()
        out += [loss.numpy()] + [t.grad(grads).numpy() for t in (x, w1, b1, w2, b2)]
    tol = 1e-9 if dtype == "f64" else 2e-5       # (f32: of each output's largest value)
    for i, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * np.abs(b).max(),
                                   err_msg=f"output {i}")
