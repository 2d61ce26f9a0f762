"""Generated C kernels (ember/kernel/c) against independent NumPy / pure-Python computations:
every node kind and dtype, views folded into strides (broadcast, flips, permutations,
offsets), casts of special values, reductions in every mode."""
import ctypes
import math

import ml_dtypes
import numpy as np
import pytest

from ember import dtype as dt
from ember.kernel import ir
from ember.kernel.c.render import Options, render
from ember.kernel.c.runtime import CpuKernelRuntime

ALL = list(dt.ALL)
INTS = [dt.i64, dt.i32, dt.i16, dt.i8, dt.u8]


@pytest.fixture(autouse=True)
def _quiet_numpy():
    # the NumPy references overflow on purpose (casts of inf, 1e30 -> f16, ...)
    with np.errstate(all="ignore"):
        yield


# -- helpers --------------------------------------------------------------------------------
def view(arr, base=None):
    """The BufferView of a NumPy array (its own strides, any sign); with ``base``, of the
    same elements addressed from ``base``'s first element (an offset)."""
    item = arr.itemsize
    st = tuple(s // item for s in arr.strides)
    if base is None:
        return ir.BufferView(dt.from_numpy(arr.dtype), st, 0), arr
    off = (arr.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // item
    return ir.BufferView(dt.from_numpy(arr.dtype), st, off), base


def ew(rt, shape, arrays, fn, out_dtypes=None, args=(), arg_dtypes=(), options=None):
    """Build, compile and run an elementwise kernel: ``fn(*loads) -> tuple of exprs``."""
    vs = [view(a) if not isinstance(a, tuple) else view(*a) for a in arrays]
    views = tuple(v for v, _ in vs)
    ins = [a for _, a in vs]
    loads = [ir.Load(i, v.dtype) for i, v in enumerate(views)]
    exprs = fn(*loads)
    if not isinstance(exprs, tuple):
        exprs = (exprs,)
    out_dtypes = out_dtypes or tuple(ir.compute_dtype(e.dtype) for e in exprs)
    k = ir.Elementwise(tuple(shape), views, exprs, tuple(out_dtypes), tuple(arg_dtypes))
    p = rt.compile(k)
    return rt.launch(p, ins, list(args))


def bits_equal(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    if a.dtype.kind == "f" or a.dtype == ml_dtypes.bfloat16:
        an, bn = np.isnan(a.astype(np.float64)), np.isnan(b.astype(np.float64))
        assert (an == bn).all(), "NaN positions differ"
        ua = a.view(f"u{a.itemsize}")[~an]
        ub = b.view(f"u{b.itemsize}")[~bn]
        bad = np.nonzero(ua != ub)[0]
        assert bad.size == 0, \
            f"{bad.size} values differ, e.g. {a[~an][bad[:5]]} vs {b[~bn][bad[:5]]}"
    else:
        np.testing.assert_array_equal(a, b)


def int_values(d, n=120, seed=0):
    info = np.iinfo(d.np)
    rng = np.random.default_rng(seed)
    edge = [info.min, info.min + 1, -1, 0, 1, 2, 7, 8, 63, 64, info.max - 1, info.max]
    edge = [v for v in edge if info.min <= v <= info.max]
    rnd = rng.integers(info.min, info.max, size=n, endpoint=True, dtype=d.np)
    small = rng.integers(max(info.min, -9), 10, size=n).astype(d.np)
    return np.concatenate([np.array(edge, d.np), rnd, small])


def float_values(npd, n=100, seed=1):
    fi = np.finfo(np.float64 if npd == ml_dtypes.bfloat16 else npd)
    v = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.7, -3.7, np.inf, -np.inf, np.nan,
         1e10, -1e10, 123.456, 2.0 ** 62, -2.0 ** 63, 2.0 ** 63, 2.0 ** 64, 1e30, -1e30,
         255.9, 256.0, -129.5, 65504.0, 65520.0, 1e-8, -1e-40, 5e-324, 1e300]
    rng = np.random.default_rng(seed)
    with np.errstate(over="ignore"):
        vals = np.concatenate([np.array(v, np.float64), rng.standard_normal(n) * 100,
                               np.array([float(fi.max), float(fi.tiny)])])
        return vals.astype(npd)


# -- elementwise: views ---------------------------------------------------------------------
def test_contiguous_chain_broadcast_and_args(rt):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 7, 33)).astype(np.float32)
    b = rng.standard_normal((7, 1)).astype(np.float32)
    c = rng.standard_normal(33).astype(np.float32)
    shape = (5, 7, 33)
    (out,) = ew(rt, shape, [a, np.broadcast_to(b, shape), np.broadcast_to(c, shape)],
                lambda x, y, z: (x + y) * z - x / (z + ir.Arg(0, dt.f32)),
                args=[0.25], arg_dtypes=[dt.f32])
    with np.errstate(all="ignore"):
        ref = (a + b) * c - a / (c + np.float32(0.25))
    bits_equal(out, ref)


def test_flat_path_and_scalar_broadcast(rt):
    a = np.linspace(-3, 3, 100003).astype(np.float64)
    s = np.array([2.5])
    (out,) = ew(rt, (100003,), [a, np.broadcast_to(s, (100003,))], lambda x, y: x * y + x)
    bits_equal(out, a * 2.5 + a)


def test_flips_permutations_offsets(rt):
    rng = np.random.default_rng(1)
    base = rng.standard_normal((6, 9, 10)).astype(np.float32)
    flipped = base[::-1, :, ::-2]                 # negative strides, step 2
    perm = base.transpose(2, 0, 1)[:5, :, 1:8:3]   # permuted, sliced
    shape = (6, 9, 5)
    x = flipped                                                  # (6, 9, 5)
    y = base.transpose(1, 2, 0)[:, 2:7, :].transpose(2, 0, 1)    # (6, 9, 5), permuted
    z = base[0:6, 0:9, 3:8]                      # addressed from base's start: an offset
    (out,) = ew(rt, shape, [x, y, (z, base)], lambda p, q, r: p * q - r)
    bits_equal(out, x * y - z)
    (out2,) = ew(rt, perm.shape, [perm], lambda p: p + p)
    bits_equal(out2, perm + perm)


