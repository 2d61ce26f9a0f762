"""The softmax primitives (``softmax``, ``log_softmax`` and their backward primitives,
ember/ops/nn.py): bit for bit their ``decompose`` (the composite the Tensor API used before)
on NdArray; one op each way in a training step; Fusion running the primitive for small
tensors and the fused decomposition for large ones; gradients of gradients through the
backward primitives' own derivatives; errors. Values against float64 references, special
values and gradient checks are conformance cases (tests/conformance/specs_softmax.py)."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.backend import Autodiff, Fusion, NdArray
from ember.errors import DTypeError, IndexError_, ShapeError
from ember.ops import OPS
from ember.tensor.dispatch import apply
from tests.fusion._util import RecordingNdArray

ND = NdArray().device(0)
FORWARD = ("softmax", "log_softmax")
BACKWARD = ("softmax_backward", "log_softmax_backward")
DTYPES = ("f64", "f32", "f16", "bf16")
BITS = {8: np.uint64, 4: np.uint32, 2: np.uint16}


def assert_same_bits(a, b, what=""):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, what
    ua = np.ascontiguousarray(a).view(BITS[a.dtype.itemsize])
    ub = np.ascontiguousarray(b).view(BITS[b.dtype.itemsize])
    nan = np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64))
    same = (ua == ub) | nan
    assert same.all(), f"{what}: {int((~same).sum())} of {a.size} differ: {a[~same][:4]} vs " \
                       f"{b[~same][:4]}"


def _special(rng, shape):
    """Normal values, with a row of -inf, one holding +inf, one holding NaN and one with
    -inf among finite values (rows along the last dim)."""
    a = rng.normal(size=shape) * 3
    rows = a.reshape(-1, shape[-1])
    rows[1] = -np.inf
    rows[2, 0] = np.inf
    rows[3, 1] = np.nan
    rows[4, ::2] = -np.inf
    return a


def _arr(a, dtype):
    return a.astype(em.dtype.as_dtype(dtype).np)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")   # the composite's inf - inf
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", FORWARD + BACKWARD)
def test_primitive_equals_its_decomposition_bit_for_bit(name, dtype):
    op = OPS[name]
    rng = np.random.default_rng(0)
    for shape, dim in (((6, 7), 1), ((6, 7), 0), ((2, 6, 5), 2), ((3, 4, 5), 1)):
        x = _special(rng, shape) if name in FORWARD else rng.normal(size=shape)
        ins = [em.tensor(_arr(x, dtype), device=ND)]
        if name in BACKWARD:
            out = rng.uniform(0, 1, shape) if name == "softmax_backward" else \
                rng.uniform(-5, 0, shape)
            out.reshape(-1)[:3] = [0.0, -np.inf, np.nan] if name != "softmax_backward" \
                else [0.0, 1.0, np.nan]
            ins.append(em.tensor(_arr(out, dtype), device=ND))
        got = apply(op, tuple(ins), {"dim": dim})
        want = op.decompose(*ins, dim=dim)
        assert got.dtype is want.dtype is ins[0].dtype and got.shape == want.shape
        assert_same_bits(got.numpy(), want.numpy(), f"{name} {dtype} {shape} dim {dim}")


@pytest.mark.parametrize("name", FORWARD)
def test_one_op_each_way_in_a_training_step(name):
    ad = Autodiff(RecordingNdArray()).device(0)
    inner = ad.backend.inner            # (the one interned RecordingNdArray backend)
    rng = np.random.default_rng(1)
    x = em.tensor(rng.normal(size=(8, 5)).astype(np.float32), device=ad).require_grad()
    t = em.tensor(rng.normal(size=(8, 5)).astype(np.float32), device=ad)
    inner.ran.clear()
    y = getattr(x, name)(1)
    assert inner.ran == [name]
    loss = (y * t).sum()
    inner.ran.clear()
    g = x.grad(loss.backward())
    assert inner.ran.count(f"{name}_backward") == 1, inner.ran
    assert not {"max", "exp", "log", "div"} & set(inner.ran), inner.ran
    a = x.numpy().astype(np.float64)
    p = np.exp(a - a.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    tt = t.numpy().astype(np.float64)
    want = p * (tt - (tt * p).sum(1, keepdims=True)) if name == "softmax" else \
        tt - p * tt.sum(1, keepdims=True)
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-5, atol=1e-6)


def _fusion(min_numel):
    b = Fusion(NdArray(), "auto", min_numel)
    if b.runtime is None:
        pytest.skip("Fusion(NdArray) has no kernel runtime here (no C compiler)")
    return b.device(0)


def _counting(monkeypatch, names):
    calls = {"numpy": 0, "decompose": 0}
    for n in names:
        op = OPS[n]

        def numpy(*a, _f=op.numpy, **k):
            calls["numpy"] += 1
            return _f(*a, **k)

        def decompose(*a, _f=op.decompose, **k):
            calls["decompose"] += 1
            return _f(*a, **k)
        monkeypatch.setattr(op, "numpy", numpy)
        monkeypatch.setattr(op, "decompose", decompose)
    return calls


@pytest.mark.parametrize("name", FORWARD)
@pytest.mark.parametrize("size", ["small", "large"])
def test_fusion_runs_small_as_the_primitive_and_large_as_the_decomposition(
        monkeypatch, name, size):
    """Small: the primitives (the forward on NumPy, the backward replayed as its one traced
    kernel); large: the decompositions, recorded and fused."""
    shape = (64, 10) if size == "small" else (512, 160)     # around min_numel = 65536
    rng = np.random.default_rng(2)
    a = rng.normal(size=shape).astype(np.float32) * 4
    w = rng.normal(size=shape).astype(np.float32)
    dev = _fusion(1 << 16).autodiff()
    calls = _counting(monkeypatch, (name, f"{name}_backward"))

    def step():
        x = em.tensor(a, device=dev).require_grad()
        y = getattr(x, name)(1)
        g = x.grad((y * em.tensor(w, device=dev)).sum().backward())
        return y.numpy(), g.numpy()
    got_y, got_g = step()
    if size == "small":
        # (the first step may trace the decompositions to find whether they replay as one
        # kernel, ember/backend/fusion/replay.py: the forward's is two kernels and runs on
        # NumPy; the backward's is one, replayed where kernel launches are cheap)
        calls.update(numpy=0, decompose=0)
        again_y, again_g = step()
        fast = dev.backend.inner.replay_min <= a.size
        assert calls == {"numpy": 1 if fast else 2, "decompose": 0}, calls
        np.testing.assert_array_equal(again_y, got_y)
        np.testing.assert_array_equal(again_g, got_g)
    else:
        assert calls == {"numpy": 0, "decompose": 2}, calls
    ad = Autodiff(NdArray()).device(0)
    xr = em.tensor(a, device=ad).require_grad()
    yr = getattr(xr, name)(1)
    gr = xr.grad((yr * em.tensor(w, device=ad)).sum().backward())
    np.testing.assert_allclose(got_y, yr.numpy(), rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(got_g, gr.numpy(), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("name", FORWARD + BACKWARD)
def test_large_ops_fuse_into_reduce_then_broadcast_kernels(name):
    from tests.fusion._util import counted, has_broadcast_reduce
    dev = _fusion(1 << 16)
    rng = np.random.default_rng(3)
    arrays = [rng.normal(size=(400, 200))]
    if name == "softmax_backward":
        arrays.append(rng.uniform(0, 1, (400, 200)))          # probabilities
    elif name == "log_softmax_backward":
        arrays.append(rng.uniform(-8, 0, (400, 200)))         # log-probabilities
    ins = [em.tensor(a.astype(np.float32), device=dev) for a in arrays]
    got, st = counted(lambda: apply(OPS[name], tuple(ins), {"dim": 1}))
    assert st["inner_ops"] == 0, st
    if not has_broadcast_reduce(dev):
        pytest.skip("this kernel runtime splits broadcast reductions")
    assert st["kernels"] <= 2, st
    want = apply(OPS[name], tuple(em.tensor(t.numpy(), device=ND) for t in ins), {"dim": 1})
    np.testing.assert_allclose(got, want.numpy(), rtol=2e-5, atol=2e-6)


# -- gradients of gradients -----------------------------------------------------------------
# A Hessian-vector product: with g and w fixed, h(x) = sum(w * backward(g, forward(x))) is
# the directional derivative of <g, forward(x)>; its gradient in x runs the backward
# primitive's derivative (in its output argument) and then the forward's. Checked against
# central differences of the analytic gradient in float64.
def _first_grad(name, a, g):
    p = np.exp(a - a.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    if name == "softmax":
        return p * (g - (g * p).sum(1, keepdims=True))
    return g - p * g.sum(1, keepdims=True)


@pytest.mark.parametrize("stack", ["ndarray", "fusion"])
@pytest.mark.parametrize("name", FORWARD)
def test_gradient_of_the_backward_primitive(name, stack):
    rng = np.random.default_rng(4)
    a, g, w = (rng.normal(size=(3, 5)) for _ in range(3))
    inner = NdArray() if stack == "ndarray" else _fusion(0).backend
    ad = Autodiff(inner).device(0)
    x = em.tensor(a, device=ad).require_grad()
    gt = em.tensor(g, device=ad).require_grad()
    y = getattr(x, name)(1)
    d = apply(OPS[f"{name}_backward"], (gt, y), {"dim": 1})
    grads = (d * em.tensor(w, device=ad)).sum().backward()
    hx, hg = x.grad(grads).numpy(), gt.grad(grads).numpy()

    def h(a_, g_):
        return float((_first_grad(name, a_, g_) * w).sum())
    eps = 1e-6
    nx, ng = np.zeros_like(a), np.zeros_like(g)
    for k in range(a.size):
        for arr, out in ((a, nx), (g, ng)):
            v = arr.reshape(-1)
            orig = v[k]
            v[k] = orig + eps
            up = h(a, g)
            v[k] = orig - eps
            down = h(a, g)
            v[k] = orig
            out.reshape(-1)[k] = (up - down) / (2 * eps)
    np.testing.assert_allclose(hx, nx, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(hg, ng, rtol=1e-5, atol=1e-7)


# -- the Tensor API around the primitives ---------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_zero_d_and_empty_inputs(dtype):
    d = em.dtype.as_dtype(dtype)
    s = em.tensor(2.5, dtype=d)
    assert em.softmax(s, 0).shape == () and float(em.softmax(s, -1).numpy()) == 1.0
    assert em.log_softmax(s, 0).dtype is d and float(em.log_softmax(s, 0).numpy()) == 0.0
    for shape in ((0, 3), (3, 0), (2, 0, 4)):
        e = em.zeros(shape, dtype=d)
        for fn in (em.softmax, em.log_softmax, em.softmin):
            out = fn(e, 1)
            assert out.shape == shape and out.dtype is d


def test_api_errors_are_unchanged():
    x = em.tensor([[1.0, 2.0, 3.0]])
    with pytest.raises(IndexError_, match=r"softmax: dim 2 is out of range for a tensor of 2 "
                                          r"dims; valid: -2\.\.1"):
        em.softmax(x, 2)
    with pytest.raises(IndexError_, match="log_softmax: dim -3 is out of range"):
        x.log_softmax(-3)
    with pytest.raises(DTypeError, match="log_softmax: expects a float tensor"):
        em.log_softmax(em.tensor([1, 2]), 0)
    with pytest.raises(DTypeError, match="softmin: expects a float tensor"):
        em.softmin(em.tensor([1, 2]), 0)
    with pytest.raises(DTypeError, match="softmax: dim must be an int"):
        em.softmax(x, 1.0)


def test_primitive_errors_name_the_op():
    x = em.tensor(np.ones((2, 3), np.float32), device=ND)
    with pytest.raises(IndexError_, match="softmax: dim 2 is out of range for shape"):
        apply(OPS["softmax"], (x,), {"dim": 2})
    with pytest.raises(ShapeError, match="log_softmax: needs at least 1 dim"):
        apply(OPS["log_softmax"], (em.tensor(1.0, device=ND),), {"dim": 0})
    with pytest.raises(DTypeError, match="log_softmax: expects a float tensor"):
        apply(OPS["log_softmax"], (em.tensor([1, 2], device=ND),), {"dim": 0})
    with pytest.raises(ShapeError, match="softmax_backward: the gradient"):
        apply(OPS["softmax_backward"], (x, x.reshape(3, 2)), {"dim": 1})
    with pytest.raises(DTypeError, match="log_softmax_backward: inputs must share a dtype"):
        apply(OPS["log_softmax_backward"], (x, x.cast(em.f64)), {"dim": 1})
