"""Every elementwise registry op's ``expr``, evaluated by the kernel interpreter, against the
op's own NumPy reference (``op.numpy``): bit-exact where the op is exactly defined, within a
few ulp (of the output dtype) for the transcendental ones.

Inputs per dtype include the special values (+-0, +-inf, nan, denormals, halves for rounding,
int extremes, 0 and -1 divisors, shift counts out of range); binary ops run on a grid (every
value against every value, through broadcast views with 0 strides) and with a scalar operand
on either side as a runtime ``Arg``.
"""
from __future__ import annotations

import numpy as np
import pytest

import ember  # noqa: F401  (registers the ops)
from ember import dtype as dt
from ember.errors import DTypeError
from ember.kernel import ir
from ember.kernel.interpret import evaluate
from ember.ops.registry import OPS

ELEMENTWISE = {"unary", "binary", "cast"}
EXTRA = {"where"}                 # category "other", elementwise all the same
NO_EXPR: dict[str, str] = {}      # documented exceptions: none

# ulp of the output dtype allowed per op (f32/f64 | f16/bf16); absent: bit-exact
TRANSCENDENTAL = {"exp", "log", "expm1", "log1p", "sin", "cos", "tan", "sinh", "cosh", "tanh",
                  "asin", "acos", "atan", "erf", "pow", "atan2", "sigmoid", "gelu",
                  "gelu_backward"}
ULP_WIDE, ULP_NARROW = 4, 1
# ops whose result has a root or a vanishing tail where a few ulp of an inner function
# (erf, exp) are many ulp of the result (gelu_backward is 0 near x = -0.75; gelu(x) vanishes
# like exp(-x^2/2) for x -> -inf): also within the ulps of the computation's scale,
# |g| * (1 + |x|) (|x| for gelu), in the output dtype's epsilon
SCALED = {"gelu": lambda x: np.abs(x),
          "gelu_backward": lambda g, x: np.abs(g) * (1.0 + np.abs(x))}
NARROW = (dt.float16, dt.bfloat16)
# float results whose zero sign NumPy leaves to the code path (SIMD max/min pick either zero)
ZERO_SIGN_FREE = {"maximum", "minimum", "clamp", "relu"}

RNG = np.random.default_rng(1234)


# -- values ---------------------------------------------------------------------------------
def float_values(d: dt.DType, scale=100.0):
    base = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 3.5, -3.5, 0.1, -0.1, 2.0,
            3.0, -3.0, 7.0, 0.75, -0.25, 1e-30, -1e-30, 1e-40, -1e-40, 1e-310, 6e-8, -6e-8, 1e30,
            -1e30, 65504.0, 3e38, 1e300, -1e300, 3e9, -3e9, 1e18, -9.2e18, 255.5, -129.9,
            np.inf, -np.inf, np.nan]
    rnd = list(RNG.uniform(-scale, scale, 24)) + list(
        RNG.choice([-1, 1], 12) * 10.0 ** RNG.uniform(-6, 6, 12))
    with np.errstate(all="ignore"):
        return np.array(base + rnd, np.float64).astype(d.np)


def int_values(d: dt.DType):
    lo, hi = int(np.iinfo(d.np).min), int(np.iinfo(d.np).max)
    base = [lo, lo + 1, -100, -8, -7, -3, -2, -1, 0, 1, 2, 3, 5, 7, 8, 31, 63, 64, 100, 127,
            200, hi - 1, hi]
    rnd = [int(v) for v in RNG.integers(lo, hi, 12, endpoint=True)]
    vals = sorted({v for v in base + rnd if lo <= v <= hi})
    return np.array(vals, d.np)


def values(d: dt.DType):
    if d.is_float:
        return float_values(d)
    if d.is_int:
        return int_values(d)
    return np.array([False, True])


