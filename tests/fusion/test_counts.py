"""How many kernels a computation launches (em.fusion.stats()), and that the plan cache
replays repeated streams without planning."""
from __future__ import annotations

import math

import numpy as np
import pytest

import ember as em
from tests.fusion._util import (RUNTIMES, UNFUSED, assert_close, counted, fusion_device,
                                has_broadcast_reduce)


@pytest.fixture(params=RUNTIMES)
def dev(request):
    return fusion_device(request.param)


def _gelu(x):
    return x * ((x / math.sqrt(2.0)).erf() + 1.0) / 2.0


def _erf64(a):
    return np.vectorize(math.erf)(a)


def test_custom_gelu_is_one_kernel(dev):
    a = np.random.default_rng(0).normal(size=(64, 33)).astype(np.float32) * 3
    x = em.tensor(a, device=dev)
    got, st = counted(lambda: _gelu(x))
    assert st["kernels"] == 1 and st["inner_ops"] == 0, st
    a64 = a.astype(np.float64)
    assert_close(got, a64 * (_erf64(a64 / math.sqrt(2.0)) + 1) / 2, rtol=2e-6, atol=1e-6)


def _bcast_note(dev):
    if not has_broadcast_reduce(dev):
        pytest.xfail(f"the {type(dev.backend.runtime).__name__} runtime does not run "
                     f"broadcast reductions (ir.Reduce(broadcast=True)); fusion splits them "
                     f"in two kernels")


def test_softmax_dim1_of_3d_at_most_two_kernels(dev):
    a = np.random.default_rng(1).normal(size=(4, 37, 9)).astype(np.float32) * 4
    x = em.tensor(a, device=dev)
    got, st = counted(lambda: em.softmax(x, 1))
    a64 = a.astype(np.float64)
    e = np.exp(a64 - a64.max(1, keepdims=True))
    assert_close(got, e / e.sum(1, keepdims=True))
    assert st["inner_ops"] == 0, st
    if st["kernels"] > 2:
        _bcast_note(dev)
    assert st["kernels"] <= 2, st


def _backend_kernel(dev, op) -> bool:
    """Whether the inner backend runs ``op`` as a kernel of its own (``fused_ops``: layer
    norm on Cuda), which Fusion then runs rather than decomposing the op."""
    return op in dev.backend.inner.fused_ops


def test_layer_norm_after_swap_dims_at_most_two_kernels(dev):
    rng = np.random.default_rng(2)
    a = rng.normal(size=(3, 40, 6)).astype(np.float32)
    w = rng.normal(size=(40,)).astype(np.float32)
    b = rng.normal(size=(40,)).astype(np.float32)
    x, wt, bt = (em.tensor(v, device=dev) for v in (a, w, b))
    got, st = counted(lambda: em.layer_norm(x.swap_dims(1, 2), 40, wt, bt))
    xs = np.swapaxes(a.astype(np.float64), 1, 2)
    ref = (xs - xs.mean(-1, keepdims=True)) / np.sqrt(xs.var(-1, keepdims=True) + 1e-5)
    assert_close(got, ref * w + b, rtol=1e-5, atol=1e-5)
    if _backend_kernel(dev, "layer_norm"):
        assert st["inner_ops"] == 1 and st["kernels"] == 0, st
        return
    assert st["inner_ops"] == 0, st
    if st["kernels"] > 2:
        _bcast_note(dev)
    assert st["kernels"] <= 2, st


def test_layer_norm_of_a_pending_swapped_input(dev):
    a = np.random.default_rng(3).normal(size=(2, 24, 5)).astype(np.float32)
    x = em.tensor(a, device=dev)
    got, st = counted(lambda: em.layer_norm((x * 2.0 + 1.0).swap_dims(1, 2), 24))
    xs = np.swapaxes(a.astype(np.float64) * 2 + 1, 1, 2)
    ref = (xs - xs.mean(-1, keepdims=True)) / np.sqrt(xs.var(-1, keepdims=True) + 1e-5)
    assert_close(got, ref, atol=1e-5)
    if _backend_kernel(dev, "layer_norm"):    # the pending input's kernel, then the op's
        assert st["inner_ops"] == 1 and st["kernels"] == 1, st
        return
    assert st["inner_ops"] == 0, st
    if st["kernels"] > 2:
        _bcast_note(dev)
    assert st["kernels"] <= 2, st


def test_reduction_with_prologue_and_epilogue_is_one_kernel(dev):
    a = np.random.default_rng(4).normal(size=(8, 30)).astype(np.float32)
    x = em.tensor(a, device=dev)
    # (x * x) summed, then scaled and square-rooted: one reduction kernel
    got, st = counted(lambda: ((x * x).sum(1) * (1.0 / 30)).sqrt())
    assert st["kernels"] == 1 and st["inner_ops"] == 0, st
    assert_close(got, np.sqrt((a.astype(np.float64) ** 2).mean(1)))


def test_dead_intermediates_never_materialize(dev):
    a = np.random.default_rng(5).normal(size=(50,)).astype(np.float32)
    x = em.tensor(a, device=dev)

    def chain():
        y = x
        for _ in range(20):
            y = (y * 0.5 + 0.25).abs()
        return y

    got, st = counted(chain)
    assert st["kernels"] == 1, st
    ref = a.astype(np.float64)
    for _ in range(20):
        ref = np.abs(ref * 0.5 + 0.25)
    assert_close(got, ref)