@pytest.mark.parametrize("d", ALL, ids=lambda d: d.short)
def test_binary_ops_every_dtype(rt, d):
    """add/sub/mul/max/min/comparisons/select for one dtype, with broadcasting, one kernel."""
    npd = d.np
    if d.is_bool:
        a = np.array([True, False, True, False] * 8)
        b = np.array([True, True, False, False])
    elif d.is_int:
        a = int_values(d)[:96]
        b = int_values(d, seed=3)[:24]
    else:
        a = float_values(npd)[:96]
        b = float_values(npd, seed=2)[-24:]
    shape = (len(a) // len(b), len(b))
    A, B = a.reshape(shape), np.broadcast_to(b, shape)

    def fn(x, y):
        out = []
        if not d.is_bool:
            out += [ir.cast(x, x.dtype) + ir.cast(y, y.dtype),
                    ir.cast(x, x.dtype) - ir.cast(y, y.dtype),
                    ir.cast(x, x.dtype) * ir.cast(y, y.dtype)]
        xc, yc = ir.cast(x, x.dtype), ir.cast(y, y.dtype)
        out += [ir.maximum(xc, yc), ir.minimum(xc, yc)]
        out += [ir.cmp(op, xc, yc) for op in ("eq", "ne", "lt", "le", "gt", "ge")]
        out.append(ir.select(ir.cmp("gt", xc, yc), xc, yc))
        return tuple(out)

    n_arith = 0 if d.is_bool else 3
    outs = ew(rt, shape, [A, B], fn,
              out_dtypes=(d,) * (n_arith + 2) + (dt.bool_,) * 6 + (d,))
    with np.errstate(all="ignore"):
        if d in (dt.f16, dt.bf16):
            xa, xb = A.astype(np.float32), B.astype(np.float32)
            rnd = lambda v: v.astype(npd)   # noqa: E731 - one rounding of the f32 result
        else:
            xa, xb = A, B
            rnd = lambda v: v.astype(npd)   # noqa: E731
        refs = []
        if not d.is_bool:
            refs += [rnd(xa + xb), rnd(xa - xb), rnd(xa * xb)]
        refs += [rnd(np.maximum(xa, xb)), rnd(np.minimum(xa, xb))]
        refs += [xa == xb, xa != xb, xa < xb, xa <= xb, xa > xb, xa >= xb]
        refs.append(rnd(np.where(xa > xb, xa, xb)))
    for o, r in zip(outs, refs):
        bits_equal(o, r)


def test_nan_max_min_signed_zero(rt):
    a = np.array([np.nan, 1.0, np.nan, -0.0, 0.0, 2.0, -np.inf, 3.0], np.float32)
    b = np.array([1.0, np.nan, np.nan, 0.0, -0.0, 2.0, np.nan, -np.inf], np.float32)
    mx, mn = ew(rt, (8,), [a, b], lambda x, y: (ir.maximum(x, y), ir.minimum(x, y)))
    bits_equal(mx, np.maximum(a, b))     # NumPy: NaN wins; on ties the second operand
    bits_equal(mn, np.minimum(a, b))
    assert np.signbit(mx[3]) == np.signbit(b[3]) and np.signbit(mx[4]) == np.signbit(b[4])


def _trunc_div(x, y, d):
    if y == 0:
        return 0
    q = abs(x) // abs(y)
    q = q if (x >= 0) == (y >= 0) else -q
    return _wrap(q, d)


def _wrap(v, d):
    bits = 8 * d.itemsize
    v &= (1 << bits) - 1
    if d.signed and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


@pytest.mark.parametrize("d", INTS, ids=lambda d: d.short)
def test_int_div_rem_shift_by_python(rt, d):
    a = int_values(d, n=60)
    b = int_values(d, n=60, seed=5)
    b[:10] = 0
    b[10:14] = np.array([-1, 1, -1, 2]).astype(d.np) if d.signed else 1
    a[10] = np.iinfo(d.np).min
    cnt = np.resize(np.array([0, 1, 3, 7, 8, 15, 16, 31, 32, 63, 64, 100, -1, -64], np.int64),
                    len(a)).astype(d.np)
    outs = ew(rt, (len(a),), [a, b, cnt],
              lambda x, y, c: (ir.Binary("div", x, y, d), ir.Binary("rem", x, y, d),
                               ir.Binary("shl", x, c, d), ir.Binary("shr", x, c, d),
                               ir.unary("neg", x), ir.unary("abs", x), ir.unary("bnot", x),
                               ir.Binary("and", x, y, d), ir.Binary("or", x, y, d),
                               ir.Binary("xor", x, y, d), ir.unary("lnot", x)),
              out_dtypes=(d,) * 10 + (dt.bool_,))
    bits = 8 * d.itemsize
    ref = {0: [], 1: [], 2: [], 3: [], 4: [], 5: [], 6: []}
    for x, y, c in zip(a.tolist(), b.tolist(), cnt.tolist()):
        ref[0].append(_trunc_div(x, y, d))
        if y == 0:
            ref[1].append(0)
        else:
            r = abs(x) % abs(y)
            ref[1].append(_wrap(r if x >= 0 else -r, d))
        ref[2].append(_wrap(x << c, d) if 0 <= c < bits else 0)
        ref[3].append(x >> c if 0 <= c < bits else (-1 if x < 0 else 0))
        ref[4].append(_wrap(-x, d))
        ref[5].append(_wrap(abs(x), d))
        ref[6].append(_wrap(~x, d))
    for i in range(7):
        np.testing.assert_array_equal(outs[i], np.array(ref[i], dtype=object).astype(d.np),
                                      err_msg=f"output {i}")
    np.testing.assert_array_equal(outs[7], a & b)
    np.testing.assert_array_equal(outs[8], a | b)
    np.testing.assert_array_equal(outs[9], a ^ b)
    np.testing.assert_array_equal(outs[10], a == 0)


@pytest.mark.parametrize("d", [dt.f64, dt.f32, dt.f16, dt.bf16], ids=lambda d: d.short)
def test_float_unary_and_div_rem(rt, d):
    a = float_values(d.np)
    b = float_values(d.np, seed=7)[::-1].copy()
    b[:3] = 0
    names = ["neg", "abs", "sqrt", "floor", "ceil", "trunc", "rint"]

    def fn(x, y):
        xc, yc = ir.cast(x, x.dtype), ir.cast(y, y.dtype)
        return tuple(ir.unary(n, xc) for n in names) + (
            xc / yc, ir.Binary("rem", xc, yc, xc.dtype), ir.unary("lnot", xc))

    outs = ew(rt, (len(a),), [a, b], fn, out_dtypes=(d,) * 9 + (dt.bool_,))
    wd = np.float32 if d in (dt.f16, dt.bf16) else d.np
    xa, xb = a.astype(wd), b.astype(wd)
    with np.errstate(all="ignore"):
        refs = [-xa, np.abs(xa), np.sqrt(xa), np.floor(xa), np.ceil(xa), np.trunc(xa),
                np.rint(xa), xa / xb, np.fmod(xa, xb)]
    for i, r in enumerate(refs):
        bits_equal(outs[i], r.astype(d.np))
    np.testing.assert_array_equal(outs[9], xa == 0)


def _ref_cast(x, src, dst):
    """Independent reference of Cast semantics (see ember.kernel.interpret's contract)."""
    if dst.is_bool:
        return np.array([v != 0 for v in x.astype(np.float64 if src.is_float else object)
                         .tolist()], bool) if src is not dt.bool_ else x.copy()
    if src.is_float and dst.is_int:
        out = []
        for v in x.astype(np.float64).tolist():
            if math.isnan(v):
                i = 0
            elif v >= 2.0 ** 63:
                i = 2 ** 63 - 1
            elif v < -2.0 ** 63:
                i = -2 ** 63
            else:
                i = int(v)        # truncates toward zero
            out.append(_wrap(i, dst))
        return np.array(out, dtype=object).astype(dst.np)
    if dst is dt.bf16 and src is dt.f64:
        return x.astype(np.float32).astype(ml_dtypes.bfloat16)
    if dst is dt.bf16 and src.is_int:
        return x.astype(np.float32).astype(ml_dtypes.bfloat16)
    if dst is dt.f16 and src.is_int:
        return x.astype(np.float64).astype(np.float16)
    with np.errstate(all="ignore"):
        return x.astype(dst.np)


@pytest.mark.parametrize("src", ALL, ids=lambda d: d.short)
def test_casts_from(rt, src):
    if src.is_float:
        x = float_values(src.np)
    elif src.is_bool:
        x = np.array([True, False, True])
    else:
        x = int_values(src, n=40)
    dsts = [d for d in ALL if d is not src]
    outs = ew(rt, (len(x),), [x], lambda v: tuple(ir.Cast(v, d) for d in dsts),
              out_dtypes=tuple(dsts))
    for o, d in zip(outs, dsts):
        bits_equal(o, _ref_cast(x, src, d))


def test_casts_float_to_int_by_bits(tmp_path, monkeypatch):
    """The float -> int conversions written on the bits (the path without AVX-512DQ)."""
    monkeypatch.setenv("EMBER_CFLAGS", "-DEMBER_NO_HW_CVT")
    r = CpuKernelRuntime(cache_root=tmp_path, autotune=False)
    if not r.available():
        pytest.skip(r.why_unavailable())
    for src in (dt.f32, dt.f64):
        x = float_values(src.np)
        x = np.concatenate([x, np.array([2.0 ** 31, -2.0 ** 31, 2.0 ** 31 - 128, 2.0 ** 32 + 512,
                                         -2.0 ** 40 - 2 ** 20, 2.0 ** 62 * 1.5, 0.999, -0.999,
                                         2.0 ** 23 + 1, 2.0 ** 52 + 1], src.np)])
        outs = ew(r, (len(x),), [x], lambda v: tuple(ir.Cast(v, d) for d in INTS),
                  out_dtypes=tuple(INTS))
        for o, d in zip(outs, INTS):
            bits_equal(o, _ref_cast(x, src, d))


def test_cast_chain_rounds_to_f16_inside(rt):
    """Cast(x, f16) in the middle of a chain rounds (its value is the f16 number)."""
    x = np.array([1.0 + 2 ** -11 + 2 ** -20, 70000.0, 1e-8, np.nan, 0.1], np.float64)
    (o,) = ew(rt, (5,), [x], lambda v: ir.Cast(ir.Cast(v, dt.f16), dt.f64) * 3.0)
    bits_equal(o, x.astype(np.float16).astype(np.float64) * 3.0)


def test_bitcasts(rt):
    f = float_values(np.float32)
    d = float_values(np.float64)
    h = float_values(np.float16)
    bf = float_values(ml_dtypes.bfloat16)
    n = len(f)
    outs = ew(rt, (n,), [f, d[:n], h[:n], bf[:n]],
              lambda a, b, c, e: (ir.bitcast(a, dt.i32), ir.bitcast(b, dt.i64),
                                  ir.bitcast(c, dt.i16), ir.bitcast(e, dt.i16)),
              out_dtypes=(dt.i32, dt.i64, dt.i16, dt.i16))
    nan = lambda v: np.isnan(v.astype(np.float64))   # noqa: E731 - NaN bits may be quieted
    for o, src in zip(outs, [f, d[:n], h[:n], bf[:n]]):
        m = ~nan(src)
        np.testing.assert_array_equal(o[m], src.view(o.dtype)[m])
    i = np.array([0, 1, -1, 0x7f800000, 0x3f800000, -8388608, 0x00000001], np.int32)
    (back,) = ew(rt, (7,), [i], lambda v: ir.bitcast(v, dt.f32), out_dtypes=(dt.f32,))
    bits_equal(back, i.view(np.float32))
    i16 = np.array([0, 1, 0x3c00, 0x7bff, -1024, 0x0001, 0x3f80], np.int16)
    hb, bb = ew(rt, (7,), [i16], lambda v: (ir.bitcast(v, dt.f16), ir.bitcast(v, dt.bf16)),
                out_dtypes=(dt.f16, dt.bf16))
    bits_equal(hb, i16.view(np.float16))
    bits_equal(bb, i16.view(ml_dtypes.bfloat16))


def test_index_and_consts(rt):
    shape = (3, 1, 4)
    outs = ew(rt, shape, [],
              lambda: (ir.Index(0) * 100 + ir.Index(1) * 10 + ir.Index(2),
                       ir.Cast(ir.Index(2), dt.f32) * ir.const(-0.0, dt.f32)),
              out_dtypes=(dt.i64, dt.f32))
    i, j, k = np.indices(shape)
    np.testing.assert_array_equal(outs[0], i * 100 + j * 10 + k)
    assert np.signbit(outs[1]).all()
    # special constants of every kind
    outs = ew(rt, (1,), [], lambda: (ir.Const(float("nan"), dt.f32), ir.Const(-math.inf, dt.f64),
                                     ir.Const(-2 ** 63, dt.i64), ir.Const(300, dt.u8),
                                     ir.Const(0.1, dt.f16), ir.Const(True, dt.bool_)),
              out_dtypes=(dt.f32, dt.f64, dt.i64, dt.u8, dt.f16, dt.bool_))
    assert np.isnan(outs[0][0]) and outs[1][0] == -np.inf and outs[2][0] == -2 ** 63
    assert outs[3][0] == 44 and outs[4][0] == np.float16(0.1) and outs[5][0]


def test_int_args_and_float_args(rt):
    x = np.arange(10, dtype=np.int32)
    o1, o2 = ew(rt, (10,), [x], lambda v: (v * ir.Arg(0, dt.i32),
                                           ir.Cast(v, dt.f64) + ir.Arg(1, dt.f64)),
                args=[-3, 0.1], arg_dtypes=[dt.i32, dt.f64])
    np.testing.assert_array_equal(o1, x * -3)
    bits_equal(o2, x.astype(np.float64) + 0.1)


def test_empty_and_zero_d(rt):
    (o,) = ew(rt, (0, 5), [np.zeros((0, 5), np.float32)], lambda v: v + 1.0)
    assert o.shape == (0, 5)
    (o,) = ew(rt, (), [np.array(2.0, np.float32)], lambda v: v * 3.0)
    assert o.shape == () and o == 6.0


def test_half_by_bits_fallback(rt):
    """The f16 conversions written with bit manipulation (no _Float16) agree with NumPy."""
    rng = np.random.default_rng(3)
    x32 = np.concatenate([
        float_values(np.float32),
        rng.standard_normal(3000).astype(np.float32) * np.float32(1e-5),
        np.array([65519.996, 65520.0, 2 ** -24, 2 ** -25, 2 ** -25 * 1.0000001,
                  3 * 2 ** -26, 2 ** -14 * (1 - 2 ** -11)], np.float32)])
    x64 = x32.astype(np.float64) * (1 + 2 ** -30)
    h = np.frombuffer(np.arange(65536, dtype=np.uint16).tobytes(), np.float16)
    views = (ir.BufferView(dt.f32, (1,)), ir.BufferView(dt.f64, (1,)))
    k = ir.Elementwise((len(x32),), views,
                       (ir.Load(0, dt.f32), ir.Cast(ir.Load(1, dt.f64), dt.f16)),
                       (dt.f16, dt.f16))
    k2 = ir.Elementwise((65536,), (ir.BufferView(dt.f16, (1,)),),
                        (ir.cast(ir.Load(0, dt.f16), dt.f32),), (dt.f32,))
    for kern, ins, refs in ((k, [x32, x64], [x32.astype(np.float16), x64.astype(np.float16)]),
                            (k2, [h], [h.astype(np.float32)])):
        src = render(kern, Options(float16=False)).source
        assert "_Float16" not in src
        _, fn = rt.compiler.load(src)
        outs = [np.empty(kern.shape, d.np) for d in kern.out_dtypes]
        ptrs = (ctypes.c_void_p * (len(ins) + len(outs)))(
            *[a.ctypes.data for a in ins + outs])
        fn(ptrs, None, 1, 0)
        for o, r in zip(outs, refs):
            bits_equal(o, r)


def test_bf16_store_rounding_and_nan(rt):
    u = np.array([0x3f808000, 0x3f818000, 0x3f808001, 0x7f7fffff, 0x7fc00001, 0xff800001,
                  0x00000001, 0x80008000], np.uint32)
    x = u.view(np.float32)
    (o,) = ew(rt, (len(x),), [x], lambda v: v, out_dtypes=(dt.bf16,))
    bits_equal(o, x.astype(ml_dtypes.bfloat16))


def test_variants_same_results(rt):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((33, 65)).astype(np.float32)[:, ::-1]
    views = (view(a)[0],)
    k = ir.Elementwise(a.shape, views, (ir.Load(0, dt.f32) * 2.0 + 1.0,), (dt.f32,))
    ref = a * np.float32(2.0) + np.float32(1.0)
    from ember.kernel.autotune import Variant
    for v in (Variant(), Variant(idx32=True), Variant(unroll=4), Variant(threads=2, chunk=7),
              Variant(wide=True)):
        p = rt.compile(k, v)
        out = np.empty(a.shape, np.float32)
        rt.launch_into(p, [a], [], [out])
        bits_equal(out, ref)


def test_bad_views_are_refused(rt):
    a = np.zeros(10, np.float32)
    k = ir.Elementwise((11,), (ir.BufferView(dt.f32, (1,)),), (ir.Load(0, dt.f32),), (dt.f32,))
    p = rt.compile(k)
    with pytest.raises(Exception, match="reads elements 0..10"):
        rt.launch(p, [a])
    with pytest.raises(Exception, match="dtype"):
        rt.launch(p, [np.zeros(11, np.float64)])
    with pytest.raises(TypeError, match="share a dtype"):
        render(ir.Elementwise((2,), (ir.BufferView(dt.f32, (1,)), ir.BufferView(dt.i32, (1,))),
                              (ir.Binary("add", ir.Load(0, dt.f32), ir.Load(1, dt.i32),
                                         dt.f32),), (dt.f32,)))


# -- reductions -----------------------------------------------------------------------------
def red(rt, x, axis, op, epi=None, out_dtype=None, extra=(), pro=None):
    """Reduce ``x`` (a NumPy view) over ``axis``; returns (output, program)."""
    v, arr = view(x)
    views = (v,) + tuple(view(e)[0] for e in extra)
    L = ir.Load(0, v.dtype)
    pe = pro(L) if pro else ir.cast(L, v.dtype)
    acc = ir.Acc(ir.compute_dtype(pe.dtype))
    ep = epi(acc, *[ir.Load(i + 1, vv.dtype) for i, vv in enumerate(views[1:])]) if epi else acc
    k = ir.Reduce(x.shape, axis, views, pe, op, ep, out_dtype or ir.compute_dtype(ep.dtype))
    p = rt.compile(k)
    return rt.launch(p, [arr] + list(extra))[0], p


def _pairwise_row(x):
    """The renderer's float sum over a 1-d array, replayed in NumPy (bit-exact reference)."""
    f = x.dtype.type
    if len(x) == 0:
        return f(0.0)
    stack, nblk = [], 0
    for k0 in range(0, len(x), 128):
        blk = x[k0:k0 + 128]
        n8 = len(blk) // 8 * 8
        acc = np.full(8, -0.0, x.dtype)
        for row in blk[:n8].reshape(-1, 8):
            acc = acc + row
        s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
        for t in blk[n8:]:
            s = s + t
        nblk += 1
        c = nblk
        while c & 1 == 0:
            s = stack.pop() + s
            c >>= 1
        stack.append(s)
    s = stack.pop()
    while stack:
        s = stack.pop() + s
    return s


def _pairwise_col(x):
    """Column mode: per lane, sequential blocks of 128 combined by the same counter."""
    f = x.dtype.type
    R = x.shape[0]
    if R == 0:
        return np.zeros(x.shape[1:], x.dtype)
    stack, nblk = [], 0
    for k0 in range(0, R, 128):
        s = np.full(x.shape[1:], -0.0, x.dtype)
        for row in x[k0:k0 + 128]:
            s = s + row
        nblk += 1
        c = nblk
        while c & 1 == 0:
            s = stack.pop() + s
            c >>= 1
        stack.append(s)
    s = stack.pop()
    while stack:
        s = stack.pop() + s
    return s


@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
def test_reduce_ops_axes_f64(rt, op, axis):
    rng = np.random.default_rng(axis)
    x = rng.uniform(0.5, 1.5, (7, 130, 9))
    x[3, 5, 2] = np.nan if op in ("max", "min") else x[3, 5, 2]
    out, p = red(rt, x, axis, op)
    f = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}[op]
    ref = f(x, axis=axis, keepdims=True)
    if op in ("max", "min"):
        bits_equal(out, ref)
    else:
        np.testing.assert_allclose(out, ref, rtol=1e-13)