def domain_values(name, d):
    """Inputs of the transcendental ops: specials plus values in each function's useful
    range (ulp comparisons far outside it measure the reference's own range reduction)."""
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 1e-40, 0.5, -0.5,
                         1.0, -1.0, 2.0, 1e-5, -1e-5], np.float64)
    rng = {"exp": (-90, 90), "expm1": (-90, 90), "sinh": (-90, 90), "cosh": (-90, 90),
           "log": (0, 1e6), "log1p": (-1, 1e6), "sin": (-100, 100), "cos": (-100, 100),
           "tan": (-1.5, 1.5), "tanh": (-12, 12), "asin": (-1, 1), "acos": (-1, 1),
           "atan": (-1e4, 1e4), "erf": (-6, 6), "sigmoid": (-90, 90), "gelu": (-12, 12)}[name]
    r = RNG.uniform(*rng, 96)
    small = RNG.choice([-1, 1], 16) * 10.0 ** RNG.uniform(-20, 0, 16)
    if rng[0] >= 0:
        small = np.abs(small)
    extra = {"log": [1e30, 3e38, 1e-38, 1e-45], "atan": [1e30, -1e30],
             "tanh": [30.0, -30.0], "sigmoid": [100.0, -100.0, -103.0, 200.0],
             "exp": [88.7, -103.9, 709.0, -745.0]}.get(name, [])
    with np.errstate(all="ignore"):
        return np.concatenate([specials, r, small, extra]).astype(d.np)


# -- running --------------------------------------------------------------------------------
class Meta:
    """What op.infer reads of a tensor."""
    def __init__(self, shape, d):
        self._shape, self._dtype = tuple(shape), d


def infer(op, operands, attrs):
    metas = [Meta(np.shape(x), dt.from_numpy(x.dtype)) if isinstance(x, np.ndarray) else x
             for x in operands]
    return op.infer(*metas, **attrs)


