"""Small decomposable primitives replayed as one cached kernel (ember/backend/fusion/
replay.py): the results are the NumPy reference's, bit for bit, whatever the per-call
scalars; a trace is made once per structure; what cannot be replayed runs on the inner
backend."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.backend import Fusion, NdArray
from ember.backend.fusion.backend import REPLAY_MIN_NUMEL
from ember.backend.fusion.replay import Replays
from ember.ops.registry import OPS, Op

ADAM = OPS["adam_update"]


def _replaying_device(runtime="c"):
    """A Fusion device with the default small-op policy (so small primitives replay)."""
    b = Fusion(NdArray(), runtime, 1 << 16)
    if b.runtime is None:
        pytest.skip(f"fusion runtime {runtime!r} unavailable: "
                    f"{getattr(NdArray(), 'kernel_runtime_reason', 'no kernel runtime')}")
    if b._replays is False:
        pytest.skip("replays are turned off (EMBER_FUSION_REPLAY=0)")
    return b.device(0)


def _adam_args(rng, shape, dtype, step, first, l2, decay):
    w, g, m, v = (rng.standard_normal(shape).astype(dtype) for _ in range(4))
    attrs = dict(beta1=0.9, beta2=0.999, k1=0.1, k2=0.001, step=step, eps=1e-8 * (1 + step),
                 decay=decay, l2=l2, first=first)
    return (w, g, m, np.abs(v)), attrs


@pytest.mark.parametrize("runtime", ["c", "interpret"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_adam_replay_is_the_reference_bit_for_bit(runtime, dtype):
    dev = _replaying_device(runtime)
    fus = dev.backend
    rng = np.random.default_rng(0)
    shape = (REPLAY_MIN_NUMEL // 32, 32)
    edt = em.float32 if dtype is np.float32 else em.float64
    for first in (True, False):
        for l2, decay in ((0.0, 1.0), (0.01, 1.0), (0.0, 0.999)):
            for it in range(3):        # per-call scalars change: one trace serves them all
                prims, attrs = _adam_args(rng, shape, dtype, 1e-3 * (it + 1), first, l2, decay)
                ref = ADAM.numpy(*prims, **attrs)
                em.fusion.reset_stats()
                got = fus._execute_fused(ADAM, prims, attrs, [(shape, edt)] * 3, dev)
                st = em.fusion.stats()
                assert st["kernels"] == 1 and st["inner_ops"] == 0, st
                for a, b in zip(got, ref):
                    assert a.dtype == b.dtype and a.shape == b.shape
                    np.testing.assert_array_equal(a, b)
    # one trace per structure (first, l2 != 0, decay != 1) and dtype
    keys = [k for k in fus._replays._entries if k[0] is ADAM and k[1][2] == np.dtype(dtype)]
    assert len(keys) == 6


def test_small_primitives_below_the_replay_size_run_on_numpy(monkeypatch):
    """Where launches go through ctypes (no `fastcall` extension), primitives below
    REPLAY_MIN_NUMEL elements stay on NumPy; with the extension they replay at every size."""
    dev = _replaying_device()
    monkeypatch.setattr(dev.backend, "replay_min", REPLAY_MIN_NUMEL)
    monkeypatch.setattr(dev.backend, "_how", {})
    rng = np.random.default_rng(1)
    shape = (REPLAY_MIN_NUMEL // 2,)
    prims, attrs = _adam_args(rng, shape, np.float32, 1e-3, False, 0.0, 1.0)
    em.fusion.reset_stats()
    got = dev.backend._execute_fused(ADAM, prims, attrs, [(shape, em.float32)] * 3, dev)
    st = em.fusion.stats()
    assert st["kernels"] == 0 and st["inner_ops"] == 1, st
    for a, b in zip(got, ADAM.numpy(*prims, **attrs)):
        np.testing.assert_array_equal(a, b)


def test_optimizer_training_matches_ndarray_exactly():
    """Adam on a model with a parameter above the replay size: Fusion's replayed updates
    give NdArray's weights bit for bit."""
    from ember import nn, optim

    def train(dev):
        dev.seed(3)
        model = nn.Linear(64, 64, device=dev)     # weight 4096 >= REPLAY_MIN_NUMEL
        opt = optim.AdamW(lr=1e-2, weight_decay=0.01)
        x = em.tensor(np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32),
                      device=dev)
        for _ in range(4):
            loss = (model(x) ** 2).mean()
            grads = em.GradientsParams.from_grads(loss.backward(), model)
            model = opt.step(1e-2, model, grads)
        return model.weight.numpy()

    fused = _replaying_device().autodiff()
    em.fusion.reset_stats()
    a = train(fused)
    assert em.fusion.stats()["kernels"] >= 4
    np.testing.assert_array_equal(a, train(NdArray().device(0).autodiff()))


def _decomposed_op(decompose, key=None):
    """An unregistered op with a decomposition (the registry stays as it is)."""
    return Op("test_replay_op", "other", 1, ("s",), lambda x, *, s: (x._shape, x._dtype),
              lambda x, *, s: x * s, None, None, None, 1, "", decompose=decompose,
              decompose_key=key)


def test_a_scalar_computed_from_a_per_call_attr_is_not_replayed():
    tracer = Fusion(NdArray(), "interpret", 0)
    replays = Replays(tracer)
    op = _decomposed_op(lambda x, *, s: x * (s * 2.0) * 0.5, key=lambda *, s: ())
    x = np.arange(4, dtype=np.float32)
    dev = NdArray().device(0)
    assert replays.run(op, (x,), {"s": 3.0}, ((4,), em.float32), dev) is None


def test_a_division_by_a_per_call_attr_is_not_replayed():
    tracer = Fusion(NdArray(), "interpret", 0)
    replays = Replays(tracer)
    op = _decomposed_op(lambda x, *, s: x / s, key=lambda *, s: ())
    x = np.arange(4, dtype=np.float32)
    assert replays.run(op, (x,), {"s": 4.0}, ((4,), em.float32), NdArray().device(0)) is None


def test_per_call_attrs_are_bound_at_run_time():
    tracer = Fusion(NdArray(), "interpret", 0)
    replays = Replays(tracer)
    op = _decomposed_op(lambda x, *, s: x * s + s, key=lambda *, s: ())
    x = np.arange(4, dtype=np.float32)
    dev = NdArray().device(0)
    for s in (3.0, -0.5, 7.25):
        got = replays.run(op, (x,), {"s": s}, ((4,), em.float32), dev)
        np.testing.assert_array_equal(got, x * np.float32(s) + np.float32(s))
    assert len(replays._entries) == 1


def test_replays_at_every_size_with_the_fast_launch():
    dev = _replaying_device()
    if not getattr(dev.backend.runtime, "fast_launch", False):
        from ember.kernel.c import fastcall
        pytest.skip(f"kernels launch through ctypes here: {fastcall.reason()}")
    assert dev.backend.replay_min == 0
    rng = np.random.default_rng(2)
    prims, attrs = _adam_args(rng, (10,), np.float32, 1e-3, False, 0.0, 1.0)
    em.fusion.reset_stats()
    got = dev.backend._execute_fused(ADAM, prims, attrs, [((10,), em.float32)] * 3, dev)
    assert em.fusion.stats()["kernels"] == 1
    for a, b in zip(got, ADAM.numpy(*prims, **attrs)):
        np.testing.assert_array_equal(a, b)