def test_reduce_float_sum_modes_bit_exact(rt):
    """Row, column and split modes replay the documented pairwise tree exactly."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((5, 1000)).astype(np.float32)
    out, p = red(rt, x, 1, "sum")
    assert p.mode == "row"
    bits_equal(out[:, 0], np.array([_pairwise_row(r) for r in x]))
    xt = np.ascontiguousarray(rng.standard_normal((700, 70)).astype(np.float32))
    out, p = red(rt, xt, 0, "sum")
    assert p.mode == "column"
    bits_equal(out[0], _pairwise_col(xt))
    # column mode over a long axis with few lanes: segments of 1024 rows reduce in
    # parallel (a partial last one) and combine in the same tree, on any thread count
    long = np.ascontiguousarray(rng.standard_normal((5000, 24)).astype(np.float32))
    out, p = red(rt, long, 0, "sum")
    assert p.mode == "column" and render(p.kernel).items == 5        # 5 segments, 1 item
    bits_equal(out[0], _pairwise_col(long))
    from ember.kernel.autotune import Variant
    p1 = rt.compile(p.kernel, Variant(threads=1))
    o1 = np.empty_like(out)
    rt.launch_into(p1, [long], [], [o1])
    bits_equal(o1, out)
    big = rng.standard_normal((2, 70000)).astype(np.float32)
    out, p = red(rt, big, 1, "sum")
    assert p.mode == "split"
    bits_equal(out[:, 0], np.array([_pairwise_row(r) for r in big]))
    np.testing.assert_allclose(out[:, 0], big.astype(np.float64).sum(1), rtol=2e-5)
    # the thread count does not change the bits
    from ember.kernel.autotune import Variant
    p1 = rt.compile(p.kernel, Variant(threads=1))
    o1 = np.empty_like(out)
    rt.launch_into(p1, [big], [], [o1])
    bits_equal(o1, out)


def test_reduce_permuted_input_and_epilogue(rt):
    """Layer-norm-like: mean over the last dim of a swapped view, epilogue with a load."""
    rng = np.random.default_rng(8)
    base = rng.standard_normal((6, 40, 16)).astype(np.float32)
    x = base.transpose(0, 2, 1)                       # (6, 16, 40), reduced dim strided
    bias = rng.standard_normal((6, 16, 1)).astype(np.float32)
    out, p = red(rt, x, 2, "sum", epi=lambda acc, b: acc / 40.0 + b, extra=(bias,))
    assert p.mode == "column"
    ref = x.astype(np.float64).sum(2, keepdims=True) / 40 + bias
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("d", [dt.f16, dt.bf16, dt.i8, dt.i32, dt.u8, dt.i64],
                         ids=lambda d: d.short)
def test_reduce_dtypes(rt, d):
    rng = np.random.default_rng(9)
    if d.is_int:
        x = int_values(d, n=150)[:300].reshape(3, 100)
        out, _ = red(rt, x, 1, "sum", out_dtype=d)
        np.testing.assert_array_equal(out, x.sum(1, dtype=d.np, keepdims=True))  # wraps
        mx, _ = red(rt, x, 1, "max", out_dtype=d)
        np.testing.assert_array_equal(mx, x.max(1, keepdims=True))
    else:
        x = rng.standard_normal((4, 300)).astype(d.np)
        out, _ = red(rt, x, 1, "sum", out_dtype=d)
        ref = x.astype(np.float64).sum(1, keepdims=True)
        np.testing.assert_allclose(out.astype(np.float64), ref, rtol=1e-2, atol=1e-2)
        mn, _ = red(rt, x, 0, "min", out_dtype=d)
        bits_equal(mn, x.min(0, keepdims=True))


def test_reduce_bool_any_all(rt):
    x = np.array([[True, False, False], [False, False, False], [True, True, True]])
    anyv, _ = red(rt, x, 1, "max")
    allv, _ = red(rt, x, 1, "min")
    np.testing.assert_array_equal(anyv[:, 0], x.any(1))
    np.testing.assert_array_equal(allv[:, 0], x.all(1))


def test_reduce_zero_size_and_size_one(rt):
    x = np.zeros((3, 0, 4), np.float32)
    for op, ident in (("sum", 0.0), ("prod", 1.0), ("max", -np.inf), ("min", np.inf)):
        out, _ = red(rt, x, 1, op)
        assert out.shape == (3, 1, 4)
        assert (out == ident).all() and not np.signbit(out).any() if op == "sum" else \
            (out == ident).all()
    out, _ = red(rt, np.zeros((0, 5), np.float32), 1, "sum")
    assert out.shape == (0, 1)
    y = np.arange(12, dtype=np.float32).reshape(3, 1, 4) - 5
    for op in ("sum", "prod", "max", "min"):
        out, _ = red(rt, y, 1, op)
        bits_equal(out, y)
    z = np.array([[-0.0]], np.float32)
    out, _ = red(rt, z, 1, "sum")
    assert np.signbit(out[0, 0])                     # -0.0 sums to -0.0, as NumPy


def test_reduce_prologue_with_index_and_args(rt):
    x = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    out, _ = red(rt, x, 1, "max",
                 pro=lambda L: L * ir.Cast(ir.Index(1), dt.f64) + ir.Cast(ir.Index(2), dt.f64))
    i, j, k = np.indices(x.shape)
    np.testing.assert_array_equal(out, (x * j + k).max(1, keepdims=True))


def test_matches_interpreter_on_random_kernels(rt):
    """C == the NumPy reference evaluator (ember.kernel.interpret) on random expressions."""
    interp = pytest.importorskip("ember.kernel.interpret")
    rng = np.random.default_rng(11)
    for trial in range(4):
        d = [dt.f32, dt.f64, dt.i32, dt.f16][trial]
        shape = (4, 5, 6)
        arrs = []
        for t in range(3):
            a = rng.standard_normal((6, 5, 4)).astype(np.float64) * 10
            a = a.astype(d.np)
            arrs.append(a.transpose(2, 1, 0)[:, ::-1, :])
        L = [ir.cast(ir.Load(i, d), d) for i in range(3)]
        e = L[0]
        for t in range(12):
            op = rng.choice(["add", "sub", "mul", "max", "min", "sel"])
            o = L[int(rng.integers(3))]
            if op == "sel":
                e = ir.select(ir.cmp("lt", e, o), o, e)
            else:
                e = ir.Binary(op, e, o, e.dtype)
        k = ir.Elementwise(shape, tuple(view(a)[0] for a in arrs), (e,), (d,))
        c = rt.launch(rt.compile(k), arrs)[0]
        r = interp.evaluate(k, arrs)[0]
        bits_equal(c, r)
        kr = ir.Reduce(shape, trial % 3, tuple(view(a)[0] for a in arrs), e, "max",
                       ir.Acc(e.dtype), d)
        bits_equal(rt.launch(rt.compile(kr), arrs)[0], interp.evaluate(kr, arrs)[0])


def test_matches_interpreter_on_op_exprs(rt):
    """Every registry op expression (ember.kernel.lower_ops) gives the interpreter's bits."""
    lo = pytest.importorskip("ember.kernel.lower_ops")
    interp = pytest.importorskip("ember.kernel.interpret")
    fx = float_values(np.float32)
    fy = float_values(np.float32, seed=9)[::-1].copy()
    ix = int_values(dt.i32, n=len(fx))[:len(fx)]
    iy = int_values(dt.i32, n=len(fx), seed=4)[:len(fx)]
    n = len(fx)
    cases = []
    for name in ("add", "sub", "mul", "div", "maximum", "minimum", "floor_div", "remainder",
                 "logical_and", "logical_or", "logical_xor"):
        f = getattr(lo, name, None)
        if f is not None:
            cases.append((name, f, 2))
    for name in ("neg", "sqrt", "abs_", "sign", "relu", "logical_not", "is_nan", "is_inf",
                 "is_finite"):
        f = getattr(lo, name, None)
        if f is not None:
            cases.append((name, f, 1))
    assert cases
    for d, xs, ys in ((dt.f32, fx, fy), (dt.i32, ix, iy)):
        views = (ir.BufferView(d, (1,)), ir.BufferView(d, (1,)))
        exprs, names = [], []
        for name, f, arity in cases:
            try:     # keep the ops defined for this dtype (the interpreter accepts them)
                e = f(ir.Load(0, d), ir.Load(1, d)) if arity == 2 else f(ir.Load(0, d))
                interp.evaluate(ir.Elementwise((1,), views, (e,), (ir.compute_dtype(e.dtype),)),
                                [xs[:1], ys[:1]])
            except Exception:
                continue
            exprs.append(e)
            names.append(name)
        k = ir.Elementwise((n,), views, tuple(exprs),
                           tuple(ir.compute_dtype(e.dtype) for e in exprs))
        cs = rt.launch(rt.compile(k), [xs, ys])
        rs = interp.evaluate(k, [xs, ys])
        for name, c, r in zip(names, cs, rs):
            try:
                bits_equal(c, r)
            except AssertionError as err:
                raise AssertionError(f"{name} ({d.short}): {err}") from None


