"""The Cuda backend's eager kernels (ember/backend/cuda/eager.py).

Without a GPU: every eligible registry op, on every dtype it takes, with tensors, scalars and
periodic (bias) operands, lowers to a flat kernel that NVRTC compiles (skipped by name
without NVRTC). On a GPU: the
path runs, gives NumPy's results (bit for bit where the op is exact), and steps aside where
it does not apply (broadcasting, strided inputs, bf16), with the same results."""
from __future__ import annotations

import concurrent.futures
import os

import numpy as np
import pytest

import ember as em
from ember import dtype as dt
from ember.backend.cuda import eager
from ember.kernel.cuda.compiler import CudaCompiler, default_arch
from ember.kernel.cuda.render import FLAT_NAME, render_flat


_KINDS = (dt.float32, dt.float64, dt.float16, dt.int32, dt.int64, dt.uint8, dt.bool_)
_ATTRS = {"clamp": [{"min": -1.0, "max": 1.0}, {"min": -1, "max": None}],
          "cast": [{"dtype": d} for d in (dt.float32, dt.float16, dt.int64, dt.bool_)]}


def _operand_sets(op, d):
    """Operand kinds to try for ``op`` on dtype ``d``: all tensors; for two operands also a
    scalar on either side (a Python type of ``d``'s kind); the periodic (bias) flags."""
    if op.nin == 1:
        return [((d,), (False,))]
    scalar = float if d.is_float else bool if d.is_bool else int
    if op.name == "where":
        return [((dt.bool_, d, d), (False, False, False)),
                ((dt.bool_, d, scalar), (False, True, False)),
                ((dt.bool_, scalar, d), (False, False, True))]
    return [((d, d), (False, False)), ((d, d), (False, True)), ((d, scalar), (False,)),
            ((scalar, d), (False,))]


def _flat_calls():
    """(op, operand kinds, attrs, out dtype, periodic flags) for every eligible registry op
    on every dtype its shape/dtype rule accepts (no op is run: the rule gives the output
    dtype), so the compile check does not depend on any other test's state."""
    import types
    calls = []
    for op in em.ops.OPS.values():
        if not eager.eligible(op):
            continue
        for d in _KINDS:
            for kinds, cyclic in _operand_sets(op, d):
                for attrs in _ATTRS.get(op.name, [{}]):
                    stubs = [types.SimpleNamespace(_shape=(4, 3), _dtype=k)
                             if isinstance(k, dt.DType) else k(1) for k in kinds]
                    try:
                        meta = op.infer(*stubs, **attrs)
                    except Exception:  # noqa: BLE001  (a dtype the op does not take)
                        continue
                    calls.append((op, list(kinds), attrs, meta[1], cyclic))
    return calls


def test_every_flat_kernel_compiles(tmp_path):
    compiler = CudaCompiler(cache_root=tmp_path)
    if not compiler.available:
        pytest.skip(f"NVRTC unavailable (compile-only checks skipped): {compiler.reason}")
    calls = _flat_calls()
    assert len(calls) > 300, f"only {len(calls)} eligible op calls"
    failed, sources = [], []
    for op, kinds, attrs, od, cyclic in calls:
        what = f"{op.name} {kinds} {attrs} -> {od.short}"
        try:
            kernel, _ = eager.flat_kernel(op, kinds, attrs, od)
            if kernel is None:
                continue
            rd = render_flat(kernel, eager.BLOCK, cyclic)
            assert f"{FLAT_NAME}(" in rd.source
            sources.append((what, rd.source))
        except Exception as e:  # noqa: BLE001
            failed.append(f"{what}: {str(e)[:300]}")

    def build(item):
        what, source = item
        try:
            compiler.build(source, default_arch())
        except Exception as e:  # noqa: BLE001
            return f"{what}: {str(e)[:300]}"
        return None
    # (the compiler builds different sources at once: NVRTC runs outside the GIL)
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        failed += [f for f in pool.map(build, sources) if f is not None]
    assert not failed, f"{len(failed)} of {len(calls)} flat kernels failed:\n" + \
        "\n".join(failed[:20])
    built = len(sources)
    assert built > 150, f"only {built} of {len(calls)} calls gave a flat kernel"


def test_flat_kernel_refuses_what_it_cannot_take():
    add = em.ops.OPS["add"]
    assert eager.flat_kernel(add, [dt.bfloat16, dt.bfloat16], {}, dt.bfloat16)[0] is None
    assert eager.flat_kernel(add, [float, float], {}, dt.float32)[0] is None
    k, conv = eager.flat_kernel(add, [dt.float16, float], {}, dt.float16)
    assert len(k.inputs) == 1 and len(k.args) == 1
    # a f16 op's scalar is rounded to f16, passed as the f32 bits of that value
    assert conv[0](0.1) == int(np.float32(np.float16(0.1)).view(np.uint32))
    with pytest.raises(ValueError, match="contiguous"):
        from ember.kernel import ir
        render_flat(ir.Elementwise((4,), (ir.BufferView(dt.float32, (2,), 0),),
                                   (ir.Load(0, dt.float32),), (dt.float32,)))


# -- on a GPU -------------------------------------------------------------------------------
gpu = pytest.mark.skipif(not em.cuda.is_available(), reason=f"cuda: {em.cuda.why_unavailable()}")


@pytest.fixture
def dev():
    return em.device("cuda", fusion=False)


def _launches(dev):
    return dev.backend._eager.launches if dev.backend._eager is not None else 0


