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


# -- small elementwise ops: their one-op kernel where it measured faster --------------------
def _channels_last(a):
    return np.ascontiguousarray(np.moveaxis(a, 1, -1)).transpose(0, 3, 1, 2)


def _ew_cases(rng):
    x = _channels_last(rng.standard_normal((16, 16, 8, 8)).astype(np.float32))
    x.reshape(-1)[::17] = np.nan
    x.reshape(-1)[5::19] = -0.0
    g = _channels_last(rng.standard_normal((16, 16, 8, 8)).astype(np.float32))
    b = rng.standard_normal((1, 16, 1, 1)).astype(np.float32)
    shape = x.shape
    return [(OPS["relu"], (x,)), (OPS["add"], (x, b)), (OPS["relu_backward"], (g, x)),
            (OPS["mul"], (np.ascontiguousarray(x), g))], shape


@pytest.mark.parametrize("kernel_wins", [True, False])
def test_small_elementwise_ops_run_as_the_faster_of_kernel_and_numpy(monkeypatch,
                                                                     kernel_wins):
    """After `PROBE_CALLS` timed calls a structure keeps its kernel (here: made to win) or
    NumPy; either way the results are NumPy's, bit for bit, in NumPy's memory layout."""
    from ember.backend.fusion import replay
    monkeypatch.setattr(replay, "REPLAY_GAIN", 1e9 if kernel_wins else 0.0)
    dev = _replaying_device()
    fus = dev.backend
    monkeypatch.setattr(fus, "_how", {})
    monkeypatch.setattr(fus, "_replays", None)
    cases, shape = _ew_cases(np.random.default_rng(11))
    for op, prims in cases:
        meta = (shape, em.float32)
        want = op.numpy(*prims)
        for call in range(replay.PROBE_CALLS + 4):
            em.fusion.reset_stats()
            got = fus._execute_fused(op, prims, {}, meta, dev)
            st = em.fusion.stats()
            np.testing.assert_array_equal(got, want)
            assert got.strides == want.strides and got.dtype == want.dtype
        # the last calls, after the probes, ran as the kept one
        assert st["kernels"] == (1 if kernel_wins else 0), (op.name, st)
        assert st["eager_ops"] == (0 if kernel_wins else 1), (op.name, st)


def test_a_one_off_elementwise_op_compiles_nothing():
    """The first call of a structure runs on NumPy and traces nothing (most one-off ops in a
    script never repeat); the second traces and compiles its kernel."""
    dev = _replaying_device()
    fus = dev.backend
    x = np.random.default_rng(2).standard_normal((4096 + 5,)).astype(np.float32)
    meta = (x.shape, em.float32)
    em.fusion.reset_stats()
    fus._execute_fused(OPS["sqrt"], (np.abs(x),), {}, meta, dev)
    assert em.fusion.stats()["compiles"] == 0
    fus._execute_fused(OPS["sqrt"], (np.abs(x),), {}, meta, dev)
    assert em.fusion.stats()["compiles"] == 1


def test_elementwise_scalar_operands_are_bound_per_call(monkeypatch):
    """A float operand is the kernel's argument, bound at every call (a dropout scale, an
    attention scale, a learning rate); an int one is part of the structure."""
    from ember.backend.fusion import replay
    monkeypatch.setattr(replay, "REPLAY_GAIN", 1e9)
    dev = _replaying_device()
    fus = dev.backend
    monkeypatch.setattr(fus, "_how", {})
    monkeypatch.setattr(fus, "_replays", None)
    x = np.random.default_rng(4).standard_normal((64, 96)).astype(np.float32)
    meta = (x.shape, em.float32)
    for call in range(replay.PROBE_CALLS + 6):
        s = 0.25 + call * 0.375
        np.testing.assert_array_equal(fus._execute_fused(OPS["mul"], (x, s), {}, meta, dev),
                                      x * np.float32(s))
        np.testing.assert_array_equal(fus._execute_fused(OPS["sub"], (s, x), {}, meta, dev),
                                      np.float32(s) - x)
        k = call % 3
        np.testing.assert_array_equal(
            fus._execute_fused(OPS["greater"], (x, k), {}, (x.shape, em.bool_), dev), x > k)
    em.fusion.reset_stats()
    fus._execute_fused(OPS["mul"], (x, 9.5), {}, meta, dev)
    assert em.fusion.stats()["kernels"] == 1
