"""The ``attention`` primitive (ember/ops/attention.py) where nn uses it: its errors, and
MultiHeadAttention / scaled_dot_product_attention giving through it what their composite
gives (f32 and f64 bit for bit on the CPU devices, gradients included) with fewer ops. The
values against float64 references: tests/conformance/specs_attention.py."""
from __future__ import annotations

import collections

import numpy as np
import pytest

import ember as em
import ember.nn.attention as NA
from ember import nn
from ember.backend import Autodiff, NdArray
from ember.backend.fusion.backend import Fusion
from ember.errors import DTypeError, ShapeError
from ember.ops.attention import ATTENTION
from ember.tensor.dispatch import apply

ATTRS = {"scale": 0.5, "causal": True, "offset": 0}


def _t(*shape, dtype=np.float32, device=None):
    return em.tensor(np.random.default_rng(sum(shape)).normal(size=shape).astype(dtype),
                     device=device)


@pytest.mark.parametrize("args,attrs,err,match", [
    ((_t(2, 3, 4), _t(2, 5, 4), _t(2, 5, 6, dtype=np.float64)), ATTRS, DTypeError,
     "one float dtype"),
    ((_t(2, 3, 4).int(), _t(2, 5, 4), _t(2, 5, 6)), ATTRS, DTypeError, "float"),
    ((_t(2, 3, 4), _t(2, 5, 3), _t(2, 5, 6)), ATTRS, ShapeError, "share the last dim D"),
    ((_t(2, 3, 4), _t(2, 5, 4), _t(2, 4, 6)), ATTRS, ShapeError, "key count Lk"),
    ((_t(2, 3, 4), _t(3, 5, 4), _t(3, 5, 6)), ATTRS, ShapeError, "same leading dims"),
    ((_t(4), _t(5, 4), _t(5, 6)), ATTRS, ShapeError, "at least 2 dims"),
    ((_t(3, 4), _t(5, 4), _t(5, 6)), {**ATTRS, "scale": 1}, DTypeError, "scale must be a"),
    ((_t(3, 4), _t(5, 4), _t(5, 6)), {**ATTRS, "causal": 1}, DTypeError, "causal must be"),
    ((_t(3, 4), _t(5, 4), _t(5, 6)), {**ATTRS, "offset": True}, DTypeError, "offset must"),
])
def test_bad_input_is_refused_by_name(args, attrs, err, match):
    with pytest.raises(err, match=match) as e:
        apply(ATTENTION, args, attrs)
    assert "attention" in str(e.value)


def _composite(monkeypatch):
    monkeypatch.setattr(NA, "_fits_primitive", lambda *a: False)


DEVICES = {"ndarray": lambda: NdArray().device(0), "fusion": lambda: em.device("cpu"),
           "fusion_min0": lambda: Fusion(NdArray(), "c", 0).device(0)}