@pytest.mark.parametrize("d", INTS, ids=lambda d: d.short)
def test_reduce_ints_every_mode_by_python(rt, d):
    """Wrapping int sums/products and max/min in row, column and split modes."""
    rng = np.random.default_rng(12)
    info = np.iinfo(d.np)
    cases = [(rng.integers(info.min, info.max, (3, 300), endpoint=True).astype(d.np), 1, "row"),
             (rng.integers(info.min, info.max, (300, 40), endpoint=True).astype(d.np), 0,
              "column"),
             (rng.integers(info.min, info.max, (2500, 20), endpoint=True).astype(d.np), 0,
              "column"),                                   # (split into row segments)
             (rng.integers(info.min, info.max, (1, 70000), endpoint=True).astype(d.np), 1,
              "split")]
    for x, axis, mode in cases:
        for op in ("sum", "prod", "max", "min"):
            out, p = red(rt, x, axis, op, out_dtype=d)
            assert p.mode == mode
            cols = np.moveaxis(x, axis, -1).reshape(-1, x.shape[axis]).tolist()
            ref = []
            for c in cols:
                if op == "sum":
                    v = sum(c)
                elif op == "prod":
                    v = 1
                    for t in c:
                        v = _wrap(v * t, d)
                else:
                    v = max(c) if op == "max" else min(c)
                ref.append(_wrap(v, d))
            np.testing.assert_array_equal(out.ravel(), np.array(ref, dtype=object).astype(d.np),
                                          err_msg=f"{op} {mode}")