def broadcast_strides(a: np.ndarray, shape):
    """Element strides of contiguous ``a`` broadcast to ``shape`` (0 on broadcast dims)."""
    st = np.broadcast_to(a, shape).strides
    return tuple(s // a.itemsize for s in st)


def arg_value(x, d: dt.DType):
    """The value a scalar operand's Arg carries for a tensor of dtype ``d``: NumPy converts a
    weak Python scalar to the tensor's dtype, except for bf16 (an ml_dtypes type), where a
    Python float makes NumPy compute in f32 (the scalar rounded to f32 only)."""
    if not d.is_float:
        return x
    with np.errstate(all="ignore"):
        return float((np.float32 if d is dt.bfloat16 else d.np.type)(x))


def run(op, operands, attrs=None, arg_dtype=None, raw_args=False):
    """The op's expr over Loads of its tensor operands (scalars as Args), evaluated by the
    interpreter, and the op's NumPy reference: (got, want, out dtype). ``arg_dtype``: the
    tensors' dtype, which fixes the value a scalar's Arg carries (`arg_value`); ``raw_args``:
    ``"raw"``: the Python value in an f64 Arg instead, ``"const"``: in an f64 Const. f16/bf16 inputs are also given as the fuser
    hands them over, ``Cast(Load, f32)``, which must give the same bits."""
    attrs = attrs or {}
    shape, out_d = infer(op, operands, attrs)
    got = _run_expr(op, operands, attrs, shape, out_d, arg_dtype, raw_args, False)
    if any(isinstance(x, np.ndarray) and x.dtype in (d.np for d in NARROW) for x in operands):
        got2 = _run_expr(op, operands, attrs, shape, out_d, arg_dtype, raw_args, True)
        compare(op.name if op.name in TRANSCENDENTAL else "exact", got2, got, out_d,
                "Cast(Load, f32) vs Load")
    with np.errstate(all="ignore"):
        want = np.asarray(op.numpy(*operands, **attrs))
    want = np.broadcast_to(want.astype(out_d.np), shape)
    return got, want, out_d


def _run_expr(op, operands, attrs, shape, out_d, arg_dtype, raw_args, widen):
    views, loads, exprs_in, args, arg_types = [], [], [], [], []
    for x in operands:
        if isinstance(x, np.ndarray):
            x = np.ascontiguousarray(x)
            d = dt.from_numpy(x.dtype)
            views.append(ir.BufferView(d, broadcast_strides(x, shape)))
            loads.append(x)
            ld = ir.Load(len(views) - 1, d)
            # widen: f16/bf16 loads as the fuser hands them over, Cast(Load, f32)
            exprs_in.append(ir.Cast(ld, dt.float32) if widen and d in NARROW else ld)
        elif raw_args == "const":
            exprs_in.append(ir.Const(float(x), dt.float64))
        else:
            cdt = dt.float64 if raw_args else ir.compute_dtype(arg_dtype)
            args.append(float(x) if raw_args else arg_value(x, arg_dtype))
            arg_types.append(cdt)
            exprs_in.append(ir.Arg(len(args) - 1, cdt))
    e = op.expr(*exprs_in, **attrs)
    assert ir.compute_dtype(e.dtype) is ir.compute_dtype(out_d), (op.name, e.dtype, out_d)
    check_types(e)
    k = ir.Elementwise(tuple(shape), tuple(views), (e,), (out_d,), tuple(arg_types))
    return evaluate(k, loads, args)[0]


def nodes(e):
    """Every node once, by identity (`ir.walk` hashes nodes: exponential on shared DAGs)."""
    seen, out, stack = set(), [], [e]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        out.append(n)
        stack.extend(ir.children(n))
    return out


def check_types(e):
    """Operand dtypes agree (the interpreter would silently convert them)."""
    cd = ir.compute_dtype
    for n in nodes(e):
        if isinstance(n, ir.Binary):
            assert cd(n.a.dtype) is cd(n.b.dtype), (n.op, n.a.dtype, n.b.dtype)
            want = dt.bool_ if n.op in ("eq", "ne", "lt", "le", "gt", "ge") else cd(n.a.dtype)
            assert cd(n.dtype) is want, n
        elif isinstance(n, ir.Select):
            assert n.cond.dtype is dt.bool_
            assert cd(n.a.dtype) is cd(n.b.dtype) is cd(n.dtype), n
        elif isinstance(n, ir.Unary):
            assert n.op in ir.UNARY_OPS
            want = dt.bool_ if n.op == "lnot" else cd(n.x.dtype)
            assert cd(n.dtype) is want, n


def bits_of(a: np.ndarray) -> np.ndarray:
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def ordinal(a: np.ndarray) -> np.ndarray:
    """Floats as integers ordered like the floats (+-0 -> 0, adjacent floats differ by 1)."""
    n = a.dtype.itemsize * 8
    b = bits_of(a).astype(np.uint64)
    mag = (b & np.uint64((1 << (n - 1)) - 1)).astype(np.int64)
    return np.where((b >> np.uint64(n - 1)) != 0, -mag, mag)


def scale_of(name, operands):
    """`SCALED`'s scale of ``operands`` (float64, broadcast), or None."""
    f = SCALED.get(name)
    if f is None:
        return None
    with np.errstate(all="ignore"):
        return f(*(np.asarray(o, np.float64) for o in operands))


def compare(name, got, want, out_d, ctx="", scale=None):
    """Ints and bools equal; floats: nan where nan, else the same bits, or within a few ulp
    (transcendental ops; an infinity counts as one ulp past the largest finite value; with
    ``scale``, also within that many epsilons of ``scale``)."""
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
    if not out_d.is_float:
        bad = got != want
    else:
        gn, wn = np.isnan(got.astype(np.float64)), np.isnan(want.astype(np.float64))
        if name in TRANSCENDENTAL:
            tol = ULP_NARROW if out_d.itemsize == 2 else ULP_WIDE
            far = np.abs(ordinal(got) - ordinal(want)) > tol
            if scale is not None:
                with np.errstate(all="ignore"):
                    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
                    eps = {2: 2.0 ** -7 if out_d is dt.bfloat16 else 2.0 ** -10,
                           4: 2.0 ** -23, 8: 2.0 ** -52}[out_d.itemsize]
                    far &= ~(err <= tol * eps * scale)
            bad = (gn != wn) | (~wn & far)
        elif name in ZERO_SIGN_FREE:
            bad = (gn != wn) | (~wn & (got != want))
        else:   # the same bits (zero signs included), any nan for nan
            bad = (gn != wn) | (~wn & (bits_of(got) != bits_of(want)))
    if bad.any():
        idx = tuple(np.argwhere(bad)[0]) if bad.ndim else ()
        raise AssertionError(f"{name} {out_d.short} {ctx}: {int(bad.sum())} of {bad.size} "
                             f"differ; first at {idx}: got {got[idx]!r}, want {want[idx]!r}")


# -- the ops --------------------------------------------------------------------------------
def target_ops():
    return sorted(n for n, o in OPS.items() if o.category in ELEMENTWISE or n in EXTRA)


def supported(op, d, nin):
    try:
        infer(op, [np.zeros(1, d.np)] * nin, {"dtype": dt.float32} if op.name == "cast" else {})
        return True
    except DTypeError:
        return False


def test_every_elementwise_op_has_an_expr():
    have = {n for n, o in OPS.items() if o.expr is not None}
    assert have == set(target_ops()) - set(NO_EXPR)


UNARY = [n for n in target_ops() if OPS[n].nin == 1 and n not in ("clamp", "cast")]
BINARY = [n for n in target_ops() if OPS[n].nin == 2]


def _cases(names):
    return [(n, d) for n in names for d in dt.ALL if supported(OPS[n], d, OPS[n].nin)]


@pytest.mark.parametrize("name,d", _cases(UNARY), ids=lambda v: getattr(v, "short", v))
def test_unary(name, d):
    op = OPS[name]
    x = domain_values(name, d) if name in TRANSCENDENTAL else values(d)
    got, want, out_d = run(op, [x])
    compare(name, got, want, out_d, scale=scale_of(name, [x]))


def binary_inputs(name, d):
    """(a values, b values) for the grid."""
    if name == "pow" and d.is_int:
        lo = -3 if d.signed else 0
        a = np.array(sorted(set(range(lo, 4)) | set(int_values(d)[:3].tolist())
                            | set(int_values(d)[-3:].tolist())), d.np)
        b = np.array([v for v in [-3, -2, -1, 0, 1, 2, 3, 7, 8, 15, 16, 31, 32, 63, 64, 100,
                                  127, 200, 255] if np.iinfo(d.np).min <= v
                      <= np.iinfo(d.np).max], d.np)
        return a, b
    if name == "pow":
        sp = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, np.inf, -np.inf, np.nan]
        a = np.concatenate([sp, RNG.uniform(0, 10, 16), [1e-30, 1e-40, 1e30]])
        b = np.concatenate([sp, RNG.uniform(-8, 8, 16), [1.5, 1 / 3, 100.0, -100.0]])
        with np.errstate(all="ignore"):
            return a.astype(d.np), b.astype(d.np)
    if name == "atan2":
        v = np.concatenate([[0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-30, 1e30,
                             1e-40], RNG.uniform(-10, 10, 14)])
        with np.errstate(all="ignore"):
            return v.astype(d.np), v.astype(d.np)
    if name in ("bitwise_left_shift", "bitwise_right_shift"):
        n = 8 * d.itemsize
        cnt = [c for c in (-1, 0, 1, 2, 3, 7, 8, 15, 16, 31, 32, 63, 64, 100, 127, 200)
               if np.iinfo(d.np).min <= c <= np.iinfo(d.np).max]
        return int_values(d), np.array(cnt + [n - 1, n, n + 1] if n < 100 else cnt, d.np)
    v = values(d)
    return v, v


