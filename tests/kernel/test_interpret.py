"""The NumPy reference evaluator of kernels (ember/kernel/interpret.py) against direct NumPy
and pure-Python computations, node kind by node kind and dtype by dtype."""
import math

import ml_dtypes
import numpy as np
import pytest

from ember import dtype as dt
from ember.kernel import ir
from ember.kernel.interpret import evaluate, gather

INTS = [dt.i8, dt.i16, dt.i32, dt.i64, dt.u8]
FLOATS = [dt.f32, dt.f64]


def run1(expr, arrays, out_dtype=None, shape=None, args=()):
    """Evaluate one expression over 1-d contiguous inputs (all of one length)."""
    shape = shape or (len(arrays[0]) if arrays else 1,)
    views = tuple(ir.BufferView(dt.from_numpy(a.dtype), (1,)) for a in arrays)
    k = ir.Elementwise(tuple(shape), views, (expr,), (out_dtype or expr.dtype,),
                       tuple(type(a) for a in args))
    return evaluate(k, arrays, list(args))[0]


def L(i, d):
    return ir.Load(i, d)


def int_values(d, n=200, seed=0):
    info = np.iinfo(d.np)
    rng = np.random.default_rng(seed)
    edge = [info.min, info.min + 1, -1, 0, 1, 2, 7, info.max - 1, info.max]
    edge = [v for v in edge if info.min <= v <= info.max]
    rnd = rng.integers(info.min, info.max, size=n, endpoint=True, dtype=d.np)
    small = rng.integers(max(info.min, -9), 10, size=n).astype(d.np)
    return np.concatenate([np.array(edge, d.np), rnd, small])


def float_values(d):
    npd = d.np
    fi = np.finfo(npd)
    v = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.7, -3.7, np.inf, -np.inf, np.nan,
         float(fi.max), -float(fi.max), float(fi.tiny), float(fi.smallest_subnormal),
         -float(fi.smallest_subnormal), 1e10, -1e10, 123.456, 2.0 ** 62, -2.0 ** 63, 2.0 ** 64]
    rng = np.random.default_rng(1)
    return np.concatenate([np.array(v, npd), (rng.standard_normal(200) * 10).astype(npd)])