def _random_expr(rng, d, leaves, depth):
    """A random well-typed expression of compute dtype ``d`` over ``leaves(d)``."""
    if depth == 0 or rng.random() < 0.15:
        return leaves(d)
    r = rng.random()
    sub = lambda: _random_expr(rng, d, leaves, depth - 1)   # noqa: E731
    if r < 0.2:
        ops = ["neg", "abs"] + (["sqrt", "floor", "ceil", "trunc", "rint"] if d.is_float
                                else ["bnot"])
        return ir.unary(str(rng.choice(ops)), sub())
    if r < 0.7:
        ops = ["add", "sub", "mul", "div", "rem", "max", "min"]
        if d.is_int:
            ops += ["and", "or", "xor", "shl", "shr"]
        return ir.Binary(str(rng.choice(ops)), sub(), sub(), d)
    if r < 0.85:
        c = ir.cmp(str(rng.choice(["eq", "ne", "lt", "le", "gt", "ge"])), sub(), sub())
        return ir.select(c, sub(), sub())
    other = [t for t in (dt.f64, dt.f32, dt.f16, dt.bf16, dt.i64, dt.i32, dt.i16, dt.i8,
                         dt.u8, dt.bool_) if t is not d]
    t = other[int(rng.integers(len(other)))]
    inner = _random_expr(rng, ir.compute_dtype(t), leaves, depth - 1) \
        if not t.is_bool else ir.cmp("gt", sub(), sub())
    return ir.Cast(ir.Cast(inner, t) if t in (dt.f16, dt.bf16) else inner, d)