@pytest.mark.parametrize("name,d", _cases(BINARY), ids=lambda v: getattr(v, "short", v))
def test_binary_grid(name, d):
    op = OPS[name]
    a, b = binary_inputs(name, d)
    with np.errstate(all="ignore"):
        got, want, out_d = run(op, [a[:, None], b[None, :]])
    compare(name, got, want, out_d, "grid", scale_of(name, [a[:, None], b[None, :]]))


@pytest.mark.parametrize("name,d", _cases(BINARY), ids=lambda v: getattr(v, "short", v))
def test_binary_scalar_arg(name, d):
    """A scalar operand (a runtime Arg) on either side; one kernel, several arg values."""
    op = OPS[name]
    a, b = binary_inputs(name, d)
    for side in (0, 1):
        t = a if side == 0 else b
        pool = b if side == 0 else a
        picks = sorted(set(RNG.choice(len(pool), min(6, len(pool)), replace=False).tolist())
                       | {0, len(pool) - 1})
        for i in picks:
            s = pool[i].item()
            if d.is_float:
                s = float(s)
            operands = [t, s] if side == 0 else [s, t]
            try:
                infer(op, operands, {})
            except DTypeError:
                continue       # e.g. an int tensor to a negative int scalar power
            got, want, out_d = run(op, operands, arg_dtype=d)
            compare(name, got, want, out_d, f"scalar {s!r} on side {1 - side}",
                    scale_of(name, operands))


