"""The Cuda backend's layer-norm backward (`ember.backend.cuda.norm_backward`: LNB_SOURCE)
against float64 NumPy. Without a GPU: the source compiles with NVRTC, and the host code runs
over NumPy with each kernel re-enacted here in Python, line for line (which rows each warp or
block takes, the columns of each lane or thread, the partial sums' rows and the column
kernel's order), so the index arithmetic and the algorithm are checked on every machine. The
rest runs on a GPU and is skipped by name elsewhere."""
from __future__ import annotations

import inspect
import struct
import types

import numpy as np
import pytest

import ember as em
from ember.backend.cuda import norm_backward as NB
from ember.backend.cuda import ops as cuda_ops
from ember.kernel.cuda.compiler import default_arch
from ember.ops import OPS
from ember.ops import nn as N
from tests.conformance.specs_norm import ref_lnb
from tests.kernel_cuda._util import nvrtc_or_skip

gpu = pytest.mark.skipif(not em.cuda.is_available(),
                         reason=f"cuda: {em.cuda.why_unavailable()}")
EPS = 1e-5


# -- without a GPU ------------------------------------------------------------------------
def test_kernel_source_compiles(tmp_path):
    compiler = nvrtc_or_skip(tmp_path)
    c = compiler.build(NB.LNB_SOURCE, default_arch(), options=("--std=c++17",))
    assert c.binary, "empty binary"
    missing = [n for n in NB.lnb_kernel_names() if n.encode() not in c.binary]
    assert not missing, f"entry points the host code launches but the binary lacks: {missing}"


def test_entry_matches_the_registry_op():
    op = OPS["layer_norm_backward"]
    assert cuda_ops.how(op) == "impl"
    fn = cuda_ops.CUDA_IMPLS["layer_norm_backward"](None, None)
    params = inspect.signature(fn).parameters.values()
    assert tuple(p.name for p in params if p.kind is p.KEYWORD_ONLY) == op.attrs
    from ember.backend.cuda.backend import Cuda
    assert "layer_norm_backward" in Cuda.fused_ops and op.decompose is not None


def test_planning():
    assert NB.plan(3, 5, 4) == ("warp_{}_4", 1, 256, 0)
    assert NB.plan(8192, 384, 4) == ("warp_{}_16", NB.GROUPS_CAP, 256, 0)   # the GPT's
    assert NB.plan(100, 1024, 8)[0] == "warp_{}_32"
    assert NB.plan(100, 1025, 4) == ("block_{}_s", 100, 256, 2 * 1025 * 4)
    assert NB.plan(9, 6144, 4) == ("block_{}_s", 9, 512, 48 * 1024)
    assert NB.plan(9, 6145, 4) == ("block_{}_g", 9, 512, 0)
    assert NB.plan(9, 3073, 8)[0] == "block_{}_g"
    assert NB.plan(9999, 20000, 4) == ("block_{}_g", NB.GROUPS_CAP, 1024, 0)


# The kernels re-enacted: arrays are the flat memory the launch passes (contiguous), the
# arithmetic in the compute dtype F (sums in NumPy's order: the bounds below allow for it).
def _row_math(xr, gr, w, has_w, N, eps, F):
    inv = F(1.0 / N)
    mu = xr.sum(dtype=F) * inv
    d = xr - mu
    rs = F(1) / np.sqrt((d * d).sum(dtype=F) * inv + eps)
    xh = d * rs
    gw = gr * w if has_w else gr
    a = gw.sum(dtype=F) * inv
    b = (gw * xh).sum(dtype=F) * inv
    return rs * ((gw - a) - xh * b), gr * xh, gr