@gpu
@pytest.mark.parametrize("d", ["f32", "f64", "f16", "i32", "i64", "u8"])
def test_eager_ops_match_numpy(dev, d):
    rng = np.random.default_rng(3)
    npd = dt.as_dtype(d).np
    a = (rng.normal(size=(7, 33)) * 8).astype(npd)
    b = (rng.normal(size=(7, 33)) * 8 + 0.5).astype(npd)
    if npd.kind in "iu":
        b[b == 0] = 3
    ea, eb = em.tensor(a, device=dev), em.tensor(b, device=dev)
    ca, cb = em.tensor(a), em.tensor(b)        # NdArray, the reference
    before = _launches(dev)
    exact = [lambda x, y: x + y, lambda x, y: x * y, lambda x, y: x - 3,
             lambda x, y: x > y, lambda x, y: em.maximum(x, y), lambda x, y: x.abs(),
             lambda x, y: em.where(x > y, x, y), lambda x, y: x.cast("f32")]
    approx = []
    if npd.kind == "f":
        exact += [lambda x, y: x / y, lambda x, y: x * 0.1, lambda x, y: x ** 2]
        approx = [lambda x, y: x.exp(), lambda x, y: x.sigmoid(), lambda x, y: x.erf()]
    else:
        exact += [lambda x, y: x // y, lambda x, y: x % y]
    checks = exact + approx
    for f in exact:
        got, want = f(ea, eb).numpy(), f(ca, cb).numpy()
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    # the math library is within 2 ulp of the exact result (tests/kernel/test_mathlib.py)
    rtol = {"f32": 4e-7, "f64": 8e-16, "f16": 2e-3}.get(d)
    for f in approx:
        got, want = f(ea, eb).numpy(), f(ca, cb).numpy()
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-30)
    assert _launches(dev) - before >= len(checks) - 1   # (x ** 2 may be a multiply)


@gpu
def test_eager_steps_aside_and_agrees(dev):
    rng = np.random.default_rng(4)
    a = rng.normal(size=(6, 8)).astype(np.float32)
    ea = em.tensor(a, device=dev)
    col = em.tensor(a[:, :1], device=dev)
    before = _launches(dev)
    np.testing.assert_array_equal((ea + col).numpy(), a + a[:, :1])      # broadcast
    np.testing.assert_array_equal((ea[:, ::2] * 2).numpy(), a[:, ::2] * 2)  # strided
    bf = em.tensor(a, device=dev).cast("bf16")
    np.testing.assert_array_equal((bf + bf).numpy(), (em.tensor(a).cast("bf16") * 2).numpy())
    assert _launches(dev) == before
    np.testing.assert_array_equal((ea + ea).numpy(), a + a)
    assert _launches(dev) == before + 1


@gpu
def test_eager_reads_a_bias_with_a_period(dev):
    rng = np.random.default_rng(5)
    a = rng.normal(size=(4, 6, 8)).astype(np.float32)
    for b in (a[0, 0], a[0, :1], a[:1], np.float32(2.5) * np.ones((), np.float32)):
        before = _launches(dev)
        got = (em.tensor(a, device=dev) - em.tensor(np.ascontiguousarray(b), device=dev))
        np.testing.assert_array_equal(got.numpy(), a - b)
        got = em.where(em.tensor(a, device=dev) > 0, em.tensor(np.ascontiguousarray(b),
                                                               device=dev), 0.0)
        np.testing.assert_array_equal(got.numpy(), np.where(a > 0, b, np.float32(0)))
        assert _launches(dev) == before + 3      # (the comparison is one too)


@gpu
def test_eager_runs_in_the_memory_order_of_its_operands(dev):
    """A transposed operand, or a channels-last activation and its bias, run as one flat
    kernel in their memory order; the output keeps that layout."""
    rng = np.random.default_rng(6)
    a = rng.normal(size=(6, 8)).astype(np.float32)
    x = rng.normal(size=(4, 5, 3, 2)).astype(np.float32)          # N, C, H, W
    b = rng.normal(size=(1, 5, 1, 1)).astype(np.float32)
    ex = em.tensor(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), device=dev).permute(
        0, 3, 1, 2)                                                 # channels-last
    eb = em.tensor(b, device=dev)
    before = _launches(dev)
    np.testing.assert_array_equal((em.tensor(a, device=dev).swap_dims(0, 1) * 2).numpy(),
                                  a.T * 2)
    y = ex + eb
    np.testing.assert_array_equal(y.numpy(), x + b)
    np.testing.assert_array_equal((eb - ex).numpy(), b - x)         # the bias first
    np.testing.assert_array_equal((ex.relu() + em.tensor(b[0], device=dev)).numpy(),
                                  np.maximum(x, 0) + b[0])          # a bias of fewer dims
    assert _launches(dev) == before + 5
    s = y.primitive.strides
    assert s[1] < s[3] < s[2] < s[0], f"channels-last layout lost: strides {s}"


def test_repeats_is_broadcast_along_leading_dims():
    assert eager._repeats((256,), (64, 256)) and eager._repeats((1, 256), (64, 256))
    assert eager._repeats((), (3,)) and eager._repeats((6, 8), (4, 6, 8))
    assert not eager._repeats((64, 1), (64, 256)) and not eager._repeats((2, 256), (64, 256))
    assert not eager._repeats((3, 1, 8), (3, 8))


@gpu
def test_eager_on_fusion_and_autodiff():
    dev = em.device("cuda").autodiff()
    x = em.tensor(np.linspace(-2, 2, 12, dtype=np.float32), device=dev).require_grad()
    y = (x * x + x.sigmoid()).sum()
    g = x.grad(y.backward()).numpy()
    xn = np.linspace(-2, 2, 12, dtype=np.float64)
    s = 1 / (1 + np.exp(-xn))
    np.testing.assert_allclose(g, 2 * xn + s * (1 - s), rtol=1e-6, atol=1e-6)