def test_live_intermediates_share_one_multi_output_kernel(dev):
    a = np.random.default_rng(6).normal(size=(7, 5)).astype(np.float32)
    x = em.tensor(a, device=dev)

    def both():
        y = x * 3.0
        z = y.exp() - 1.0
        return y, z

    (y, z), st = counted(both)
    assert st["kernels"] == 1, st
    assert_close(y, a * 3.0)
    assert_close(z, np.exp(a.astype(np.float64) * 3) - 1, rtol=2e-6)


def test_reshape_of_a_live_result_is_a_view_not_a_kernel(dev):
    """Logits kept for the caller and reshaped for the loss: one kernel writes them, the
    reshape is the inner backend's view of that buffer (one inner op, no copy kernel). A
    reshape of a transposed tensor still copies, in a kernel."""
    a = np.random.default_rng(8).normal(size=(2, 3, 5)).astype(np.float32)
    b = np.random.default_rng(9).normal(size=(5,)).astype(np.float32)
    x, bias = em.tensor(a, device=dev), em.tensor(b, device=dev)

    def logits_and_rows():
        out = x + bias
        return out, out.reshape(6, 5)

    (out, rows), st = counted(logits_and_rows)
    assert st["kernels"] == 1 and st["inner_ops"] == 1, st
    assert_close(out, a + b)
    assert_close(rows, (a + b).reshape(6, 5))

    def kept_and_transposed():
        y = x * 2.0
        return y, y.swap_dims(0, 2).reshape(5, 6)

    (y, got), st = counted(kept_and_transposed)
    assert st["inner_ops"] == 0, st
    assert_close(y, a * 2.0)
    assert_close(got, (a * 2.0).transpose(2, 1, 0).reshape(5, 6))


def test_plan_cache_replays_a_repeated_step(dev):
    rng = np.random.default_rng(7)

    def step(a, s):
        x = em.tensor(a, device=dev)
        return em.softmax(x * s, 0).numpy()

    a1, a2 = rng.normal(size=(2, 6, 5)).astype(np.float32)
    step(a1, 0.5)                                     # plans and compiles
    em.fusion.reset_stats()
    got = step(a2, 1.5)                               # the same structure, new values
    st = em.fusion.stats()
    assert st["plan_cache_misses"] == 0 and st["plan_cache_hits"] >= 1, st
    assert st["compiles"] == 0, st
    ref = np.exp(a2.astype(np.float64) * 1.5)
    assert_close(got, ref / ref.sum(0, keepdims=True))


def test_stats_fields():
    st = em.fusion.stats()
    for k in ("kernels", "inner_ops", "plan_cache_hits", "plan_cache_misses",
              "compile_time_s", "compiles"):
        assert k in st
    em.fusion.reset_stats()
    assert em.fusion.stats()["kernels"] == 0


def test_non_fusable_ops_fall_back_with_their_inputs_materialized(dev):
    rng = np.random.default_rng(8)
    a, b = rng.normal(size=(2, 5, 5)).astype(np.float32)
    x, y = em.tensor(a, device=dev), em.tensor(b, device=dev)
    got, st = counted(lambda: ((x + 1.0) @ (y * 2.0)).relu())
    assert st["inner_ops"] == 1, st            # the matmul
    # its two inputs in one kernel (computed in one flush: `_values`), then relu
    assert st["kernels"] == 2 and st["flushes"] == 2, st
    assert_close(got, np.maximum((a + 1.0) @ (b * 2.0), 0), rtol=1e-5)


def test_log_prints_plans(dev, capfd, monkeypatch):
    monkeypatch.setenv("EMBER_FUSION_LOG", "1")
    dev.backend.plans.clear()
    a = np.arange(6, dtype=np.float32)
    x = em.tensor(a, device=dev)
    (x * 2.0 + 3.0).numpy()
    err = capfd.readouterr().err
    assert "fusion plan: 1 kernel(s)" in err


def test_unfused_device_agrees(dev):
    a = np.random.default_rng(9).normal(size=(3, 4, 5)).astype(np.float32)
    f = em.tensor(a, device=dev)
    u = em.tensor(a, device=UNFUSED)

    def prog(x):
        return (x.exp().sum(2, keepdim=True) / x.abs().max(1, keepdim=True)).log()

    assert_close(prog(f).numpy(), prog(u).numpy(), rtol=2e-6)


def test_without_a_runtime_ops_run_unfused_with_identical_results():
    from ember.backend import Fusion, NdArray
    dev = Fusion(NdArray(), "none").device(0)
    assert not dev.backend.fusing
    a = np.random.default_rng(10).normal(size=(4, 6)).astype(np.float32)
    em.fusion.reset_stats()
    got = em.softmax(em.tensor(a, device=dev) * 2.0, 1)
    assert isinstance(got.primitive, np.ndarray)
    assert em.fusion.stats()["kernels"] == 0
    want = em.softmax(em.tensor(a, device=UNFUSED) * 2.0, 1)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_device_cpu_is_fusion_over_ndarray():
    """`em.device("cpu")` is Fusion(NdArray) (plain NdArray, said once, when no C compiler is
    usable); ``fusion=False`` gives NdArray, ``fusion=True`` insists on Fusion."""
    import ember as em
    from ember.backend import Fusion, NdArray
    fused = Fusion(NdArray())
    assert em.device("cpu", fusion=True) is fused.device(0)
    assert em.device("cpu", fusion=False) is NdArray().device(0)
    assert em.device("cpu:1", fusion=False) is NdArray().device(1)
    want = fused if fused.fusing else NdArray()
    assert em.device("cpu") is want.device(0)
    assert em.default_device() is want.device(0)
    assert em.device("cpu", autodiff=True).backend.inner is want
    assert em.tensor([1.0]).device is want.device(0)