@pytest.mark.parametrize("d", [dt.float16, dt.bfloat16], ids=lambda d: d.short)
def test_float_scalar_of_a_narrow_tensor(d):
    """NumPy rounds a weak float scalar to f16 before adding, but computes bf16 with a Python
    float in f32 (the scalar rounded to f32); the Arg carries that value."""
    x = np.array([1.0, 2048.0, -3.0, 0.1, 3.0], d.np)
    for name in ("add", "greater", "pow", "sub"):
        for s in (0.1, 1.0009765625 + 1e-6, 3.0000001, 0.5):
            for operands in ([x, s], [s, x]):
                got, want, out_d = run(OPS[name], operands, arg_dtype=d)
                compare(name, got, want, out_d, f"{operands}")
                # the Python value in an f64 Arg or Const: the expr rounds it as NumPy does
                for how in ("raw", "const"):
                    got, want, out_d = run(OPS[name], operands, arg_dtype=d, raw_args=how)
                    compare(name, got, want, out_d, f"{operands} {how}")


@pytest.mark.parametrize("src", dt.ALL, ids=lambda d: d.short)
def test_cast(src):
    op = OPS["cast"]
    x = values(src)
    extra = {dt.float64: [1 + 2 ** -11 + 2 ** -40, 1 + 2 ** -8 + 2 ** -40, 65519.99, 65520.0,
                          2 ** -24 * 1.5000001, 2 ** -25, -2 ** -25 - 1e-30, 3.4028235e38,
                          3.4028236e38, 1e-46]}.get(src)
    if extra:
        x = np.concatenate([x, np.array(extra, src.np)])
    big = None
    if src.is_float:
        # beyond the i64 range float -> int is unspecified
        with np.errstate(invalid="ignore"):
            big = np.isfinite(x.astype(np.float64)) & (np.abs(x.astype(np.float64)) >= 2.0 ** 63)
    if src in (dt.int64, dt.int32):
        x = np.concatenate([x, np.array([2 ** 24 + 2 ** 16 + 1, 2 ** 30 + 2 ** 22 + 1,
                                         -(2 ** 24 + 2 ** 16 + 1), 65519, 65520], src.np)])
    for d in dt.ALL:
        xs = x[~big] if big is not None and d.is_int else x
        got, want, out_d = run(op, [xs], {"dtype": d})
        compare("cast", got, want, out_d, f"{src.short} -> {d.short}")


