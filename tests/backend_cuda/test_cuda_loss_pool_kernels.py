"""The Cuda backend's raw kernels for ``cross_entropy_rows`` (+ backward) and max pooling
(`ember.backend.cuda.ops`: CE_SOURCE, MAX_POOL_SOURCE) against the NumPy references in
ember/ops/nn.py. Their sources compile with NVRTC everywhere it is found (no GPU needed); the
rest runs on a GPU and is skipped by name elsewhere."""
from __future__ import annotations

import inspect
import itertools
import zlib

import ml_dtypes
import numpy as np
import pytest

import ember as em
from ember import nn
from ember.backend.cuda import ops as cuda_ops
from ember.errors import ShapeError
from ember.kernel.cuda.compiler import default_arch
from ember.ops import OPS
from ember.ops import nn as N
from ember.tensor.dispatch import apply
from tests.kernel_cuda._util import nvrtc_or_skip

BF16 = np.dtype(ml_dtypes.bfloat16)
gpu = pytest.mark.skipif(not em.cuda.is_available(),
                         reason=f"cuda: {em.cuda.why_unavailable()}")

CE_OPS = ("cross_entropy_rows", "cross_entropy_rows_backward")
POOL_OPS = ("max_pool1d", "max_pool2d", "max_pool1d_with_indices", "max_pool2d_with_indices")
#: (their kernels: tests/backend_cuda/test_conv_kernels.py)
POOL_BWD_AND_CONV_OPS = ("max_pool1d_backward", "max_pool2d_backward") + tuple(
    f"{k}{nd}d{s}" for nd in (1, 2) for k, s in
    (("conv", ""), ("conv", "_weight_backward"), ("conv_transpose", "")))
FLOATS = ("f64", "f32", "f16", "bf16")
#: relative tolerance (of 1 + |reference|) against the f64 reference, per input dtype
TOL = {"f64": 1e-12, "f32": 2e-5, "f16": 3e-3, "bf16": 2e-2}


# -- without a GPU ------------------------------------------------------------------------
@pytest.mark.parametrize("std", ["--std=c++14", "--std=c++17"])   # (CuPy's default: c++14)
@pytest.mark.parametrize("which", ["ce", "max_pool", "conv"])
def test_kernel_sources_compile(tmp_path, which, std):
    from ember.backend.cuda import conv
    compiler = nvrtc_or_skip(tmp_path)
    src, names = {"ce": (cuda_ops.CE_SOURCE, cuda_ops.ce_kernel_names()),
                  "max_pool": (cuda_ops.MAX_POOL_SOURCE, cuda_ops.max_pool_kernel_names()),
                  "conv": (conv.COL_SOURCE, conv.col_kernel_names())}[which]
    c = compiler.build(src, default_arch(), options=(std,))
    assert c.binary, "empty binary"
    missing = [n for n in names if n.encode() not in c.binary]
    assert not missing, f"entry points the host code launches but the binary lacks: {missing}"


def test_entries_match_the_registry_ops():
    """Each new CUDA_IMPLS entry names a registry op and takes its attributes (the builders
    compile nothing until a call, so they build without CuPy)."""
    for name in CE_OPS + POOL_OPS + POOL_BWD_AND_CONV_OPS:
        op = OPS[name]
        assert cuda_ops.how(op) == "impl"
        fn = cuda_ops.CUDA_IMPLS[name](None, None)
        params = inspect.signature(fn).parameters.values()
        kw = tuple(p.name for p in params if p.kind is p.KEYWORD_ONLY)
        pos = [p for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
        assert kw == tuple(op.attrs), (name, kw, op.attrs)
        assert len(pos) == op.nin, (name, len(pos), op.nin)


def test_kernel_names_cover_the_dtypes():
    assert set(cuda_ops.KERNEL_DTYPES) == {np.dtype(np.float16), np.dtype(np.float32),
                                           np.dtype(np.float64)}
    assert len(set(cuda_ops.ce_kernel_names())) == 24
    assert len(set(cuda_ops.max_pool_kernel_names())) == 9


# -- helpers ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dev():
    return em.device("cuda", fusion=False)


def _np_dtype(d):
    return em.dtype.as_dtype(d).np


def _close(got, want, tol, what):
    """NaN exactly where the reference has NaN, infinities equal, finite values within
    ``tol * (1 + |want|)``."""
    g = np.asarray(got).astype(np.float64)
    w = np.asarray(want).astype(np.float64)
    assert g.shape == w.shape, f"{what}: shapes {g.shape} vs {w.shape}"
    gn, wn = np.isnan(g), np.isnan(w)
    inf = np.isinf(w)
    fin = ~wn & ~inf
    with np.errstate(invalid="ignore"):
        err = np.abs(g - w)
    bad = (gn != wn) | (inf & (g != w)) | (fin & ~(err <= tol * (1 + np.abs(w))))
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.size} differ; first at {i}: "
                             f"got {g[i]!r}, want {w[i]!r}")


