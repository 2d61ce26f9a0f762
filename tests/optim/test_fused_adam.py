"""The fused Adam step (``adam_update``, ember/ops/optim.py) against the Tensor-op formula it
replaced (``Adam._composite``, the op's ``decompose``): bit for bit, on NdArray and on
Fusion(NdArray), where small parameters run the primitive on the inner backend and large ones
its decomposition (fused into a generated kernel)."""
import itertools
import warnings

import numpy as np
import pytest

import ember as em
from ember import optim
from ember.backend import Fusion, NdArray
from ember.errors import DTypeError, ShapeError
from ember.ops import OPS
from ember.ops.optim import _adam_decompose
from ember.tensor.dispatch import apply

OP = OPS["adam_update"]
ND = NdArray().device(0)
SMALL, LARGE = (3, 5), (300, 250)   # below / above Fusion's default min_numel (65536)
BITS = {np.dtype(np.float64): np.uint64, np.dtype(np.float32): np.uint32}


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view(BITS.get(a.dtype, np.uint16))


def assert_same_bits(a, b, what=""):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, what
    same = (_bits(a) == _bits(b)) | (np.isnan(a.astype(np.float64)) &
                                     np.isnan(b.astype(np.float64)))
    assert same.all(), f"{what}: {int((~same).sum())} of {a.size} values differ, e.g. " \
                       f"{a[~same][:3]} vs {b[~same][:3]}"


def _fusion(min_numel):
    b = Fusion(NdArray(), "auto", min_numel)
    if b.runtime is None:
        pytest.skip("Fusion(NdArray) has no kernel runtime here (no C compiler)")
    return b.device(0)


def _special(rng, shape, dtype, positive=False):
    """Values over many magnitudes, with zeros of both signs, infinities, NaN and tiny ones."""
    a = rng.normal(size=shape) * 10.0 ** rng.integers(-7, 3, size=shape)
    flat = a.reshape(-1)
    flat[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30][:flat.size]
    return (np.abs(a) if positive else a).astype(dtype)


def _attrs(t, first, l2, decay, lr=1e-2, b1=0.9, b2=0.999, eps=1e-8):
    s2 = (1.0 - b2 ** t) ** 0.5
    return {"beta1": b1, "beta2": b2, "k1": 1.0 - b1, "k2": 1.0 - b2,
            "step": lr * s2 / (1.0 - b1 ** t), "eps": eps * s2, "decay": decay, "l2": l2,
            "first": first}


@pytest.mark.parametrize("dtype", ["f64", "f32", "f16", "bf16"])
def test_op_equals_its_decomposition_bitwise(dtype):
    """The NumPy reference computes the Tensor-op formula exactly, special values included
    (a first step keeps the sign of a -0.0 moment: m and v are not read)."""
    d = em.dtype.as_dtype(dtype)
    rng = np.random.default_rng(0)
    for first, l2, decay in itertools.product([True, False], [0.0, 0.01], [1.0, 0.999]):
        w, g, m = (em.tensor(_special(rng, (40, 25), d.np), device=ND) for _ in range(3))
        v = em.tensor(_special(rng, (40, 25), d.np, positive=True), device=ND)
        attrs = _attrs(1 if first else 6, first, l2, decay)
        got = apply(OP, (w, g, m, v), attrs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")       # the Tensor ops warn on inf - inf ...
            want = _adam_decompose(w, g, m, v, **attrs)
        for i, (a, b) in enumerate(zip(got, want)):
            assert a.dtype is d
            assert_same_bits(a.numpy(), b.numpy(), f"{dtype} first={first} l2={l2} "
                                                   f"decay={decay} output {i}")


class Params(em.Module):
    def __init__(self, arrays, device):
        self.ps = [em.Param(em.tensor(a, device=device)) for a in arrays]


def _train(make_opt, device, shapes, np_dtype, composite, steps=4):
    """Parameters and moments after ``steps`` steps of ``make_opt()`` (``composite``: with
    the Tensor-op formula instead of the fused op)."""
    rng = np.random.default_rng(1)
    model = Params([rng.normal(size=s).astype(np_dtype) for s in shapes], device)
    opt = make_opt()
    if composite:
        opt._update = opt._composite
    inner = device.without_autodiff()
    for _ in range(steps):
        pairs = [(p, em.tensor(rng.normal(size=p.shape).astype(np_dtype), device=inner))
                 for p in model.ps]
        pairs[0][1].numpy()   # (materialized, as a real gradient would be)
        model = opt.step(None, model, em.GradientsParams.from_params(pairs))
    out = []
    for p in model.ps:
        st = opt.state_of(p)
        out += [p.tensor.numpy(), st["exp_avg"].numpy(), st["exp_avg_sq"].numpy()]
    return out


OPTS = {
    "adam": lambda: optim.Adam(1e-2),
    "adam_l2": lambda: optim.Adam(1e-2, weight_decay=0.05),
    "adamw": lambda: optim.AdamW(1e-2, weight_decay=0.05),
    "adam_decoupled": lambda: optim.Adam(1e-2, weight_decay=0.05, decoupled_weight_decay=True),
}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(OPTS))
def test_optimizer_steps_equal_the_composite_ndarray(name, dtype):
    shapes = [SMALL, (7,), LARGE]
    got = _train(OPTS[name], ND, shapes, dtype, composite=False)
    want = _train(OPTS[name], ND, shapes, dtype, composite=True)
    for i, (a, b) in enumerate(zip(got, want)):
        assert_same_bits(a, b, f"{name} {dtype.__name__} array {i}")