@pytest.mark.parametrize("d", [d for d in dt.ALL if not d.is_bool], ids=lambda d: d.short)
def test_clamp(d):
    op = OPS["clamp"]
    x = values(d)
    if d.is_float:
        bounds = [(None, 1.5), (-0.5, None), (-1.0, 2.0), (2.0, -1.0), (0.1, 0.3), (0.0, 0.0),
                  (-np.inf, np.inf)]
    else:
        lo, hi = int(np.iinfo(d.np).min), int(np.iinfo(d.np).max)
        bounds = [(None, 7), (3, None), (5, 2), (lo, hi), (0, 0), (max(lo, -3), 100)]
    for lo_b, hi_b in bounds:
        got, want, out_d = run(op, [x], {"min": lo_b, "max": hi_b})
        compare("clamp", got, want, out_d, f"[{lo_b}, {hi_b}]")
        # bounds as runtime Args
        e = op.expr(ir.Load(0, d),
                    min=None if lo_b is None else ir.Arg(0, ir.compute_dtype(d)),
                    max=None if hi_b is None else ir.Arg(1, ir.compute_dtype(d)))
        k = ir.Elementwise(x.shape, (ir.BufferView(d, (1,)),), (e,), (d,),
                           (ir.compute_dtype(d),) * 2)
        args = [0 if v is None else arg_value(v, d) for v in (lo_b, hi_b)]
        got = evaluate(k, [x], args)[0]
        compare("clamp", got, want, out_d, f"Args [{lo_b}, {hi_b}]")


@pytest.mark.parametrize("d", dt.ALL, ids=lambda d: d.short)
def test_where(d):
    op = OPS["where"]
    v = values(d)
    cond = RNG.random(len(v)) < 0.5
    b = v[::-1].copy()
    got, want, out_d = run(op, [cond[:, None], v[None, :], b[None, :]])
    compare("where", got, want, out_d, "tensors")
    for s in v[:3].tolist():
        got, want, out_d = run(op, [cond, v, s], arg_dtype=d)
        compare("where", got, want, out_d, f"scalar b {s!r}")
        got, want, out_d = run(op, [cond, s, v], arg_dtype=d)
        compare("where", got, want, out_d, f"scalar a {s!r}")


def test_int_pow_expression_stays_small():
    """The square-and-multiply chain is a DAG of a few hundred nodes (renderers emit each
    node once), not a tree."""
    e = OPS["pow"].expr(ir.Load(0, dt.int64), ir.Load(1, dt.int64))
    assert len(nodes(e)) < 500


def test_negative_zero_constants_are_distinct_nodes():
    from ember.kernel import lower_ops as L
    z, nz = L.k(0.0, dt.float32), L.k(-0.0, dt.float32)
    assert z != nz
    got = evaluate(ir.Elementwise((), (), (nz,), (dt.float32,)), [], [])[0]
    assert np.signbit(got)


@pytest.mark.parametrize("name", ["floor_div", "remainder"])
@pytest.mark.parametrize("d", dt.FLOATS, ids=lambda d: d.short)
def test_floor_div_remainder_wide_quotients(name, d):
    """Quotients far from 1, where (a - fmod(a, b)) / b rounds and NumPy snaps it to the
    nearest integer; pairs elementwise (no grid)."""
    n = 4000
    with np.errstate(all="ignore"):
        a = (RNG.choice([-1, 1], n) * 10.0 ** RNG.uniform(-3, 8, n)).astype(d.np)
        b = (RNG.choice([-1, 1], n) * 10.0 ** RNG.uniform(-3, 3, n)).astype(d.np)
    got, want, out_d = run(OPS[name], [a, b])
    compare(name, got, want, out_d, "wide")


