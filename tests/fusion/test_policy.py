"""When Fusion records and fuses, and when it runs an op at once on the inner backend
(``Fusion(inner, runtime, min_numel)``): small ops, single ops flushed alone, inputs laid out
other than row-major, ready reductions; and that either way results are NdArray's."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.backend import Fusion, NdArray
from ember.backend.fusion.backend import SINGLE_OP_MIN
from ember.backend.fusion.stream import FusionPrim
from tests.fusion._util import UNFUSED, assert_close, counted, fusion_device

MIN = 1000


@pytest.fixture
def dev():
    b = Fusion(NdArray(), "c", MIN)
    if b.runtime is None:
        pytest.skip("fusion runtime 'c' unavailable: no C compiler")
    b.alone.clear()
    return b.device(0)


def _same(a, b):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_small_ops_run_at_once_on_the_inner_backend(dev):
    a = np.random.default_rng(0).normal(size=(MIN - 1,)).astype(np.float32)
    x = em.tensor(a, device=dev)
    em.fusion.reset_stats()
    y = (x * 2.0 + 1.0).exp()
    st = em.fusion.stats()
    assert type(y._prim) is np.ndarray          # computed already, not a pending handle
    assert st["eager_ops"] == 3 and st["recorded_ops"] == 0 and st["kernels"] == 0, st
    _same(y.numpy(), (em.tensor(a, device=UNFUSED) * 2.0 + 1.0).exp().numpy())


def test_chains_on_large_tensors_fuse(dev):
    a = np.random.default_rng(1).normal(size=(4 * MIN,)).astype(np.float32)
    x = em.tensor(a, device=dev)
    got, st = counted(lambda: ((x * 2.0 + 1.0) * x).abs())
    assert st["kernels"] == 1 and st["recorded_ops"] == 4 and st["eager_ops"] == 0, st
    _same(got, np.abs((a * np.float32(2) + np.float32(1)) * a))


def test_a_single_op_flushed_alone_runs_inner_and_later_ones_at_once(dev):
    assert dev.backend.single_below == max(MIN, SINGLE_OP_MIN)
    a = np.random.default_rng(2).normal(size=(4 * MIN,)).astype(np.float32)
    x = em.tensor(a, device=dev)
    got, st = counted(lambda: x * 3.0)       # recorded, then flushed alone: no kernel
    assert st["kernels"] == 0 and st["eager_ops"] == 1 and st["recorded_ops"] == 1, st
    _same(got, a * np.float32(3))
    got, st = counted(lambda: x * 5.0)       # the same structure: at once, unrecorded
    assert st["kernels"] == 0 and st["eager_ops"] == 1 and st["recorded_ops"] == 0, st
    _same(got, a * np.float32(5))
    got, st = counted(lambda: (x + 1.0) * 3.0)  # a pending input still records: 1 kernel
    assert st["kernels"] == 1, st
    _same(got, (a + np.float32(1)) * np.float32(3))


def test_a_large_transposed_input_is_not_copied_by_a_kernel(dev):
    rng = np.random.default_rng(3)
    a = rng.normal(size=(96, 64)).astype(np.float32)
    b = rng.normal(size=(64, 96)).astype(np.float32)
    x = em.tensor(a, device=dev).swap_dims(0, 1)      # a column-major view, 6144 elements
    y = em.tensor(b, device=dev)
    assert x._prim.flags.f_contiguous and not x._prim.flags.c_contiguous
    a = a.T
    em.fusion.reset_stats()
    z = x + 1.0
    st = em.fusion.stats()
    assert st["kernels"] == 0 and st["eager_ops"] == 1, st
    assert z._prim.flags.f_contiguous                   # NumPy kept the memory order
    _same(z.numpy(), a + np.float32(1))
    # a pending operand: computed first, then the op at once on NdArray
    got, st = counted(lambda: (y * 2.0).exp() + x)
    assert st["eager_ops"] >= 1, st
    assert_close(got, np.exp(b.astype(np.float64) * 2) + a, rtol=1e-6)


def test_a_layer_norm_of_a_transposed_input_still_fuses(dev):
    """Combining a transposed input with its own statistics (layer norm after swap_dims,
    Burn's bug case) is what reduce-then-broadcast kernels are for: the rule that keeps a
    transposed input away from kernels does not apply, and it runs in two kernels."""
    rng = np.random.default_rng(8)
    a = rng.normal(size=(4, 48, 1024)).astype(np.float32)   # above SINGLE_OP_MIN too
    w, b = (rng.normal(size=48).astype(np.float32) for _ in range(2))
    x = em.tensor(a, device=dev).swap_dims(1, 2)
    wt, bt = em.tensor(w, device=dev), em.tensor(b, device=dev)
    got, st = counted(lambda: em.layer_norm(x, 48, wt, bt))
    assert st["kernels"] <= 2 and st["eager_ops"] == 0 and st["inner_ops"] == 0, st
    xs = a.transpose(0, 2, 1).astype(np.float64)
    mu = xs.mean(-1, keepdims=True)
    ref = (xs - mu) / np.sqrt(((xs - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * w + b
    assert_close(got, ref, rtol=1e-5, atol=1e-5)


def test_a_ready_reduction_below_the_single_op_size_runs_inner(dev):
    a = np.random.default_rng(4).normal(size=(40, 50, 3)).astype(np.float32)
    x = em.tensor(a, device=dev)
    got, st = counted(lambda: x.sum((0, 2)))
    assert st["kernels"] == 0 and st["recorded_ops"] == 0, st
    _same(got, em.tensor(a, device=UNFUSED).sum((0, 2)).numpy())
    got, st = counted(lambda: (x * x).sum((0, 2)))      # a prologue to fuse: kernels
    assert st["kernels"] >= 1 and st["inner_ops"] == 0, st
    assert_close(got, (a.astype(np.float64) ** 2).sum((0, 2)), rtol=1e-5)


@pytest.mark.parametrize("runtime", ["interpret", "c"])
def test_adjacent_reduced_dims_of_a_ready_tensor_reduce_in_one_kernel(runtime):
    d = fusion_device(runtime)
    a = np.random.default_rng(5).normal(size=(6, 5, 4, 7)).astype(np.float32)
    x = em.tensor(a, device=d)
    a64 = a.astype(np.float64)
    got, st = counted(lambda: x.sum((2, 3)))
    assert st["kernels"] == 1, st
    assert_close(got, a64.sum((2, 3)), rtol=1e-5, atol=1e-5)
    got, st = counted(lambda: x.sum((0, 2, 3), keepdim=True))
    assert st["kernels"] == 2, st                         # (2, 3) merged, then 0
    assert_close(got, a64.sum((0, 2, 3), keepdims=True), rtol=1e-5, atol=1e-5)
    got, st = counted(lambda: x.max((1, 2)))
    assert st["kernels"] == 1, st
    _same(got, a.max((1, 2)))
    # dims that do not merge in memory (a transposed view), and a pending input: a
    # kernel per dim, with the prologue fused into the first
    t = em.tensor(np.ascontiguousarray(a.transpose(0, 1, 3, 2)), device=d).swap_dims(2, 3)
    got, st = counted(lambda: t.sum((2, 3)))
    assert st["kernels"] == 2, st
    assert_close(got, a64.sum((2, 3)), rtol=1e-5, atol=1e-5)
    got, st = counted(lambda: (x * x).sum((2, 3)))
    assert st["kernels"] == 2 and st["inner_ops"] == 0, st
    assert_close(got, (a64 ** 2).sum((2, 3)), rtol=1e-5, atol=1e-5)


def test_results_equal_ndarray_across_the_policy(dev):
    """The same program on Fusion with the size policy, on Fusion fusing everything and on
    NdArray: ops that run at once are NdArray's own, fused ones agree to rounding."""
    rng = np.random.default_rng(6)
    small, big = (rng.normal(size=s).astype(np.float32) for s in ((8, 20), (40, 60)))
    every = fusion_device("c")

    def prog(d, a):
        x = em.tensor(a, device=d)
        return ((x * 1.5 - x.mean(1, keepdim=True)).tanh() * x).sum(0).numpy()

    for a in (small, big):
        want = prog(UNFUSED, a)
        assert_close(prog(dev, a), want, rtol=1e-5, atol=1e-5)
        assert_close(prog(every, a), want, rtol=1e-5, atol=1e-5)
    _same(prog(dev, small), prog(UNFUSED, small))        # all at once on NdArray


def test_min_numel_from_the_environment(monkeypatch):
    monkeypatch.setenv("EMBER_FUSION_MIN_NUMEL", "123")
    assert Fusion(NdArray(), "none", None).min_numel == 123
    monkeypatch.setenv("EMBER_FUSION_MIN_NUMEL", "lots")
    with pytest.raises(ValueError, match="EMBER_FUSION_MIN_NUMEL"):
        Fusion(NdArray(), "interpret", None)
    with pytest.raises(ValueError, match="min_numel must be >= 0"):
        Fusion(NdArray(), "none", -1)


def test_the_default_device_fuses_large_work(dev):
    """``em.device("cpu")`` (Fusion with the default policy): a long chain on a large tensor
    is one kernel."""
    d = em.device("cpu")
    if not d.backend.fusing:
        pytest.skip("no C compiler: em.device('cpu') is plain NdArray")
    n = d.backend.min_numel
    a = np.random.default_rng(7).normal(size=(2, n)).astype(np.float32)
    x = em.tensor(a, device=d)
    y = x
    for _ in range(6):
        y = y * 0.5 + 0.25
    assert type(y._prim) is FusionPrim
    got, st = counted(lambda: y)
    assert st["kernels"] == 1, st
    want = a
    for _ in range(6):
        want = want * np.float32(0.5) + np.float32(0.25)
    _same(got, want)