def _counting(monkeypatch):
    calls = {"numpy": 0, "decompose": 0}
    num, dec = OP.numpy, OP.decompose

    def numpy(*a, **k):
        calls["numpy"] += 1
        return num(*a, **k)

    def decompose(*a, **k):
        calls["decompose"] += 1
        return dec(*a, **k)
    monkeypatch.setattr(OP, "numpy", numpy)
    monkeypatch.setattr(OP, "decompose", decompose)
    return calls


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", ["adam_l2", "adamw"])
@pytest.mark.parametrize("size", ["small", "large"])
def test_optimizer_steps_equal_the_composite_fusion(monkeypatch, size, name, dtype):
    """Fusion(NdArray) with its default min_numel: a small parameter's step is the primitive
    -- its decomposition traced once per structure and replayed as one kernel (below the
    replay size: on NdArray) --, a large one's the decomposition, recorded and fused; all
    give the bits of the composite formula on the same device."""
    shapes = [SMALL, (7,)] if size == "small" else [LARGE]
    dev = _fusion(1 << 16).autodiff()
    want = _train(OPTS[name], dev, shapes, dtype, composite=True)
    calls = _counting(monkeypatch)
    got = _train(OPTS[name], dev, shapes, dtype, composite=False)
    if size == "small" and dev.backend.inner.replay_min <= 7:
        # replayed: traced twice (the second time with other scalars) for the first step and
        # for the later steps of each shape, then launched without calling decompose: at
        # most 4 traces a shape over the 4 steps, never a NumPy pass
        assert calls["numpy"] == 0 and 0 < calls["decompose"] <= 4 * len(shapes), calls
    elif size == "small":
        assert calls == {"numpy": 4 * len(shapes), "decompose": 0}, calls
    else:
        assert calls == {"numpy": 0, "decompose": 4}, calls
    for i, (a, b) in enumerate(zip(got, want)):
        assert_same_bits(a, b, f"{name} {dtype.__name__} {size} array {i}")


def test_fusion_decomposition_fuses_into_one_kernel():
    """A large step on Fusion is one generated kernel with three outputs, not an inner op."""
    dev = _fusion(1 << 16)
    rng = np.random.default_rng(2)
    w, g, m, v = (em.tensor(np.abs(rng.normal(size=LARGE)).astype(np.float32), device=dev)
                  for _ in range(4))
    em.fusion.reset_stats()
    outs = apply(OP, (w, g, m, v), _attrs(3, False, 0.0, 0.999))
    [o.numpy() for o in outs]
    st = em.fusion.stats()
    assert st["inner_ops"] == 0 and st["kernels"] == 1, st


def test_fusion_min_numel_0_always_decomposes(monkeypatch):
    """The conformance stacks (min_numel=0) run every size as the decomposition."""
    calls = _counting(monkeypatch)
    dev = _fusion(0)
    t = em.tensor(np.ones(SMALL, np.float32), device=dev)
    w2, m2, v2 = apply(OP, (t, t, t, t), _attrs(2, False, 0.0, 1.0))
    w2.numpy()
    assert calls == {"numpy": 0, "decompose": 1}, calls


def test_amsgrad_takes_the_composite(monkeypatch):
    calls = _counting(monkeypatch)
    _train(lambda: optim.Adam(1e-2, amsgrad=True), ND, [SMALL], np.float64, composite=False)
    assert calls == {"numpy": 0, "decompose": 0}
    _train(lambda: optim.Adam(1e-2), ND, [SMALL], np.float64, composite=False)
    assert calls == {"numpy": 4, "decompose": 0}


def test_infer_errors_name_the_op():
    a = em.tensor(np.ones((2, 3), np.float32), device=ND)
    at = _attrs(1, True, 0.0, 1.0)
    with pytest.raises(DTypeError, match="adam_update: the gradient is f64"):
        apply(OP, (a, a.cast(em.f64), a, a), at)
    with pytest.raises(ShapeError, match=r"adam_update: the second moment \(v\) has shape"):
        apply(OP, (a, a, a, a.reshape(3, 2)), at)
    i = em.tensor(np.ones((2, 3), np.int32), device=ND)
    with pytest.raises(DTypeError, match="adam_update: expects a float tensor"):
        apply(OP, (i, i, i, i), at)
    with pytest.raises(DTypeError, match="adam_update: expects a Tensor as the first moment"):
        OP.infer(a, a, 1.0, a, **at)