def _emu_rows(name, grid, block, g, x, w, dx, part, M, N, eps_bits, flags):
    F = np.float64 if x.dtype == np.float64 else np.float32
    eps = F(struct.unpack("<d", struct.pack("<q", eps_bits))[0])
    has_w, sums = bool(flags & 1), bool(flags & 2)
    xf, gf = x.reshape(-1).astype(F), g.reshape(-1).astype(F)
    wf = w.reshape(-1)
    dflat, pflat = dx.reshape(-1), part.reshape(-1)
    seen = np.zeros(M, np.int64)
    if "_warp_" in name:
        K = int(name.rsplit("_", 1)[1])
        assert block == 32 * NB.WARPS
        cols = np.array([ln + 32 * k for k in range(K) for ln in range(32)])
        cols = cols[cols < N]                 # the lanes' columns (the `j < N` guards)
        for b in range(grid):
            pw = np.zeros(N, F)
            pb = np.zeros(N, F)
            for wid in range(NB.WARPS):       # each warp's rows, then the block's sums
                r = b * NB.WARPS + wid
                while r < M:
                    seen[r] += 1
                    d, t, gg = _row_math(xf[r * N + cols], gf[r * N + cols], wf[cols] if
                                         has_w else None, has_w, N, eps, F)
                    dflat[r * N + cols] = d
                    pw[cols] += t
                    pb[cols] += gg
                    r += grid * NB.WARPS
            if sums:
                pflat[b * N + cols] = pw[cols]
                pflat[(grid + b) * N + cols] = pb[cols]
    else:
        assert "_block_" in name
        cols = np.concatenate([np.arange(tid, N, block) for tid in range(block)])
        for b in range(grid):
            r = b
            while r < M:
                seen[r] += 1
                d, t, gg = _row_math(xf[r * N + cols], gf[r * N + cols], wf[cols] if has_w
                                     else None, has_w, N, eps, F)
                dflat[r * N + cols] = d
                if sums:
                    first = r == b
                    for base, v in ((b * N, t), ((grid + b) * N, gg)):
                        pflat[base + cols] = v if first else pflat[base + cols] + v
                r += grid
    assert (seen == 1).all(), f"rows taken {sorted(set(seen.tolist()))} times"