def _same(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shapes {got.shape} vs {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtypes {got.dtype} vs {want.dtype}"
    if got.dtype.kind in "fV" or got.dtype == BF16:
        g, w = got.astype(np.float64), want.astype(np.float64)
        bad = (np.isnan(g) != np.isnan(w)) | (~np.isnan(w) & (g != w))
    else:
        bad = got != want
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.size} differ; first at {i}: "
                             f"got {got[i]!r}, want {want[i]!r}")


# -- cross entropy ------------------------------------------------------------------------
def _logits(rng, m, c, dtype, adversarial=True):
    x = rng.normal(size=(m, c)) * 3
    if adversarial and m > 6 and c > 2:
        x[2, :] = -np.inf                  # a row of -inf
        x[3, 0] = np.inf                   # a row holding +inf
        x[4, c // 2] = np.nan              # a row holding NaN
        x[5, :] = np.inf                   # a row of +inf
        x[6, 1] = -np.inf                  # one -inf among finite values
    return x.astype(_np_dtype(dtype))


def _targets(rng, m, c, tdtype, ignore_index):
    t = rng.integers(0, min(c, np.iinfo(tdtype).max + 1), size=m)
    if m > 1:
        t[1] = ignore_index                # an ignored row
    if m > 7 and c > 1:
        t[6] = 1                           # the -inf logit is the target: loss inf
        t[7] = ignore_index                # and another
    return t.astype(tdtype)


def _ce_ref(x, t, ignore_index, g=None):
    """The references in f64."""
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        if g is None:
            return N._ce_numpy(x64, t, ignore_index=ignore_index)
        return N._ce_bwd_numpy(g.astype(np.float64), x64, t, ignore_index=ignore_index)


SHAPES = [(1, 1), (7, 3), (37, 10), (9, 33), (64, 1024), (3, 1025), (70, 4000), (4, 50000),
          (0, 5), (0, 0)]


@gpu
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", FLOATS)
def test_cross_entropy_rows_matches_reference(dev, dtype, shape):
    rng = np.random.default_rng(zlib.crc32(repr((dtype, shape)).encode()))
    m, c = shape
    for tdtype, ignore_index in ((np.int64, -100), (np.int32, 3), (np.uint8, 255)):
        if c == 0 and m:
            continue
        x = _logits(rng, m, c, dtype)
        t = _targets(rng, m, max(c, 1), tdtype, ignore_index)
        g = rng.normal(size=m).astype(x.dtype)
        xt, tt, gt = (em.tensor(a, device=dev) for a in (x, t, g))
        loss, valid = apply(OPS["cross_entropy_rows"], (xt, tt), {"ignore_index": ignore_index})
        dx = apply(OPS["cross_entropy_rows_backward"], (gt, xt, tt),
                   {"ignore_index": ignore_index})
        assert loss.dtype.short == dtype and dx.dtype.short == dtype
        want_loss, want_valid = _ce_ref(x, t, ignore_index)
        what = f"{dtype} {shape} target {np.dtype(tdtype)}"
        _close(loss.numpy(), want_loss, TOL[dtype], f"loss, {what}")
        _same(valid.numpy(), want_valid.astype(x.dtype), f"valid, {what}")
        _close(dx.numpy(), _ce_ref(x, t, ignore_index, g), TOL[dtype], f"gradient, {what}")


@gpu
@pytest.mark.parametrize("shape", [(40, 7), (6, 3000)], ids=["warp", "block"])
@pytest.mark.parametrize("dtype", ["f64", "f32", "f16"])
def test_cross_entropy_rows_matches_the_cupy_reference(dev, dtype, shape):
    """The kernels against what the Cuda backend ran before: the references with xp=CuPy
    (the same NaN and infinity pattern; values to rounding)."""
    cp, xp = dev.backend.cp, dev.backend.xp
    rng = np.random.default_rng(7)
    x = cp.asarray(_logits(rng, *shape, dtype))
    t = cp.asarray(_targets(rng, shape[0], shape[1], np.int64, -100))
    g = cp.asarray(rng.normal(size=shape[0]).astype(x.dtype))
    fwd = cuda_ops.CUDA_IMPLS["cross_entropy_rows"](cp, xp)
    bwd = cuda_ops.CUDA_IMPLS["cross_entropy_rows_backward"](cp, xp)
    loss, valid = fwd(x, t, ignore_index=-100)
    rl, rv = N._ce_numpy(x, t, ignore_index=-100, xp=xp)
    tol = {"f64": 1e-12, "f32": 1e-5, "f16": 2e-3}[dtype]
    _close(loss.get(), rl.get(), tol, "loss")
    _same(valid.get(), rv.get(), "valid")
    _close(bwd(g, x, t, ignore_index=-100).get(),
           N._ce_bwd_numpy(g, x, t, ignore_index=-100, xp=xp).get(), tol, "gradient")


@gpu
def test_cross_entropy_rows_out_of_range_targets_wrap_then_raise(dev):
    """A target outside 0..C-1 picks its class modulo C in the kernels (no access out of
    bounds), and the device check raises at the next sync (ember/backend/cuda/checks.py)."""
    cp, xp = dev.backend.cp, dev.backend.xp
    rng = np.random.default_rng(3)
    x = rng.normal(size=(6, 5))
    t = np.array([5, -1, -7, 12, 2, -100])
    k = [0, 4, 3, 2, 2, 0]
    fwd = cuda_ops.CUDA_IMPLS["cross_entropy_rows"](cp, xp)
    bwd = cuda_ops.CUDA_IMPLS["cross_entropy_rows_backward"](cp, xp)
    loss, valid = fwd(cp.asarray(x), cp.asarray(t), ignore_index=-100)
    lse = np.log(np.exp(x).sum(1))
    want = lse - x[np.arange(6), k]
    want[5] = 0
    _close(loss.get(), want, 1e-12, "loss")
    _same(valid.get(), np.array([1.0] * 5 + [0.0]), "valid")
    p = np.exp(x - lse[:, None])
    p[np.arange(6), k] -= 1
    p[5] = 0
    got = bwd(cp.ones(6), cp.asarray(x), cp.asarray(t), ignore_index=-100)
    _close(got.get(), p, 1e-12, "gradient")
    with pytest.raises(IndexError, match="target class 5 is out of range for 5 classes"):
        em.sync(dev)


@gpu
def test_cross_entropy_rows_views(dev):
    """Logits of any strides (a transposed, reversed or broadcast view) and strided targets
    and gradients, read where they are."""
    cp, xp = dev.backend.cp, dev.backend.xp
    rng = np.random.default_rng(4)
    fwd = cuda_ops.CUDA_IMPLS["cross_entropy_rows"](cp, xp)
    bwd = cuda_ops.CUDA_IMPLS["cross_entropy_rows_backward"](cp, xp)
    for c in (12, 1500):
        base = rng.normal(size=(c, 40))
        views = {"transposed-reversed": (cp.asarray(base).T[::-1], base.T[::-1]),
                 "broadcast": (cp.broadcast_to(cp.asarray(base[:1]), (40, 40)),
                               np.broadcast_to(base[:1], (40, 40)))}
        for name, (xd, xh) in views.items():
            cc = xh.shape[1]
            th = rng.integers(0, cc, 80)
            gh = rng.normal(size=80)
            td, gd = cp.asarray(th)[::2], cp.asarray(gh)[::2]
            th, gh = th[::2], gh[::2]
            loss, _ = fwd(xd, td, ignore_index=-100)
            _close(loss.get(), _ce_ref(np.ascontiguousarray(xh), th, -100)[0], 1e-12,
                   f"{name} {c}: loss")
            _close(bwd(gd, xd, td, ignore_index=-100).get(),
                   _ce_ref(np.ascontiguousarray(xh), th, -100, gh), 1e-12,
                   f"{name} {c}: gradient")


@gpu
def test_cross_entropy_rows_without_classes_raises(dev):
    cp, xp = dev.backend.cp, dev.backend.xp
    fwd = cuda_ops.CUDA_IMPLS["cross_entropy_rows"](cp, xp)
    bwd = cuda_ops.CUDA_IMPLS["cross_entropy_rows_backward"](cp, xp)
    x, t = cp.zeros((2, 0)), cp.zeros(2, np.int64)
    with pytest.raises(IndexError):
        fwd(x, t, ignore_index=-100)
    with pytest.raises(IndexError):
        bwd(cp.zeros(2), x, t, ignore_index=-100)


@gpu
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_cross_entropy_training_gradients(dev, dtype):
    """F.cross_entropy and its gradient through the autodiff device, against NumPy."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 7, 3, 4)).astype(_np_dtype(dtype))
    t = rng.integers(0, 7, size=(2, 3, 4))
    t[0, 0, :2] = -100
    got, want = [], []
    for d, out in ((dev.autodiff(), got), (em.device("cpu").autodiff(), want)):
        xt = em.tensor(x, device=d).require_grad()
        tt = em.tensor(t, device=d)
        for red in ("mean", "none"):
            loss = nn.functional.cross_entropy(xt, tt, reduction=red)
            w = em.tensor(np.linspace(0.5, 1.5, loss.numel()).reshape(loss.shape)
                          .astype(x.dtype), device=d)
            out.append(loss.numpy())
            out.append(xt.grad((loss * w).sum().backward()).numpy())
    for i, (a, b) in enumerate(zip(got, want)):
        _close(a, b, TOL[dtype], f"output {i}")


# -- max pooling --------------------------------------------------------------------------
def _pool_input(rng, shape, dtype, kind):
    x = rng.integers(-3, 4, size=shape).astype(np.float64)      # many ties
    if kind == "nan":
        x.flat[rng.integers(0, x.size, max(1, x.size // 8))] = np.nan
    elif kind == "inf":
        x[..., :2] = -np.inf
        x.flat[rng.integers(0, x.size, 3)] = np.inf
    elif kind == "neg_inf":
        x[:] = -np.inf
    return x.astype(_np_dtype(dtype))


def _pool_ref(x, nd, attrs, with_indices):
    """The NumPy reference (bf16 through f32: the same comparisons, values exact)."""
    xr = x.astype(np.float32) if x.dtype == BF16 else x
    args = (attrs["kernel"], attrs["stride"], attrs["padding"], attrs["dilation"],
            attrs["ceil_mode"])
    with np.errstate(all="ignore"):
        if with_indices:
            v, i = N._max_pool_idx_np(nd)(xr, *args)
            return v.astype(x.dtype), i
        return N._max_pool_np(nd)(xr, *args).astype(x.dtype)


def _pool_cases(nd):
    """(kernel, stride, padding, dilation, ceil_mode) combinations the op accepts."""
    if nd == 2:
        ks, ss, ps, ds = ((2, 2), (3, 3), (3, 2), (1, 3)), ((1, 1), (2, 2), (2, 3)), \
            ((0, 0), (1, 1), (1, 0)), ((1, 1), (2, 1), (2, 2))
    else:
        ks, ss, ps, ds = ((1,), (2,), (3,)), ((1,), (2,)), ((0,), (1,)), ((1,), (2,))
    for k, s, p, d, cm in itertools.product(ks, ss, ps, ds, (False, True)):
        if all(pi <= ki // 2 for pi, ki in zip(p, k)):
            yield {"kernel": k, "stride": s, "padding": p, "dilation": d, "ceil_mode": cm}


def _pool_shape_ok(shape, attrs):
    try:
        osz = [N.pool_out_size("max_pool", n, k, s, p, d, attrs["ceil_mode"]) for n, k, s, p, d
               in zip(shape[2:], attrs["kernel"], attrs["stride"], attrs["padding"],
                      attrs["dilation"])]
    except ShapeError:
        return False
    return min(osz) >= 1


@gpu
@pytest.mark.parametrize("kind", ["ties", "nan", "inf", "neg_inf"])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("nd", [1, 2])
def test_max_pool_matches_reference(dev, nd, dtype, kind):
    """Values and indices bit for bit (PyTorch's scan: the first strictly larger value wins,
    and every NaN; a window of -inf reports its first in-bounds position)."""
    rng = np.random.default_rng(zlib.crc32(repr((nd, dtype, kind)).encode()))
    shapes = [(2, 3, 7, 6), (1, 1, 4, 9), (2, 4, 3, 3)] if nd == 2 else \
        [(2, 3, 1), (2, 3, 5), (1, 2, 8)]
    n = 0
    for shape in shapes:
        x = _pool_input(rng, shape, dtype, kind)
        xt = em.tensor(x, device=dev)
        for attrs in _pool_cases(nd):
            if not _pool_shape_ok(shape, attrs):
                continue
            what = f"{dtype} {shape} {attrs}"
            v, i = apply(OPS[f"max_pool{nd}d_with_indices"], (xt,), attrs)
            wv, wi = _pool_ref(x, nd, attrs, True)
            _same(v.numpy(), wv, f"values, {what}")
            _same(i.numpy(), wi, f"indices, {what}")
            m = apply(OPS[f"max_pool{nd}d"], (xt,), attrs)
            _same(m.numpy(), _pool_ref(x, nd, attrs, False), f"max, {what}")
            n += 1
    assert n > 10


@gpu
@pytest.mark.parametrize("dtype", ["f32", "f16", "f64"])
def test_max_pool_views(dev, dtype):
    """Non-contiguous inputs (channels-last, reversed, a channel slice) read in place; the
    outputs are laid out as the reference lays them out."""
    cp, xp = dev.backend.cp, dev.backend.xp
    rng = np.random.default_rng(11)
    base = _pool_input(rng, (2, 6, 9, 4), dtype, "nan")          # [N, H, W, C]
    views = {
        "channels_last": lambda a: a.transpose(0, 3, 1, 2),
        "reversed": lambda a: a.transpose(0, 3, 1, 2)[:, :, ::-1, ::-1],
        "channel_slice": lambda a: a.transpose(0, 3, 1, 2)[:, 1:3],
    }
    for nd in (1, 2):
        fn = cuda_ops.CUDA_IMPLS[f"max_pool{nd}d_with_indices"](cp, xp)
        for name, view in views.items():
            xh = view(base)
            xd = view(cp.asarray(base))
            if nd == 1:
                xh, xd = xh[:, :, 0], xd[:, :, 0]
            for attrs in itertools.islice(_pool_cases(nd), 0, None, 5):
                if not _pool_shape_ok(xh.shape, attrs):
                    continue
                v, i = fn(xd, **attrs)
                wv, wi = _pool_ref(xh, nd, attrs, True)
                _same(v.get(), wv, f"{name} {nd}d values {attrs}")
                _same(i.get(), wi, f"{name} {nd}d indices {attrs}")
                if name == "channels_last" and xh.shape[1] > 1:
                    assert v.strides[1] == v.itemsize, "channels-last in, channels-last out"


@gpu
def test_max_pool_empty_batch(dev):
    cp, xp = dev.backend.cp, dev.backend.xp
    fn = cuda_ops.CUDA_IMPLS["max_pool2d_with_indices"](cp, xp)
    v, i = fn(cp.zeros((0, 3, 4, 4), np.float32), kernel=(2, 2), stride=(2, 2),
              padding=(0, 0), dilation=(1, 1), ceil_mode=False)
    assert v.shape == i.shape == (0, 3, 2, 2) and i.dtype == np.int64


@gpu
def test_max_pool_training_gradients(dev):
    """em.max_pool2d with indices and its gradient on the autodiff device, against NumPy."""
    rng = np.random.default_rng(12)
    x = rng.integers(-4, 5, size=(2, 3, 8, 7)).astype(np.float32)
    got, want = [], []
    for d, out in ((dev.autodiff(), got), (em.device("cpu").autodiff(), want)):
        xt = em.tensor(x, device=d).require_grad()
        y, idx = em.max_pool2d(xt, 3, stride=2, padding=1, ceil_mode=True,
                               return_indices=True)
        w = em.tensor(np.arange(y.numel(), dtype=np.float32).reshape(y.shape), device=d)
        out += [y.numpy(), idx.numpy(), xt.grad((y * w).sum().backward()).numpy()]
    for i, (a, b) in enumerate(zip(got, want)):
        _same(a, b, f"output {i}")
