"""Regressions found by running the conformance suite with ``EMBER_FUSION_STRICT=1`` (a
failed fused plan raises instead of running unfused): each test fails without its fix.

* the C runtime shared one `Program` between kernels of one C source but different launch
  signatures (an unread bool vs u8 input, shapes that collapse alike);
* a bf16 op's Python scalar was rounded to bf16 (NumPy computes ``bf16 * float`` in f32);
* ``ir.cast(x, f16)`` did not round, and an f16 -> f32 cast kept the f16 hint (a later
  scalar was rounded to f16 although NumPy computes that op in f32);
* IR equality was exponential on distinct but equal shared DAGs (and recursive);
* integer ``pow`` by a scalar exponent selected on loop-invariant conditions, which GCC
  unswitches (0.3-0.6 s to compile an i8 kernel).

References are NumPy (float32 arithmetic, ``astype`` rounding) and Python integers.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ember as em
from ember import dtype as dt
from ember.kernel import interpret, ir
from ember.kernel import lower_ops as L
from tests.fusion._util import RUNTIMES, fusion_device

BF16 = ml_dtypes.bfloat16


@pytest.fixture
def strict(monkeypatch):
    monkeypatch.setenv("EMBER_FUSION_STRICT", "1")


def _c_runtime():
    from ember.kernel.c.runtime import CpuKernelRuntime
    rt = CpuKernelRuntime(autotune=False)      # a fresh program cache
    if not rt.available():
        pytest.skip(f"C kernels unavailable: {rt.why_unavailable()}")
    return rt


def _bits_equal(a, b, what=""):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, f"{what}: {a.dtype}{a.shape} vs " \
                                                      f"{b.dtype}{b.shape}"
    w = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.itemsize]
    np.testing.assert_array_equal(a.view(w), b.view(w), err_msg=what)


# -- 1. programs keyed by source and launch signature --------------------------------------
def test_programs_of_one_source_keep_their_input_dtypes():
    rt = _c_runtime()
    kernels = {d: ir.Elementwise((4,), (ir.BufferView(d, (1,)),), (ir.Const(True, dt.bool_),),
                                 (dt.bool_,)) for d in (dt.uint8, dt.bool_)}
    progs = {d: rt.compile(k) for d, k in kernels.items()}
    for d, p in progs.items():
        (out,) = rt.launch(p, [np.zeros(4, d.np)])
        np.testing.assert_array_equal(out, np.ones(4, bool))


def test_programs_of_one_source_keep_their_shapes():
    rt = _c_runtime()
    x = np.arange(6, dtype=np.float32)
    k23 = ir.Elementwise((2, 3), (ir.BufferView(dt.f32, (3, 1)),), (ir.Load(0, dt.f32),),
                         (dt.f32,))
    k6 = ir.Elementwise((6,), (ir.BufferView(dt.f32, (1,)),), (ir.Load(0, dt.f32),), (dt.f32,))
    (a,) = rt.launch(rt.compile(k23), [x])
    (b,) = rt.launch(rt.compile(k6), [x])
    assert a.shape == (2, 3) and b.shape == (6,)
    out = np.empty(6, np.float32)
    rt.launch_into(rt.compile(k6), [x], [], [out])
    np.testing.assert_array_equal(out, x)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_is_nan_of_u8_then_bool_fused(runtime, strict):
    dev = fusion_device(runtime)
    for a in (np.array([0, 3, 255], np.uint8), np.array([True, False, True])):
        got = em.is_nan(em.tensor(a, device=dev)).numpy()
        np.testing.assert_array_equal(got, np.zeros(3, bool))
        got = em.is_finite(em.tensor(a, device=dev)).numpy()
        np.testing.assert_array_equal(got, np.ones(3, bool))


# -- 2. bf16 scalars: rounded to f32, not bf16 ---------------------------------------------
def _bf16_inputs():
    rng = np.random.default_rng(2)
    x = (rng.standard_normal(2048) * 4).astype(BF16)
    x[:6] = np.array([1.0, 3.0, 0.3, 7.1, 1e-3, 250.0]).astype(BF16)
    return x


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("case", ["mul", "rsub", "pow", "add_div"])
def test_bf16_scalar_is_rounded_to_f32(runtime, case, strict):
    x = _bf16_inputs()
    f32 = x.astype(np.float32)
    fns = {
        "mul": (lambda t: t * 0.1, lambda v: v * np.float32(0.1)),
        "rsub": (lambda t: 3.3 - t, lambda v: np.float32(3.3) - v),
        "pow": (lambda t: t.abs() ** 0.3, lambda v: np.abs(v) ** np.float32(0.3)),
        "add_div": (lambda t: (t + 0.001) / 0.3,
                    lambda v: (v + np.float32(0.001)).astype(BF16).astype(np.float32)
                    / np.float32(0.3)),
    }
    fused, ref = fns[case]
    got = fused(em.tensor(x, device=fusion_device(runtime))).numpy()
    want = ref(f32).astype(BF16)
    if case == "pow":   # the math library's pow: within one bf16 ulp of NumPy's
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32),
                                   rtol=2 ** -7)
        # the exponent itself: 0.3 rounded to bf16 (0.30078125) moves results by more
        bad = (np.abs(f32) ** np.float32(float(BF16(0.3)))).astype(BF16)
        assert np.count_nonzero(got != bad) > np.count_nonzero(got != want)
    else:
        _bits_equal(got, want, case)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_f16_scalar_is_still_rounded_to_f16(runtime, strict):
    x = (np.random.default_rng(3).standard_normal(2048) * 4).astype(np.float16)
    got = (em.tensor(x, device=fusion_device(runtime)) * 0.1).numpy()
    want = (x.astype(np.float32) * np.float32(np.float16(0.1))).astype(np.float16)
    _bits_equal(got, want)


# -- 3. casts to and from f16/bf16 in the middle of a chain --------------------------------
@pytest.mark.parametrize("narrow", [dt.f16, dt.bf16])
def test_ir_cast_to_a_narrow_type_rounds(narrow):
    x = (np.random.default_rng(4).standard_normal(1000) * 100).astype(np.float32)
    e = ir.cast(ir.Load(0, dt.f32), narrow) * 3.0
    assert e.dtype is dt.f32
    k = ir.Elementwise((1000,), (ir.BufferView(dt.f32, (1,)),), (e,), (dt.f32,))
    want = x.astype(narrow.np).astype(np.float32) * np.float32(3)
    _bits_equal(interpret.evaluate(k, [x])[0], want)
    rt = _c_runtime()
    _bits_equal(rt.launch(rt.compile(k), [x])[0], want)


def test_ir_cast_keeps_a_narrow_value_as_it_is():
    h = ir.Load(0, dt.f16)
    w = ir.cast(h, dt.f16)
    assert w == ir.Cast(h, dt.f32)                 # widened only
    assert ir.cast(w, dt.f16) is w                 # already an f16 value
    assert ir.cast(w, dt.f32) is w
    b = ir.cast(ir.Load(0, dt.bf16), dt.f16)       # bf16 -> f16 rounds
    assert b == ir.Cast(ir.Cast(ir.Cast(ir.Load(0, dt.bf16), dt.f32), dt.f16), dt.f32)


def test_cast_op_expr_rounds_in_the_middle_of_a_chain():
    from ember.ops.registry import OPS
    x = (np.random.default_rng(5).standard_normal(1000) * 100).astype(np.float32)
    mid = OPS["cast"].expr(ir.Load(0, dt.f32), dtype=dt.f16)
    back = OPS["cast"].expr(mid, dtype=dt.f32)
    e = OPS["mul"].expr(back, ir.Arg(0, dt.f32))
    k = ir.Elementwise((1000,), (ir.BufferView(dt.f32, (1,)),), (e,), (dt.f32,), (dt.f32,))
    want = x.astype(np.float16).astype(np.float32) * np.float32(1.1)
    _bits_equal(interpret.evaluate(k, [x], [1.1])[0], want)


CHAINS = {
    # NumPy: f16 -> f32, then f32 * 1.1 (the scalar rounded to f32 only), then -> f16
    "f16_f32_scale_f16": (np.float16, lambda t: (t.cast(em.f32) * 1.1).cast(em.f16),
                          lambda x: (x.astype(np.float32) * np.float32(1.1)).astype(np.float16)),
    "f16_f32_sub_f16": (np.float16, lambda t: (1.0001 - t.cast(em.f32)).cast(em.f16),
                        lambda x: (np.float32(1.0001) - x.astype(np.float32))
                        .astype(np.float16)),
    "f32_f16_f32": (np.float32, lambda t: t.cast(em.f16).cast(em.f32) * 3.0,
                    lambda x: x.astype(np.float16).astype(np.float32) * np.float32(3)),
    "f64_bf16_f64": (np.float64, lambda t: t.cast(em.bf16).cast(em.f64) + 1.0,
                     lambda x: x.astype(np.float32).astype(BF16).astype(np.float64) + 1.0),
    "bf16_f16": (BF16, lambda t: t.cast(em.f16) * 1.5,
                 lambda x: (x.astype(np.float16).astype(np.float32) * np.float32(
                     np.float16(1.5))).astype(np.float16)),
    "bf16_f32_sign": (BF16, lambda t: (-t).cast(em.f32).sign(),
                      lambda x: np.sign(-(x.astype(np.float32)))),
}


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("name", sorted(CHAINS))
def test_cast_chains_match_numpy(runtime, name, strict):
    npd, fn, ref = CHAINS[name]
    x = (np.random.default_rng(6).standard_normal(3000) * 30).astype(npd)
    x[:4] = np.array([0.0, -0.0, 0.1, 65519.0]).astype(npd)
    em.fusion.reset_stats()
    got = fn(em.tensor(x, device=fusion_device(runtime))).numpy()
    assert em.fusion.stats()["kernels"] == 1
    with np.errstate(over="ignore"):
        want = ref(x)
    _bits_equal(got, want, name)


# -- 4. IR equality and hashing: linear, no recursion --------------------------------------
class _CountingOp(str):
    """An op name that counts its comparisons (one per pair of nodes compared)."""
    calls = 0

    def __eq__(self, other):
        _CountingOp.calls += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def _squares(depth, op):
    x = ir.Load(0, dt.i32)
    for _ in range(depth):
        x = ir.Binary(op, x, x, dt.i32)
    return x


def test_equality_of_distinct_shared_dags_is_linear():
    a = _squares(24, _CountingOp("mul"))
    b = _squares(24, _CountingOp("mul"))
    _CountingOp.calls = 0
    assert a == b and hash(a) == hash(b)
    assert _CountingOp.calls <= 2 * 24      # 2**24 before
    c = ir.Binary("add", _squares(23, _CountingOp("mul")), ir.Load(1, dt.i32), dt.i32)
    assert a != c


def test_deep_expressions_hash_and_compare_without_recursion():
    def chain(n, last):
        x = ir.Load(0, dt.f32)
        for i in range(n):
            x = ir.Binary("add", x, ir.Const(float(i % 7), dt.f32), dt.f32)
        return ir.Binary("mul", x, ir.Const(last, dt.f32), dt.f32)
    a, b, c = chain(20000, 2.0), chain(20000, 2.0), chain(20000, -2.0)
    assert hash(a) == hash(b) and a == b and a != c
    assert len({a, b, c}) == 2


def test_const_equality_is_by_exact_value():
    assert ir.Const(0.0, dt.f32) != ir.Const(-0.0, dt.f32)
    nan1, nan2 = ir.Const(float("nan"), dt.f32), ir.Const(float("nan"), dt.f32)
    assert nan1 == nan2 and hash(nan1) == hash(nan2)
    assert ir.Const(1, dt.i32) != ir.Const(True, dt.i32)


# -- 5. integer pow -------------------------------------------------------------------------
INT_DTYPES = [dt.i64, dt.i32, dt.i16, dt.i8, dt.u8]


def _int_pow_ref(x, e, d):
    bits = 8 * d.itemsize
    out = []
    for v in x.tolist():
        if e < 0:
            r = 1 if v == 1 else ((-1 if e % 2 else 1) if v == -1 else 0)
        else:
            r = pow(v, e, 1 << bits)
        r %= 1 << bits
        out.append(r - (1 << bits) if d.signed and r >= 1 << (bits - 1) else r)
    return np.array(out, d.np)


def _int_bases(d):
    info = np.iinfo(d.np)
    vals = {0, 1, 2, 3, 5, 7, 127, 255, info.max, info.max - 1, info.min}
    if d.signed:
        vals |= {-1, -2, -3, -7}
    return np.array(sorted(v for v in vals if info.min <= v <= info.max), d.np)


def _exponents(d):
    info = np.iinfo(d.np)
    es = [0, 1, 2, 3, 5, 7, 8, 31, 62, 63, 64, 100, 127, info.max]
    if d.signed:
        es += [-1, -2, -3, info.min]
    return [e for e in es if info.min <= e <= info.max]


@pytest.mark.parametrize("d", INT_DTYPES, ids=lambda d: d.short)
def test_int_pow_by_a_scalar_exponent(d):
    x = _int_bases(d)
    e = L.int_pow(ir.Load(0, d), ir.Arg(0, d))
    k = ir.Elementwise((len(x),), (ir.BufferView(d, (1,)),), (e,), (d,), (d,))
    rt = _c_runtime()
    p = rt.compile(k)
    for n in _exponents(d):
        want = _int_pow_ref(x, n, d)
        np.testing.assert_array_equal(interpret.evaluate(k, [x], [n])[0], want, f"** {n}")
        np.testing.assert_array_equal(rt.launch(p, [x], [n])[0], want, f"C ** {n}")


@pytest.mark.parametrize("d", INT_DTYPES, ids=lambda d: d.short)
def test_int_pow_by_a_tensor_exponent(d):
    xs = _int_bases(d)
    ns = np.array(_exponents(d), d.np)
    x = np.repeat(xs, len(ns))
    n = np.tile(ns, len(xs))
    e = L.int_pow(ir.Load(0, d), ir.Load(1, d))
    k = ir.Elementwise((len(x),), (ir.BufferView(d, (1,)),) * 2, (e,), (d,))
    want = np.concatenate([_int_pow_ref(xs[i:i + 1].repeat(1), int(v), d)
                           for i in range(len(xs)) for v in ns])
    np.testing.assert_array_equal(interpret.evaluate(k, [x, n])[0], want)
    rt = _c_runtime()
    np.testing.assert_array_equal(rt.launch(rt.compile(k), [x, n])[0], want)


def _invariant(e, memo):
    """Whether ``e`` reads no input (constant over the loop)."""
    for n in ir.walk(e):
        if n not in memo:
            ch = ir.children(n)
            memo[n] = not isinstance(n, (ir.Load, ir.Index)) and all(memo[c] for c in ch)
    return memo[e]


@pytest.mark.parametrize("d", INT_DTYPES, ids=lambda d: d.short)
def test_int_pow_by_a_scalar_selects_on_no_loop_invariant_condition(d):
    """GCC versions a loop for each select on a loop-invariant condition (slow compiles)."""
    e = L.int_pow(ir.Load(0, d), ir.Arg(0, d))
    memo = {}
    inv = [n for n in ir.walk(e) if isinstance(n, ir.Select) and _invariant(n.cond, memo)]
    assert not inv


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("d", [dt.i8, dt.i32, dt.i64], ids=lambda d: d.short)
def test_int_pow_fused(runtime, d, strict):
    x = _int_bases(d)
    t = em.tensor(x, device=fusion_device(runtime))
    for n in (0, 2, 3, 13):
        np.testing.assert_array_equal((t ** n).numpy(), _int_pow_ref(x, n, d), f"** {n}")