def _emu_cols(name, grid, block, part, out, G, N):
    pflat, oflat = part.reshape(-1), out.reshape(-1)
    nb = -(-N // 32)
    assert grid == 2 * nb and block == 256
    order = []
    for ty in range(8):                        # each thread's partial rows, in its order
        i, rows = ty, []
        while i + 24 < G:
            rows += [i, i + 8, i + 16, i + 24]
            i += 32
        while i < G:
            rows.append(i)
            i += 8
        order.append(rows)
    assert sorted(r for rows in order for r in rows) == list(range(G))
    for blk in range(grid):
        which = blk // nb
        j = (blk - which * nb) * 32 + np.arange(32)
        j = j[j < N]
        acc = 0
        for rows in order:
            acc = acc + sum(pflat[which * G * N + i * N + j] for i in rows)
        oflat[which * N + j] = acc


class FakeKernels:
    """`ops._Kernels` with LNB_SOURCE's kernels re-enacted."""
    calls: list = []

    def __init__(self, cp, source):
        assert source is NB.LNB_SOURCE

    def launch(self, name, grid, block, arrays, i64s=(), i32s=(), smem=0):
        FakeKernels.calls.append((name, grid, block, smem))
        assert name in NB.lnb_kernel_names(), name
        for a in arrays:
            assert a.flags.c_contiguous
        if name.startswith("ember_lnb_cols_"):
            assert arrays[0].dtype == arrays[1].dtype == np.dtype(name[-3:].replace("f", "float"))
            _emu_cols(name, grid, block, *arrays, *i64s)
        else:
            g, x = arrays[:2]
            assert g.dtype == x.dtype and name.split("_")[3] == \
                {np.float16: "f16", np.float32: "f32", np.float64: "f64"}[x.dtype.type]
            _emu_rows(name, grid, block, *arrays, *i64s, *i32s)


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(NB, "_Kernels", FakeKernels)
    FakeKernels.calls = []
    cp = types.SimpleNamespace(empty=lambda s, d: np.full(s, np.nan, d), zeros=np.zeros,
                               ascontiguousarray=np.ascontiguousarray)
    return NB.layer_norm_backward_impl(cp, np)


TOL = {np.float64: 1e-12, np.float32: 3e-6, np.float16: 4e-3}


def _inputs(rng, shape, ndim, dtype, offset=0.0):
    ns = shape[len(shape) - ndim:]
    g = rng.normal(size=shape).astype(dtype)
    x = (offset + 2 * rng.normal(size=shape) + 0.5).astype(dtype)
    w = (1 + 0.3 * rng.normal(size=ns)).astype(dtype)
    return g, x, w


def _check(outs, g, x, w, ndim, has_w, has_b, tol, what):
    """outs against the float64 formula: dx within tol of its scale, the column sums within
    tol of the sum of their terms' magnitudes."""
    g64, x64 = g.astype(np.float64), x.astype(np.float64)
    w64 = w.astype(np.float64) if has_w else None
    want = ref_lnb(g64, x64, w64, ndim, EPS, has_b)
    assert len(outs) == len(want), what
    k = x.ndim - ndim
    lead = tuple(range(k))
    axes = tuple(range(k, x.ndim))
    mu = x64.mean(axes, keepdims=True)
    xhat = (x64 - mu) / np.sqrt(((x64 - mu) ** 2).mean(axes, keepdims=True) + EPS)
    mags = [np.abs(want[0]).max(initial=0) + 1]
    if has_w:
        mags.append(np.abs(g64 * xhat).sum(lead) + 1)
    if has_b:
        mags.append(np.abs(g64).sum(lead) + 1)
    for i, (o, e, m) in enumerate(zip(outs, want, mags)):
        o = np.asarray(o)
        assert o.shape == e.shape, f"{what} output {i}: shape {o.shape} vs {e.shape}"
        err = np.abs(o.astype(np.float64) - e)
        assert not np.isnan(o.astype(np.float64)).any(), f"{what} output {i}: unwritten"
        assert (err <= tol * m).all(), f"{what} output {i}: max error {err.max():.3g}"


_SHAPES = [((3, 5), 1), ((37, 100), 1), ((4100, 7), 1), ((10, 300), 1), ((5, 1024), 1),
           ((6, 1025), 1), ((520, 1100), 1), ((3, 7000), 1), ((2, 3, 4), 2), ((9,), 1),
           ((2, 2, 40), 1)]


@pytest.mark.parametrize("shape,ndim", _SHAPES, ids=[f"{s}-{n}" for s, n in _SHAPES])
def test_host_code_and_kernels_reenacted(fake, shape, ndim):
    rng = np.random.default_rng(len(shape) * 1000 + shape[-1])
    for dtype in (np.float32, np.float64):
        g, x, w = _inputs(rng, shape, ndim, dtype)
        for has_w, has_b in ((True, True), (True, False), (False, True), (False, False)):
            wb = (w,) if has_w else ()
            outs = fake(g, x, *wb, ndim=ndim, eps=EPS, has_weight=has_w, has_bias=has_b)
            _check(outs, g, x, w, ndim, has_w, has_b, TOL[dtype],
                   f"{shape} {np.dtype(dtype).name} w={has_w} b={has_b}")
    names = {c[0] for c in FakeKernels.calls}
    assert ("ember_lnb_cols_f32" in names) and ("ember_lnb_cols_f64" in names)


def test_reenacted_f16_offset_layouts_and_empty(fake):
    rng = np.random.default_rng(7)
    g, x, w = _inputs(rng, (6, 70), 1, np.float16)
    outs = fake(g, x, w, ndim=1, eps=EPS, has_weight=True, has_bias=True)
    assert [o.dtype for o in outs] == [np.float16, np.float32, np.float32]   # (runner casts)
    _check(outs, g, x, w, 1, True, True, TOL[np.float16], "f16")
    g, x, w = _inputs(rng, (5, 64), 1, np.float32, offset=1000.0)   # variance about the mean
    _check(fake(g, x, w, ndim=1, eps=EPS, has_weight=True, has_bias=True), g, x, w, 1, True,
           True, 2e-3, "offset")
    # strided g and x (layer norm after swap_dims): copied C-contiguous first
    g, x, w = _inputs(rng, (3, 12, 40), 1, np.float32)
    gs, xs = np.swapaxes(g, 1, 2), np.swapaxes(x, 1, 2)
    w = w[:12].copy()
    outs = fake(gs, xs, w, ndim=1, eps=EPS, has_weight=True, has_bias=True)
    _check(outs, gs, xs, w, 1, True, True, TOL[np.float32], "swapped")
    FakeKernels.calls = []
    for shape in ((0, 4), (3, 0), (0,)):
        z = np.zeros(shape, np.float32)
        ns = shape[-1:]
        dx, dw, db = fake(z, z, np.ones(ns, np.float32), ndim=1, eps=EPS, has_weight=True,
                          has_bias=True)
        assert dx.shape == shape and dw.shape == db.shape == ns
        assert not dw.any() and not db.any()
    assert not FakeKernels.calls, "a launch for an empty input"


def test_reference_for_other_dtypes(fake):
    """g and x of two dtypes are the reference's (the registry refuses them: a direct call)."""
    rng = np.random.default_rng(8)
    g, x, w = _inputs(rng, (4, 6), 1, np.float64)
    outs = fake(g.astype(np.float32), x, w, ndim=1, eps=EPS, has_weight=True, has_bias=False)
    assert not FakeKernels.calls
    _check(outs, g.astype(np.float32), x, w, 1, True, False, 1e-6, "mixed")


# -- on a GPU -----------------------------------------------------------------------------
GPU_TOL = {"f64": 1e-12, "f32": 4e-6, "f16": 4e-3, "bf16": 3e-2}
_GPU_SHAPES = [((3, 5), 1), ((64, 384), 1), ((8192, 384), 1), ((4100, 7), 1), ((33, 1000), 1),
               ((6, 1025), 1), ((520, 1100), 1), ((3, 7000), 1), ((4, 30000), 1),
               ((2, 3, 4), 2), ((9,), 1), ((0, 8), 1)]


@pytest.fixture(scope="module")
def dev():
    return em.device("cuda", fusion=False)


@gpu
@pytest.mark.parametrize("d", ["f32", "f64", "f16", "bf16"])
@pytest.mark.parametrize("shape,ndim", _GPU_SHAPES, ids=[f"{s}-{n}" for s, n in _GPU_SHAPES])
def test_kernels_on_the_gpu(dev, d, shape, ndim):
    from tests.conformance.specs_nn import P
    npd = em.dtype.as_dtype(d).np
    rng = np.random.default_rng(shape[-1])
    g, x, w = _inputs(rng, shape, ndim, npd)
    for has_w, has_b in ((True, True), (True, False), (False, True), (False, False)):
        ts = [em.tensor(a, device=dev) for a in ((g, x, w) if has_w else (g, x))]
        outs = P("layer_norm_backward", *ts, ndim=ndim, eps=EPS, has_weight=has_w,
                 has_bias=has_b)
        _check([o.numpy() for o in outs], g, x, w, ndim, has_w, has_b, GPU_TOL[d] * 4,
               f"{shape} {d} w={has_w} b={has_b}")


@gpu
def test_strided_inputs_and_determinism_on_the_gpu(dev):
    from tests.conformance.specs_nn import P
    rng = np.random.default_rng(9)
    g, x, w = _inputs(rng, (16, 384, 512), 1, np.float32)
    gt, xt = (em.tensor(a, device=dev).swap_dims(1, 2) for a in (g, x))
    wt = em.tensor(w[:384].copy(), device=dev)
    runs = [[o.numpy() for o in P("layer_norm_backward", gt, xt, wt, ndim=1, eps=EPS,
                                   has_weight=True, has_bias=True)] for _ in range(2)]
    _check(runs[0], np.swapaxes(g, 1, 2), np.swapaxes(x, 1, 2), w[:384], 1, True, True,
           GPU_TOL["f32"] * 4, "swapped")
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)       # no atomics: the same bits every run