@pytest.mark.parametrize("d", [dt.f64, dt.f32, dt.f16, dt.bf16, dt.i64, dt.i32, dt.i16, dt.i8,
                               dt.u8], ids=lambda d: d.short)
def test_fuzz_against_interpreter(rt, d):
    """Random expressions over strided/broadcast views: C bits == interpreter bits, for the
    elementwise kernel and for exact reductions of it (max/min; int sums)."""
    interp = pytest.importorskip("ember.kernel.interpret")
    rng = np.random.default_rng(100 + dt.ALL.index(d))
    shape = (3, 40, 17)
    cd_ = ir.compute_dtype(d)
    if d.is_float:
        src = float_values(d.np, n=2040 - 32)[:2040].reshape(24, 85)
    else:
        src = int_values(d, n=1100)[:2040].reshape(24, 85)
    arrs = [src[:3, :40 * 2:2][:, :40, None].repeat(17, 2),                 # (3, 40, 17)
            np.broadcast_to(src[5, :17], shape),                              # broadcast
            src.reshape(-1)[:3 * 40 * 17].reshape(17, 40, 3).transpose(2, 1, 0)[:, ::-1]]
    views = tuple(view(a)[0] for a in arrs)
    loads = [ir.Load(i, d) for i in range(3)]

    def leaves(t):
        r = rng.random()
        if t is cd_ and r < 0.8:
            return ir.cast(loads[int(rng.integers(3))], d)
        if r < 0.9 or t.is_bool:
            v = float(rng.choice([0.5, -1.5, 3.0, 0.0, 7.0, 2.0])) if t.is_float else \
                int(rng.choice([0, 1, 3, -2, 7, 100]))
            return ir.Const(v, t) if not t.is_bool else ir.Const(True, t)
        return ir.cast(ir.Cast(loads[0], t), t) if d is not t else loads[0]

    for trial in range(int(__import__("os").environ.get("FUZZ_N", "3"))):
        e = _random_expr(rng, cd_, leaves, 6)
        k = ir.Elementwise(shape, views, (e,), (d,))
        bits_equal(rt.launch(rt.compile(k), arrs)[0], interp.evaluate(k, arrs)[0])
        op = ["max", "min", "sum" if d.is_int else "max"][trial % 3]
        kr = ir.Reduce(shape, trial % 3, views, e, op, ir.Acc(e.dtype) if not d.is_int else
                       ir.Binary("mul", ir.Acc(e.dtype), ir.Const(3, cd_), cd_), d)
        c, r = rt.launch(rt.compile(kr), arrs)[0], interp.evaluate(kr, arrs)[0]
        # the sign of a zero max/min depends on the combining order: compare values
        np.testing.assert_array_equal(c.astype(np.float64) if d.is_float else c,
                                      r.astype(np.float64) if d.is_float else r)


