"""The Cuda backend's one-kernel layer norm (`ember.backend.cuda.norm`: LN_SOURCE) against
the NumPy reference in ember/ops/nn.py. Without a GPU: the source compiles with NVRTC, the
layout planning picks the kernels it should, and the kernels' index arithmetic (re-enacted
here in Python, line for line) reads each row where the input holds it and writes it where
y wants it. The rest runs on a GPU and is skipped by name elsewhere."""
from __future__ import annotations

import inspect

import ml_dtypes
import numpy as np
import pytest

import ember as em
from ember.backend.cuda import norm
from ember.backend.cuda import ops as cuda_ops
from ember.kernel.cuda.compiler import default_arch
from ember.ops import OPS
from ember.ops import nn as N
from tests.kernel_cuda._util import nvrtc_or_skip

BF16 = np.dtype(ml_dtypes.bfloat16)
gpu = pytest.mark.skipif(not em.cuda.is_available(),
                         reason=f"cuda: {em.cuda.why_unavailable()}")


# -- without a GPU ------------------------------------------------------------------------
@pytest.mark.parametrize("std", ["--std=c++14", "--std=c++17"])
def test_kernel_source_compiles(tmp_path, std):
    compiler = nvrtc_or_skip(tmp_path)
    c = compiler.build(norm.LN_SOURCE, default_arch(), options=(std,))
    assert c.binary, "empty binary"
    missing = [n for n in norm.ln_kernel_names() if n.encode() not in c.binary]
    assert not missing, f"entry points the host code launches but the binary lacks: {missing}"


def test_entry_matches_the_registry_op():
    op = OPS["layer_norm"]
    assert cuda_ops.how(op) == "impl"
    fn = cuda_ops.CUDA_IMPLS["layer_norm"](None, None)
    params = inspect.signature(fn).parameters.values()
    assert tuple(p.name for p in params if p.kind is p.KEYWORD_ONLY) == op.attrs
    from ember.backend.cuda.backend import Cuda
    assert "layer_norm" in Cuda.fused_ops and op.decompose is not None