@pytest.mark.parametrize("dev", list(DEVICES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mha_is_the_composite_bit_for_bit(monkeypatch, dev, dtype):
    device = DEVICES[dev]()
    m = nn.MultiHeadAttention(16, 4, dropout=0.0, device=device)
    m = m.map(lambda path, p: p.cast(em.dtype.from_numpy(np.dtype(dtype))))
    x, mem = _t(2, 7, 16, dtype=dtype, device=device), _t(2, 3, 16, dtype=dtype,
                                                          device=device)

    def outputs():
        nw = dict(need_weights=False)           # (the primitive serves calls without them)
        outs = [m(x, causal=True, **nw), m(x, **nw), m(x, mem, mem, causal=True, **nw),
                m(x[:, :2], mem, mem, causal=True, **nw)]
        c = nn.MhaCache()
        for s in (slice(0, 3), slice(3, 7)):
            o, c = m.forward_cache(x[:, s], c, **nw)
            outs.append(o)
        o, _ = m.forward_cache(x, nn.MhaCache(static=True), mem, causal=True,  # offset -4
                               **nw)
        outs.append(o)
        assert all(o.weights is None for o in outs)
        return [o.context.numpy() for o in outs]

    fast = outputs()
    _composite(monkeypatch)
    for a, b in zip(fast, outputs()):
        np.testing.assert_array_equal(a, b)


def test_mha_gradients_are_the_composites(monkeypatch):
    dev = Autodiff(NdArray()).device(0)
    m = nn.MultiHeadAttention(12, 3, dropout=0.0, device=dev)
    m = m.map(lambda path, p: p.cast(em.float64).require_grad())
    x = _t(2, 6, 12, dtype=np.float64, device=dev).require_grad()
    mem = _t(2, 4, 12, dtype=np.float64, device=dev).require_grad()

    def grads():
        nw = dict(need_weights=False)
        loss = (m(x, causal=True, **nw).context.sin().sum() +
                m(x[:, :5], mem, mem, causal=True, **nw).context.pow(2).sum() +
                m.forward_cache(x, nn.MhaCache(static=True), mem, causal=True, **nw)[0]
                .context.sum())
        g = loss.backward()
        return [t.grad(g).numpy() for t in [x, mem] + list(m.parameters())]

    fast = grads()
    _composite(monkeypatch)
    for a, b in zip(fast, grads()):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


def test_sdpa_is_the_composite(monkeypatch):
    q, k, v = _t(2, 3, 5, 8), _t(2, 3, 6, 8), _t(2, 3, 6, 4)
    calls = [dict(), dict(is_causal=True), dict(scale=0.3, dropout_p=0.5, training=False)]
    fast = [nn.functional.scaled_dot_product_attention(q, k, v, **kw).numpy() for kw in calls]
    _composite(monkeypatch)
    for kw, a in zip(calls, fast):
        np.testing.assert_array_equal(
            a, nn.functional.scaled_dot_product_attention(q, k, v, **kw).numpy())


def _count(monkeypatch, fast):
    """Ops a causal MultiHeadAttention's training step issues below Autodiff, forward and
    backward, on Fusion over an NdArray that runs `attention` and its derivative itself (as
    Cuda does)."""
    class Inner(NdArray):
        fused_ops = frozenset({"attention", "attention_backward"})

    fus = Fusion(Inner(), "c", 0)
    counts = collections.Counter()
    phase = ["fwd"]
    run = fus.execute

    def counting(op, prims, attrs, meta, device):
        counts[phase[0], op.name] += 1
        return run(op, prims, attrs, meta, device)

    dev = Autodiff(fus).device(0)
    monkeypatch.setattr(dev.inner, "_execute", counting)
    if not fast:
        _composite(monkeypatch)
    m = nn.MultiHeadAttention(16, 4, dropout=0.0, device=dev)
    loss = m(_t(2, 8, 16, device=dev), causal=True, need_weights=False).context.sum()
    phase[0] = "bwd"
    loss.backward()
    monkeypatch.undo()
    return counts


def test_mha_issues_fewer_ops(monkeypatch):
    before, after = _count(monkeypatch, False), _count(monkeypatch, True)
    fwd = {n: sum(c for (p, _), c in d.items() if p == "fwd") for n, d in
           (("before", before), ("after", after))}
    assert after["fwd", "attention"] == 1 and not after["fwd", "softmax"]
    assert not after["fwd", "arange"] and before["fwd", "arange"] == 2
    assert fwd["after"] <= fwd["before"] - 14, fwd
    bwd = [sum(c for (p, _), c in d.items() if p == "bwd") for d in (before, after)]
    assert bwd[1] < bwd[0], bwd


def test_mha_weights_when_asked_are_differentiable():
    """With the weights wanted (the default) the composite runs: a loss on the weights
    reaches the inputs (the primitive's weights output would carry no gradient)."""
    dev = Autodiff(NdArray()).device(0)
    m = nn.MultiHeadAttention(8, 2, dropout=0.0, device=dev)
    x = _t(2, 5, 8, device=dev).require_grad()
    out = m(x, causal=True)
    assert out.weights is not None and tuple(out.weights.shape) == (2, 2, 5, 5)
    gx = x.grad((out.weights * out.weights).sum().backward())
    assert gx is not None and np.abs(gx.numpy()).max() > 0