@pytest.mark.parametrize("d", [dt.f32, dt.f64, dt.f16], ids=lambda d: d.short)
def test_mathlib_matches_interpreter(rt, d):
    """Every math library function, compiled to C, gives the interpreter's bits."""
    ml = pytest.importorskip("ember.kernel.mathlib")
    interp = pytest.importorskip("ember.kernel.interpret")
    rng = np.random.default_rng(21)
    fi = np.finfo(d.np)
    with np.errstate(all="ignore"):
        sweep = np.concatenate([np.geomspace(float(fi.smallest_subnormal), float(fi.max), 400),
                                rng.uniform(-10, 10, 300), rng.uniform(-1, 1, 100)])
        x = np.concatenate([float_values(d.np), sweep.astype(d.np), -sweep.astype(d.np)])
    y = np.roll(x, 7)[::-1].copy()
    views = (ir.BufferView(d, (1,)), ir.BufferView(d, (1,)))
    a, b = ir.cast(ir.Load(0, d), d), ir.cast(ir.Load(1, d), d)
    names, exprs = [], []
    for name in ml.__all__:
        f = getattr(ml, name)
        if not callable(f):
            continue
        exprs.append(f(a, b) if name in ("atan2", "pow") else f(a))
        names.append(name)
    k = ir.Elementwise((len(x),), views, tuple(exprs), (d,) * len(exprs))
    cs = rt.launch(rt.compile(k), [x, y])
    rs = interp.evaluate(k, [x, y])
    for name, c, r in zip(names, cs, rs):
        try:
            bits_equal(c, r)
        except AssertionError as err:
            raise AssertionError(f"{name} ({d.short}): {err}") from None