def _estrides(a):
    return tuple(s // a.itemsize for s in a.strides)


def _plan(x, ndim, itemsize=4):
    lay = norm.layout(x.shape, _estrides(x), ndim)
    return None if lay is None else norm.plan(*lay, itemsize)


def test_planning(monkeypatch):
    x = np.empty((4, 256, 64), np.float32)
    sw = np.swapaxes(x, 1, 2)                                  # bench row 4, smaller
    assert _plan(sw, 1)[0] == "tile_{}_32" and _plan(sw, 1)[4] == 3
    assert _plan(sw, 1, 8)[0] == "tile_{}_16"                  # f64: a narrower tile
    assert _plan(x, 1)[0] == "rows_{}_w_s"
    h100 = 227 * 1024                                          # sharedMemPerBlockOptin
    # the wide tile: 64 rows, 16-byte reads, 256 * 65 * 4 bytes of shared memory opted in
    alt = norm._plan_for(sw, 1, "f32", 4, h100)[7]
    assert alt == ("ember_ln_tile_f32_64v", 1 * 4, 256 * 65 * 4)
    big = np.swapaxes(np.empty((64, 256, 4096), np.float32), 1, 2)       # bench row 4
    assert norm._plan_for(big, 1, "f32", 4, h100)[7][1] == 64 * 4096 // 64
    assert norm._plan_for(sw, 1, "f32", 4)[7] is None          # (no opt-in: 48 KiB)
    assert norm._plan_for(sw[:, 1:], 1, "f32", 4, h100)[7] is not None   # (checked per call)
    assert norm._plan_for(np.swapaxes(np.empty((4, 256, 63), np.float32), 1, 2), 1, "f32",
                          4, h100)[7] is None                          # rows not aligned
    assert norm._plan_for(sw, 1, "f64", 8, h100)[7] is None
    assert norm._plan_for(np.swapaxes(np.empty((4, 512, 64), np.float32), 1, 2), 1, "f32",
                          4, h100)[7] is None                  # past WIDE_SMEM_MAX
    monkeypatch.setattr(norm, "WIDE_TILES", False)
    assert norm._plan_for(sw, 1, "f32", 4, h100)[7] is None             # (VEC_READS off)
    monkeypatch.setattr(norm, "VEC_READS", True)
    p = norm._plan_for(sw, 1, "f32", 4, h100)
    assert p[7] == ("ember_ln_tile_f32_32v", p[2], p[4])       # 16-byte reads, 32 rows
    assert _plan(np.empty((8, 5000), np.float32), 1)[0] == "rows_{}_b_s"
    assert _plan(np.empty((8, 20000), np.float32), 1)[0] == "rows_{}_b_g"
    assert _plan(np.empty((8, 1000), np.float64), 1, 8)[0] == "rows_{}_w_g"
    assert _plan(np.swapaxes(np.empty((2, 3000, 64), np.float32), 1, 2), 1) is None
    # two normalized dims that do not merge in memory: copied first
    assert norm.layout((3, 4, 5), _estrides(np.empty((5, 3, 4)).transpose(1, 2, 0)), 2) \
        is None
    # leading dims merge where adjacent in memory
    assert norm.layout((2, 3, 4, 5), (60, 20, 5, 1), 1) == (5, 1, ((24, 5),))
    assert norm.layout((2, 1, 3, 5), (15, 99, 5, 1), 1) == (5, 1, ((6, 5),))


def _run_emulated(x, ndim, itemsize):
    """y as the kernels compute it, their index arithmetic re-enacted (statistics in f64)."""
    sx = _estrides(x)
    base = x
    while base.base is not None:
        base = base.base
    flat = base.reshape(-1)
    off0 = (x.__array_interface__["data"][0] - base.__array_interface__["data"][0]) \
        // x.itemsize
    lay = norm.layout(x.shape, sx, ndim)
    how = None if lay is None else norm.plan(*lay, itemsize)
    if how is None:
        return None
    n, sn, lead = lay
    suffix, grid, block, smem, ld = how
    pad = ((1, 0),) * (norm.MAX_LEAD - len(lead)) + lead
    L = [p[0] for p in pad]
    S = [p[1] for p in pad]
    M = int(np.prod(L))
    y = np.full(M * n, np.nan)

    def put(row, vals):
        v = vals.astype(np.float64)
        mu = v.mean()
        y[row * n:(row + 1) * n] = (v - mu) / np.sqrt(((v - mu) ** 2).mean() + 1e-5)

    j = np.arange(n)
    if suffix.startswith("rows"):
        for r in range(M):
            q = r
            i3 = q % L[3]; q //= L[3]                           # noqa: E702
            i2 = q % L[2]; q //= L[2]                           # noqa: E702
            i1 = q % L[1]
            i0 = q // L[1]
            xoff = i0 * S[0] + i1 * S[1] + i2 * S[2] + i3 * S[3]
            put(r, flat[off0 + xoff + j * sn])
    else:
        tc = int(suffix.rsplit("_", 1)[1])
        ll, sl = L[ld], S[ld]
        ntl = -(-ll // tc)
        total = ntl * (M // ll)
        for t in range(total):
            o = t // ntl
            l0 = (t - o * ntl) * tc
            xoff, row, rstride, lrs = 0, 0, 1, 1
            for d in (3, 2, 1, 0):
                if d == ld:
                    lrs = rstride
                else:
                    i = o % L[d]
                    o //= L[d]
                    xoff += i * S[d]
                    row += i * rstride
                rstride *= L[d]
            xoff += l0 * sl
            row += l0 * lrs
            for c in range(min(tc, ll - l0)):
                put(row + c * lrs, flat[off0 + xoff + j * sn + c * sl])
    assert not np.isnan(y).any(), "rows the kernels never write"
    return y.reshape(x.shape)


def _layouts():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(3, 40, 20))
    b = rng.normal(size=(2, 3, 4, 5, 6))
    return [
        ("contiguous", a, 1), ("swapped", np.swapaxes(a, 1, 2), 1),
        ("swapped_f64", np.swapaxes(a, 1, 2), 1),
        ("permuted", a.transpose(2, 0, 1), 1), ("permuted_2d", a.transpose(2, 0, 1), 2),
        ("flipped", a[::-1, :, ::-1], 1), ("sliced", a[:, ::3, 1:], 1),
        ("swapped_sliced", np.swapaxes(a, 1, 2)[1:, 3:17], 1),
        ("swapped_wide", np.swapaxes(rng.normal(size=(2, 64, 72)), 1, 2), 1),   # 16-byte reads
        ("swapped_wide_offset", np.swapaxes(rng.normal(size=(2, 64, 76)), 1, 2)[:, 1:], 1),
        ("swapped_256", np.swapaxes(rng.normal(size=(2, 256, 100)), 1, 2), 1),   # opted in
        ("5d_moved", np.moveaxis(b, 4, 1), 1), ("5d_moved_2d", np.moveaxis(b, 0, 4), 2),
        ("expanded", np.broadcast_to(a[:1], (4, 40, 20)), 1),
        ("expanded_swapped", np.swapaxes(np.broadcast_to(a[:1], (4, 40, 20)), 1, 2), 1),
        ("long_rows", rng.normal(size=(3, 1500)), 1),
        ("long_swapped", np.swapaxes(rng.normal(size=(2, 700, 33)), 1, 2), 1),
    ]


@pytest.mark.parametrize("name,x,ndim", _layouts(), ids=[c[0] for c in _layouts()])
def test_index_arithmetic_reads_and_writes_each_row(name, x, ndim):
    itemsize = 8 if name.endswith("f64") else 4
    got = _run_emulated(x, ndim, itemsize)
    if got is None:                       # copied first: the contiguous plan then
        got = _run_emulated(np.ascontiguousarray(x), ndim, itemsize)
    want = N._layer_norm_numpy(np.ascontiguousarray(x), ndim=ndim, eps=1e-5,
                               has_weight=False, has_bias=False)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


# -- on a GPU -----------------------------------------------------------------------------
TOL = {"f64": 1e-12, "f32": 3e-6, "f16": 4e-3, "bf16": 3e-2}


@pytest.fixture(scope="module")
def dev():
    return em.device("cuda", fusion=False)


def _check(got, x, ndim, w, b, d, what):
    want = N._layer_norm_numpy(x.astype(np.float64), *[v.astype(np.float64) for v in (w, b)
                                                       if v is not None],
                               ndim=ndim, eps=1e-5, has_weight=w is not None,
                               has_bias=b is not None)
    err = np.abs(got.astype(np.float64) - want) / (1 + np.abs(want))
    assert err.max() <= TOL[d] * 4, f"{what}: max relative error {err.max():.3g}"


@gpu
@pytest.mark.parametrize("mode", ["scalar", "vec", "wide"])
@pytest.mark.parametrize("d", ["f32", "f64", "f16", "bf16"])
@pytest.mark.parametrize("name,x,ndim", _layouts(), ids=[c[0] for c in _layouts()])
def test_kernels_on_the_gpu(monkeypatch, mode, d, name, x, ndim):
    if mode != "scalar" and d != "f32":
        pytest.skip("16-byte reads are f32 only")
    # (read when a layout is planned)
    monkeypatch.setattr(norm, "VEC_READS", mode == "vec")
    monkeypatch.setattr(norm, "WIDE_TILES", mode == "wide")
    rng = np.random.default_rng(1)
    npd = em.dtype.as_dtype(d).np
    ns = x.shape[x.ndim - ndim:]
    host = np.ascontiguousarray(x).astype(npd)
    w = (1 + 0.2 * rng.normal(size=ns)).astype(npd)
    b = (0.3 * rng.normal(size=ns)).astype(npd)
    # the same view of a device copy of x's base array (bf16 is computed as f32 on Cuda:
    # `Cuda._runner` upcasts it before the op runs)
    import cupy as cp
    base = x
    while base.base is not None:
        base = base.base
    kd = np.float32 if npd == BF16 else npd
    arr = cp.asarray(base.astype(npd).astype(kd))
    off = (x.__array_interface__["data"][0] - base.__array_interface__["data"][0]) \
        // x.itemsize
    view = cp.ndarray(x.shape, kd, arr.data + off * arr.itemsize,
                      strides=tuple(s // x.itemsize * arr.itemsize for s in x.strides))
    fn = cuda_ops.CUDA_IMPLS["layer_norm"](cp, None)
    for wv, bv in ((w, b), (w, None), (None, b), (None, None)):
        wb = [cp.asarray(v.astype(kd)) for v in (wv, bv) if v is not None]
        out = fn(view, *wb, ndim=ndim, eps=1e-5, has_weight=wv is not None,
                 has_bias=bv is not None)
        assert out.shape == x.shape and out.flags.c_contiguous
        got = cp.asnumpy(out).astype(npd)
        _check(got, host, ndim, wv, bv, d, f"{name} {d} w={wv is not None} "
                                            f"b={bv is not None}")


@gpu
def test_through_the_tensor_api_and_fusion(dev):
    rng = np.random.default_rng(2)
    a = rng.normal(size=(4, 256, 96)).astype(np.float32) * 2 + 0.5
    w = (1 + 0.1 * rng.normal(size=256)).astype(np.float32)
    b = (0.1 * rng.normal(size=256)).astype(np.float32)
    want = N._layer_norm_numpy(np.swapaxes(a, 1, 2).astype(np.float64), w, b, ndim=1,
                               eps=1e-5, has_weight=True, has_bias=True)
    for device in (dev, em.device("cuda")):
        x, wt, bt = (em.tensor(v, device=device) for v in (a, w, b))
        em.fusion.reset_stats()
        y = em.layer_norm(x.swap_dims(1, 2), 256, wt, bt)
        got = y.numpy()
        assert got.shape == (4, 96, 256)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
        if device is not dev:                 # Fusion(Cuda): the primitive, not 2 kernels
            st = em.fusion.stats()
            assert st["kernels"] == 0 and st["inner_ops"] == 1, st


@gpu
def test_gradients_on_fusion_cuda():
    dev = em.device("cuda", autodiff=True)
    rng = np.random.default_rng(3)
    a = rng.normal(size=(6, 32, 10))
    w, b, g = rng.normal(size=32), rng.normal(size=32), rng.normal(size=(6, 10, 32))
    x = em.tensor(a, device=dev).require_grad()
    wt = em.tensor(w, device=dev).require_grad()
    bt = em.tensor(b, device=dev).require_grad()
    y = em.layer_norm(x.swap_dims(1, 2), 32, wt, bt)
    grads = (y * em.tensor(g, device=dev)).sum().backward()
    xs = np.swapaxes(a, 1, 2)
    mu = xs.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt(((xs - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    xhat = (xs - mu) * rstd
    gw = g * w
    dx = rstd * (gw - gw.mean(-1, keepdims=True) - xhat * (gw * xhat).mean(-1, keepdims=True))
    np.testing.assert_allclose(x.grad(grads).numpy(), np.swapaxes(dx, 1, 2), rtol=1e-9,
                               atol=1e-10)
    np.testing.assert_allclose(wt.grad(grads).numpy(), (g * xhat).sum((0, 1)), rtol=1e-9)
    np.testing.assert_allclose(bt.grad(grads).numpy(), g.sum((0, 1)), rtol=1e-9)