def same(a, b):
    """Bitwise-equal values (NaNs equal, +0 and -0 distinct)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    assert a.shape == b.shape
    if a.dtype.kind == "f" or a.dtype == ml_dtypes.bfloat16:
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        both_nan = np.isnan(a64) & np.isnan(b64)
        eq = (a64 == b64) & (np.signbit(a64) == np.signbit(b64))
        bad = ~(both_nan | eq)
    else:
        bad = a != b
    assert not bad.any(), f"mismatch at {np.flatnonzero(bad)[:10]}: {a[bad][:10]} vs {b[bad][:10]}"


# -- loads through views --------------------------------------------------------------------
def test_gather_views():
    a = np.arange(24, dtype=np.float32)
    m = a.reshape(4, 6)
    # permute (transpose)
    same(gather(a, ir.BufferView(dt.f32, (1, 6)), (6, 4)), m.T)
    # broadcast (stride 0)
    same(gather(a, ir.BufferView(dt.f32, (0, 1), 6), (3, 6)), np.broadcast_to(m[1], (3, 6)))
    # flip both dims: negative strides from an offset
    same(gather(a, ir.BufferView(dt.f32, (-6, -1), 23), (4, 6)), m[::-1, ::-1])
    # stepped slice with offset
    same(gather(a, ir.BufferView(dt.f32, (12, 2), 1), (2, 3)), m[::2, 1::2])
    # 0-d and empty
    same(gather(a, ir.BufferView(dt.f32, (), 5), ()), np.array(5, np.float32))
    assert gather(a, ir.BufferView(dt.f32, (1, 1)), (0, 3)).shape == (0, 3)


def test_gather_ignores_array_strides_and_checks_bounds():
    base = np.arange(20, dtype=np.int32)
    v = base[5:15]            # data pointer at element 5 of base
    same(gather(v, ir.BufferView(dt.i32, (1,)), (3,)), np.array([5, 6, 7], np.int32))
    # element strides from the data pointer, regardless of v's own layout
    w = base[4::2]            # strides 8 bytes; memory from element 4 to 18
    same(gather(w, ir.BufferView(dt.i32, (2,)), (3,)), np.array([4, 6, 8], np.int32))
    with pytest.raises(IndexError):
        gather(v, ir.BufferView(dt.i32, (1,)), (11,))
    with pytest.raises(IndexError):
        gather(v, ir.BufferView(dt.i32, (-1,), 0), (2,))
    with pytest.raises(TypeError):
        gather(v, ir.BufferView(dt.f32, (1,)), (3,))


def test_elementwise_broadcast_and_index():
    a = np.arange(6, dtype=np.float64)          # (2, 3) row-major
    b = np.array([10.0, 20.0, 30.0])             # broadcast along dim 0
    x, y = L(0, dt.f64), L(1, dt.f64)
    e = x * y + ir.Cast(ir.Index(0), dt.f64) * 100.0 - ir.Cast(ir.Index(1), dt.f64)
    k = ir.Elementwise((2, 3), (ir.BufferView(dt.f64, (3, 1)), ir.BufferView(dt.f64, (0, 1))),
                       (e, x), (dt.f64, dt.f64))
    out, out2 = evaluate(k, [a, b])
    i0, i1 = np.meshgrid(np.arange(2), np.arange(3), indexing="ij")
    same(out, a.reshape(2, 3) * b + i0 * 100.0 - i1)
    same(out2, a.reshape(2, 3))
    assert out.flags.c_contiguous and out.shape == (2, 3)


def test_args_and_consts():
    a = np.linspace(-1, 1, 11).astype(np.float32)
    e = L(0, dt.f32) * ir.Arg(0, dt.f32) + ir.Arg(1, dt.f32)
    k = ir.Elementwise((11,), (ir.BufferView(dt.f32, (1,)),), (e,), (dt.f32,),
                       (dt.f32, dt.f32))
    same(evaluate(k, [a], [0.1, 3])[0], a * np.float32(0.1) + np.float32(3))
    # a constant-only expression broadcasts to the shape
    k = ir.Elementwise((2, 2), (), (ir.Const(-0.0, dt.f32) * 1.0,), (dt.f32,))
    same(evaluate(k, [])[0], np.full((2, 2), -0.0, np.float32))
    # 0.0 and -0.0 are distinct constants even though they compare equal
    k = ir.Elementwise((1,), (), (ir.Const(0.0, dt.f32) + 0.0, ir.Const(-0.0, dt.f32) + -0.0),
                       (dt.f32, dt.f32))
    r = evaluate(k, [])
    assert not np.signbit(r[0][0]) and np.signbit(r[1][0])


# -- unary ---------------------------------------------------------------------------------
@pytest.mark.parametrize("d", FLOATS)
def test_unary_float(d):
    v = float_values(d)
    x = L(0, d)
    with np.errstate(all="ignore"):
        for op, ref in [("neg", np.negative), ("abs", np.abs), ("sqrt", np.sqrt),
                        ("floor", np.floor), ("ceil", np.ceil), ("trunc", np.trunc),
                        ("rint", np.rint)]:
            same(run1(ir.Unary(op, x, d), [v]), ref(v))
    same(run1(ir.unary("lnot", x), [v]), v == 0)
    assert run1(ir.Unary("rint", x, d), [np.array([0.5, 1.5, 2.5, -0.5], d.np)]).tolist() == \
        [0.0, 2.0, 2.0, -0.0]


@pytest.mark.parametrize("d", INTS)
def test_unary_int(d):
    v = int_values(d)
    x = L(0, d)
    bits = 8 * d.itemsize
    wrap = lambda n: ((n - np.iinfo(d.np).min) % (1 << bits)) + np.iinfo(d.np).min  # noqa
    py = [int(i) for i in v]
    same(run1(ir.Unary("neg", x, d), [v]), np.array([wrap(-i) for i in py], d.np))
    same(run1(ir.Unary("abs", x, d), [v]), np.array([wrap(abs(i)) for i in py], d.np))
    same(run1(ir.Unary("bnot", x, d), [v]), np.array([wrap(~i) for i in py], d.np))
    for op in ("floor", "ceil", "trunc", "rint"):
        same(run1(ir.Unary(op, x, d), [v]), v)
    same(run1(ir.unary("lnot", x), [v]), v == 0)


def test_unary_bool():
    v = np.array([True, False, True])
    same(run1(ir.unary("bnot", L(0, dt.bool_)), [v]), ~v)
    same(run1(ir.unary("lnot", L(0, dt.bool_)), [v]), ~v)


# -- binary --------------------------------------------------------------------------------
def pairs(v):
    a = np.repeat(v, len(v))
    b = np.tile(v, len(v))
    return a, b


@pytest.mark.parametrize("d", FLOATS)
def test_binary_float(d):
    a, b = pairs(float_values(d)[:60])
    x, y = L(0, d), L(1, d)
    with np.errstate(all="ignore"):
        for op, ref in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                        ("div", np.divide), ("rem", np.fmod)]:
            same(run1(ir.Binary(op, x, y, d), [a, b]), ref(a, b))
    for op, ref in [("eq", np.equal), ("ne", np.not_equal), ("lt", np.less),
                    ("le", np.less_equal), ("gt", np.greater), ("ge", np.greater_equal)]:
        same(run1(ir.cmp(op, x, y), [a, b]), ref(a, b))
    # max/min: NaN-propagating; among equal values (+0/-0) the second operand
    mx = run1(ir.maximum(x, y), [a, b])
    mn = run1(ir.minimum(x, y), [a, b])
    for i in range(len(a)):
        p, q = float(a[i]), float(b[i])
        if math.isnan(p) or math.isnan(q):
            assert math.isnan(mx[i]) and math.isnan(mn[i])
        else:
            assert same(mx[i:i + 1], np.array([p if p > q else q], d.np)) is None
            assert same(mn[i:i + 1], np.array([p if p < q else q], d.np)) is None
    # exact f32 arithmetic: rounded once in f32, not via f64
    if d is dt.f32:
        p = np.array([16777216.0], np.float32)
        q = np.array([1.0], np.float32)
        assert run1(x + y, [p, q])[0] == np.float32(16777216.0)


def c_div(p, q, bits):
    if q == 0:
        return 0
    r = abs(p) // abs(q)
    r = r if (p < 0) == (q < 0) else -r
    return r


def c_rem(p, q):
    if q == 0:
        return 0
    return p - q * c_div(p, q, 0)


@pytest.mark.parametrize("d", INTS)
def test_binary_int(d):
    v = int_values(d, n=25)
    a, b = pairs(v)
    x, y = L(0, d), L(1, d)
    info = np.iinfo(d.np)
    bits = 8 * d.itemsize
    wrap = lambda n: ((n - info.min) % (1 << bits)) + info.min  # noqa
    pa, pb = [int(i) for i in a], [int(i) for i in b]

    def check(op, f):
        got = run1(ir.Binary(op, x, y, d), [a, b])
        same(got, np.array([wrap(f(p, q)) for p, q in zip(pa, pb)], d.np))

    check("add", lambda p, q: p + q)
    check("sub", lambda p, q: p - q)
    check("mul", lambda p, q: p * q)
    check("div", lambda p, q: c_div(p, q, bits))
    check("rem", c_rem)
    check("max", max)
    check("min", min)
    check("and", lambda p, q: p & q)
    check("or", lambda p, q: p | q)
    check("xor", lambda p, q: p ^ q)

    def shl(p, q):
        return 0 if not 0 <= q < bits else p << q

    def shr(p, q):
        if d.signed:
            return (-1 if p < 0 else 0) if not 0 <= q < bits else p >> q
        return 0 if not 0 <= q < bits else p >> q

    check("shl", shl)
    check("shr", shr)
    # shift counts around the width
    cnt = np.array([-1, 0, 1, bits - 1, bits, bits + 1] if d.signed else
                   [0, 1, bits - 1, bits, bits + 1], d.np)
    val = np.full(len(cnt), info.min if d.signed else info.max, d.np)
    same(run1(ir.Binary("shr", x, y, d), [val, cnt]),
         np.array([wrap(shr(int(p), int(q))) for p, q in zip(val, cnt)], d.np))
    for op, ref in [("eq", np.equal), ("lt", np.less), ("ge", np.greater_equal)]:
        same(run1(ir.cmp(op, x, y), [a, b]), ref(a, b))


def test_binary_bool_logic():
    a, b = pairs(np.array([True, False]))
    x, y = L(0, dt.bool_), L(1, dt.bool_)
    same(run1(ir.Binary("and", x, y, dt.bool_), [a, b]), a & b)
    same(run1(ir.Binary("or", x, y, dt.bool_), [a, b]), a | b)
    same(run1(ir.Binary("xor", x, y, dt.bool_), [a, b]), a ^ b)
    same(run1(ir.cmp("eq", x, y), [a, b]), a == b)


def test_select():
    c = np.array([True, False, True, False])
    a = np.array([1.0, 2.0, np.nan, -0.0], np.float32)
    b = np.array([-1.0, np.nan, 3.0, 0.0], np.float32)
    e = ir.select(L(0, dt.bool_), L(1, dt.f32), L(2, dt.f32))
    same(run1(e, [c, a, b]), np.where(c, a, b))


# -- casts ---------------------------------------------------------------------------------
def float_to_int_ref(f, d):
    if math.isnan(f):
        i = 0
    elif f >= 2.0 ** 63:
        i = 2 ** 63 - 1
    elif f < -2.0 ** 63:
        i = -2 ** 63
    else:
        i = int(f)              # truncates toward zero
    info = np.iinfo(d.np)
    return ((i - info.min) % (1 << (8 * d.itemsize))) + info.min


@pytest.mark.parametrize("src", FLOATS)
@pytest.mark.parametrize("d", INTS)
def test_cast_float_to_int(src, d):
    v = float_values(src)
    got = run1(ir.Cast(L(0, src), d), [v])
    same(got, np.array([float_to_int_ref(float(f), d) for f in v], d.np))
    assert run1(ir.Cast(L(0, src), d), [np.array([-1.0, 300.0, -0.9], src.np)]).tolist() == \
        [float_to_int_ref(-1.0, d), float_to_int_ref(300.0, d), 0]


@pytest.mark.parametrize("d", INTS)
def test_cast_int_int_and_float(d):
    v = int_values(d)
    for t in INTS:
        same(run1(ir.Cast(L(0, d), t), [v]), v.astype(t.np))
    same(run1(ir.Cast(L(0, d), dt.f32), [v]), v.astype(np.float32))
    same(run1(ir.Cast(L(0, d), dt.f64), [v]), v.astype(np.float64))
    same(run1(ir.Cast(L(0, d), dt.bool_), [v]), v != 0)


def test_cast_bool_and_float_float():
    b = np.array([True, False])
    for t in INTS + FLOATS:
        same(run1(ir.Cast(L(0, dt.bool_), t), [b]), b.astype(t.np))
    f = float_values(dt.f64)
    with np.errstate(all="ignore"):
        same(run1(ir.Cast(L(0, dt.f64), dt.f32), [f]), f.astype(np.float32))
    same(run1(ir.Cast(L(0, dt.f64), dt.bool_), [f]), f != 0)   # NaN -> True
    g = float_values(dt.f32)
    same(run1(ir.Cast(L(0, dt.f32), dt.f64), [g]), g.astype(np.float64))


@pytest.mark.parametrize("low", [dt.f16, dt.bf16])
def test_cast_to_half_rounds(low):
    v = np.array([1 + 2 ** -11, 1 + 2 ** -8 + 2 ** -9, 70000.0, 1e-8, -3.14159], np.float32)
    got = run1(ir.Cast(L(0, dt.f32), low), [v], out_dtype=dt.f32)
    with np.errstate(over="ignore"):
        same(got, v.astype(low.np).astype(np.float32))


def test_bitcast():
    f = float_values(dt.f32)
    same(run1(ir.bitcast(L(0, dt.f32), dt.i32), [f]), f.view(np.int32))
    i = int_values(dt.i64)
    same(run1(ir.bitcast(L(0, dt.i64), dt.f64), [i]), i.view(np.float64))
    h = np.array([1.5, -0.0, np.inf, 65504], np.float16)
    same(run1(ir.bitcast(L(0, dt.f16), dt.i16), [h]), h.view(np.int16))
    bits = np.array([0x3F80, -0x8000, 0x7F80], np.int16)
    same(run1(ir.bitcast(L(0, dt.i16), dt.bf16), [bits], out_dtype=dt.bf16),
         bits.view(ml_dtypes.bfloat16))


# -- f16 / bf16 compute in f32 --------------------------------------------------------------
@pytest.mark.parametrize("low", [dt.f16, dt.bf16])
def test_half_computes_in_f32_and_rounds_on_store(low):
    rng = np.random.default_rng(3)
    a = rng.standard_normal(500).astype(low.np)
    b = rng.standard_normal(500).astype(low.np)
    x, y = L(0, low), L(1, low)
    assert ir.compute_dtype(low) is dt.f32
    e = (x * y + x) / (y * y + 1.0)            # nodes are f32 (the compute dtype)
    got = run1(e, [a, b], out_dtype=low)
    af, bf = a.astype(np.float32), b.astype(np.float32)
    ref = ((af * bf + af) / (bf * bf + np.float32(1))).astype(low.np)
    assert got.dtype == low.np
    same(got, ref)
    with pytest.raises(TypeError):
        run1(x + 1.0, [a], out_dtype=dt.f64)


# -- reductions ----------------------------------------------------------------------------
def reduce_kernel(shape, axis, d, op, epi=None, out_dtype=None, strides=None):
    strides = strides or tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
    cd = ir.compute_dtype(d)
    return ir.Reduce(tuple(shape), axis, (ir.BufferView(d, strides),), L(0, d), op,
                     epi if epi is not None else ir.Acc(cd), out_dtype or d)


@pytest.mark.parametrize("d", [dt.f32, dt.f64])
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
def test_reduce_float(d, op):
    rng = np.random.default_rng(4)
    a = (rng.standard_normal((3, 5, 7)) + 1).astype(d.np)
    ref = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}[op]
    for axis in range(3):
        got = evaluate(reduce_kernel(a.shape, axis, d, op), [a])[0]
        exp = ref(a.astype(np.float64), axis=axis, keepdims=True)
        np.testing.assert_allclose(got, exp, rtol=1e-5 if d is dt.f32 else 1e-12)
        assert got.shape == exp.shape and got.dtype == d.np
    # NaN propagates through max/min (and sum/prod)
    a[1, 2, 3] = np.nan
    got = evaluate(reduce_kernel(a.shape, 2, d, op), [a])[0]
    assert np.isnan(got[1, 2, 0]) and np.isfinite(got[0]).all()
    # an empty axis gives the identity
    e = np.zeros((2, 0), d.np)
    got = evaluate(reduce_kernel((2, 0), 1, d, op), [e])[0]
    ident = {"sum": 0.0, "prod": 1.0, "max": -np.inf, "min": np.inf}[op]
    same(got, np.full((2, 1), ident, d.np))


@pytest.mark.parametrize("d", [dt.i8, dt.i32, dt.i64, dt.u8])
def test_reduce_int_wraps(d):
    a = int_values(d, n=60)[:60].reshape(6, 10)
    info = np.iinfo(d.np)
    bits = 8 * d.itemsize
    wrap = lambda n: ((n - info.min) % (1 << bits)) + info.min  # noqa
    for op in ["sum", "prod", "max", "min"]:
        got = evaluate(reduce_kernel(a.shape, 1, d, op), [a])[0]
        exp = []
        for row in a.tolist():
            if op == "sum":
                exp.append(wrap(sum(row)))
            elif op == "prod":
                exp.append(wrap(math.prod(row)))
            else:
                exp.append(max(row) if op == "max" else min(row))
        same(got, np.array(exp, d.np).reshape(6, 1))
    got = evaluate(reduce_kernel((3, 0), 1, d, "max"), [np.zeros(0, d.np)])[0]
    same(got, np.full((3, 1), info.min, d.np))


def test_reduce_half_accumulates_in_f32():
    a = np.full(4096, 1.0, np.float16)       # an f16 accumulator would stop at 2048
    got = evaluate(reduce_kernel((1, 4096), 1, dt.f16, "sum", epi=ir.Acc(dt.f32) / 4096.0),
                   [a])[0]
    assert got.dtype == np.float16 and got[0, 0] == 1.0
    got = evaluate(reduce_kernel((1, 4096), 1, dt.f16, "sum", out_dtype=dt.f32,
                                 epi=ir.Acc(dt.f32)), [a])[0]
    assert got[0, 0] == 4096.0


def test_reduce_bool():
    a = np.array([[True, False], [False, False], [True, True]])
    k = reduce_kernel(a.shape, 1, dt.bool_, "max")
    same(evaluate(k, [a])[0], a.any(axis=1, keepdims=True))
    k = reduce_kernel(a.shape, 1, dt.bool_, "min")
    same(evaluate(k, [a])[0], a.all(axis=1, keepdims=True))


def test_reduce_prologue_epilogue_softmax():
    """log-sum-exp style: max over a permuted view, then an epilogue reading another input
    at the kept positions with the reduced coordinate 0."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((4, 6)).astype(np.float64)       # reduce a.T over its dim 0
    bias = rng.standard_normal(6)
    x = L(0, dt.f64)
    # iteration space (4, 6) over a.T viewed as a[j, i]: shape (4 rows of a.T?)  use a.T: (6, 4)
    k = ir.Reduce((4, 6), 0, (ir.BufferView(dt.f64, (6, 1)), ir.BufferView(dt.f64, (0, 1))),
                  x * x, "sum", ir.Acc(dt.f64) + L(1, dt.f64) * ir.Cast(ir.Index(0) + ir.Const(
                      3, dt.i64), dt.f64), dt.f64)
    got = evaluate(k, [a.reshape(-1), bias])[0]
    exp = (a * a).sum(axis=0, keepdims=True) + bias * 3.0
    np.testing.assert_allclose(got, exp, rtol=1e-12)
    assert got.shape == (1, 6)
    # a strided (transposed) prologue view, reduced along the last axis
    k = ir.Reduce((6, 4), 1, (ir.BufferView(dt.f64, (1, 6)),), x, "max",
                  ir.Acc(dt.f64) * 2.0, dt.f64)
    got = evaluate(k, [a.reshape(-1)])[0]
    np.testing.assert_array_equal(got, a.T.max(axis=1, keepdims=True) * 2.0)


def test_errors():
    x = L(0, dt.f32)
    k = ir.Elementwise((2,), (ir.BufferView(dt.f32, (1,)),), (x,), (dt.f32,))
    with pytest.raises(ValueError):
        evaluate(k, [])
    k = ir.Elementwise((2,), (), (ir.Acc(dt.f32),), (dt.f32,))
    with pytest.raises(ValueError):
        evaluate(k, [])
    k = ir.Elementwise((2,), (), (ir.Arg(0, dt.f32),), (dt.f32,), (dt.f32,))
    with pytest.raises(ValueError):
        evaluate(k, [], [])
    with pytest.raises(TypeError):
        evaluate(object(), [])