@pytest.mark.parametrize("mode", ["row", "column", "split"])
def test_broadcast_reduce(rt, mode):
    """Reduce-then-broadcast (``broadcast=True``): the epilogue at every position, reading
    the row's reduced value (softmax / layer norm shape), in each reduction mode."""
    rng = np.random.default_rng(31)
    shape, axis = {"row": ((5, 300), 1), "column": ((300, 70), 0),
                   "split": ((2, 70000), 1)}[mode]
    x = rng.standard_normal(shape).astype(np.float32)
    v, _ = view(x)
    L = ir.Load(0, dt.f32)
    idx = np.arange(shape[axis], dtype=np.float32).reshape([-1 if d == axis else 1
                                                            for d in range(2)])
    epi = L - ir.Acc(dt.f32) + ir.Cast(ir.Index(axis), dt.f32) * 0.5
    k = ir.Reduce(shape, axis, (v,), L, "max", epi, dt.f32, broadcast=True)
    p = rt.compile(k)
    assert p.mode == mode
    (out,) = rt.launch(p, [x])
    assert out.shape == shape
    bits_equal(out, (x - x.max(axis, keepdims=True)) + idx * np.float32(0.5))
    # sums: x / sum(x), the sums replayed exactly
    k2 = ir.Reduce(shape, axis, (v,), L, "sum", L / ir.Acc(dt.f32), dt.f16, broadcast=True)
    (out2,) = rt.launch(rt.compile(k2), [x])
    if mode == "column":
        s = _pairwise_col(x)[None, :]
    else:
        s = np.array([_pairwise_row(r) for r in x])[:, None]
    bits_equal(out2, (x / s).astype(np.float16))


def test_broadcast_reduce_ints_and_views(rt):
    rng = np.random.default_rng(32)
    base = rng.integers(-100, 100, (40, 6, 3)).astype(np.int32)
    x = base.transpose(1, 2, 0)[:, ::-1, :]          # (6, 3, 40), permuted and flipped
    bias = rng.integers(-5, 5, (6, 1, 1)).astype(np.int32)
    v, _ = view(x)
    vb = ir.BufferView(dt.i32, (1, 0, 0))
    L, B = ir.Load(0, dt.i32), ir.Load(1, dt.i32)
    for axis in (0, 1, 2):
        k = ir.Reduce(x.shape, axis, (v, vb), L, "sum", L * 3 - ir.Acc(dt.i32) + B, dt.i32,
                      broadcast=True)
        (out,) = rt.launch(rt.compile(k), [x, bias.reshape(6)])
        np.testing.assert_array_equal(out, x * 3 - x.sum(axis, keepdims=True) + bias)