# -- the C renderer runs the same expressions -----------------------------------------------
@pytest.fixture(scope="module")
def c_runtime(tmp_path_factory):
    from ember.kernel.c.runtime import CpuKernelRuntime
    rt = CpuKernelRuntime(cache_root=tmp_path_factory.mktemp("ember-cache"), autotune=False)
    if not rt.available():
        pytest.skip(f"no C compiler: {rt.why_unavailable()}")
    return rt


def _c_vs_interpreter(rt, k, inputs, args, names, ctx):
    c = rt.launch(rt.compile(k), inputs, args)
    r = evaluate(k, inputs, args)
    for n, co, ro, od in zip(names, c, r, k.out_dtypes, strict=True):
        # bit-exact (zero signs too, except where NumPy's own are free); the interpreter is
        # the renderer's specification, transcendental functions included
        compare(n if n in ZERO_SIGN_FREE else "exact", co, ro, od, f"C vs interpreter {ctx}")


#: ops whose expressions hold several math-library calls: compiled in kernels of their own
#: (one C function with all of them and the other ops took gcc ~90 s in f64)
OWN_KERNEL = ("gelu", "gelu_backward")


@pytest.mark.parametrize("d", dt.ALL, ids=lambda d: d.short)
@pytest.mark.parametrize("part", ["ops", "own"])
def test_c_renderer_agrees_with_the_interpreter(c_runtime, d, part):
    """Every op's expr compiled by the C renderer, one multi-output kernel per dtype and
    arity (`OWN_KERNEL`'s ops in their own): the same bits as the interpreter (grid, scalar
    Args, casts to every dtype)."""
    x = values(d)
    cdt = ir.compute_dtype(d)
    un = [n for n in UNARY if supported(OPS[n], d, 1) and (n in OWN_KERNEL) == (part == "own")]
    bi = [n for n in BINARY if supported(OPS[n], d, 2) and (n in OWN_KERNEL) == (part == "own")]
    z1, z2 = [np.zeros(1, d.np)], [np.zeros(1, d.np)] * 2
    if un:
        k = ir.Elementwise(x.shape, (ir.BufferView(d, (1,)),),
                           tuple(OPS[n].expr(ir.Load(0, d)) for n in un),
                           tuple(infer(OPS[n], z1, {})[1] for n in un))
        _c_vs_interpreter(c_runtime, k, [x], [], un, "unary")
    if bi:
        n_ = len(x)
        k = ir.Elementwise((n_, n_), (ir.BufferView(d, (1, 0)), ir.BufferView(d, (0, 1))),
                           tuple(OPS[n].expr(ir.Load(0, d), ir.Load(1, d)) for n in bi),
                           tuple(infer(OPS[n], z2, {})[1] for n in bi))
        _c_vs_interpreter(c_runtime, k, [x, x], [], bi, "grid")
        names = bi
        k = ir.Elementwise(x.shape, (ir.BufferView(d, (1,)),),
                           tuple(OPS[n].expr(ir.Load(0, d), ir.Arg(0, cdt)) for n in names)
                           + tuple(OPS[n].expr(ir.Arg(0, cdt), ir.Load(0, d)) for n in names),
                           tuple(infer(OPS[n], z2, {})[1] for n in names) * 2, (cdt,))
        for s in x[:: max(1, len(x) // 6)].tolist():
            _c_vs_interpreter(c_runtime, k, [x], [arg_value(s, d)], names * 2, f"Arg {s!r}")
    if part == "own":
        return
    xc = x
    if d.is_float:
        xf = x.astype(np.float64)
        xc = x[~(np.isfinite(xf) & (np.abs(xf) >= 2.0 ** 63))]
    k = ir.Elementwise(xc.shape, (ir.BufferView(d, (1,)),),
                       tuple(OPS["cast"].expr(ir.Load(0, d), dtype=t) for t in dt.ALL), dt.ALL)
    _c_vs_interpreter(c_runtime, k, [xc], [], ["cast"] * len(dt.ALL), "casts")