@gpu
def test_one_inner_op_under_fusion_cuda():
    dev = em.device("cuda")
    rng = np.random.default_rng(10)
    g, x, w = _inputs(rng, (256, 384), 1, np.float32)
    gt, xt, wt = (em.tensor(a, device=dev) for a in (g, x, w))
    bt = em.tensor(np.zeros(384, np.float32), device=dev)
    y = em.layer_norm(xt, 384, wt, bt)
    y.numpy()
    em.fusion.reset_stats()
    outs = N._layer_norm_vjp(gt, (xt, wt, bt), y, ndim=1, eps=EPS, has_weight=True,
                             has_bias=True, needs=(True, True, True))
    got = [o.numpy() for o in outs]
    st = em.fusion.stats()
    assert st["inner_ops"] == 1 and st["kernels"] == 0 and st["recorded_ops"] == 0, st
    _check(got, g, x, w, 1, True, True, GPU_TOL["f32"] * 4, "fusion(cuda)")


@gpu
def test_gradients_through_autodiff_fusion_cuda():
    dev = em.device("cuda", autodiff=True)
    rng = np.random.default_rng(11)
    g, x, w = _inputs(rng, (4, 50, 96), 1, np.float64)
    xt = em.tensor(x, device=dev).require_grad()
    wt = em.tensor(w, device=dev).require_grad()
    bt = em.tensor(np.zeros(96), device=dev).require_grad()
    grads = (em.layer_norm(xt, 96, wt, bt) * em.tensor(g, device=dev)).sum().backward()
    want = ref_lnb(g, x, w)
    for t, e in zip((xt, wt, bt), want):
        np.testing.assert_allclose(t.grad(grads).numpy(), e, rtol=1e-9, atol=1e-10)
