"""The math library, written in the kernel IR: functions ``Expr -> Expr``.

exp, exp2, expm1, log, log2, log1p, erf, tanh, sigmoid, sin, cos, tan, sinh, cosh, asin,
acos, atan, atan2 and pow, built only from IR nodes (arithmetic, comparisons, select, rint,
floor, sqrt, casts and bitcasts), so every target computes the same values and a C compiler
vectorizes them without libm calls. Each takes an expression of a float dtype (f16/bf16
compute in f32) and returns one of its compute dtype.

Techniques: range reduction to a small interval, then a polynomial fitted by Chebyshev
interpolation (exp: ``x = k ln2 + r`` with a Cody-Waite two-constant split, ``2^k`` built by
bitcasting its exponent bits and applied in two steps so overflow, underflow and denormal
results round once; log: exponent and mantissa by bitcast with a prescale of denormals,
then ``log1p(f)`` on ``[sqrt(1/2), sqrt(2))`` by the ``s = f / (2 + f)`` series; sin/cos/tan:
for f32 a Payne-Hanek reduction in f64 with a 2/pi bit table chosen by the exponent, exact
for the whole f32 range; erf: a series near 0 and piecewise fits of erfc). All IEEE special
values are handled: +-0 keep their sign where the function is odd, +-inf, NaN and denormals.
The coefficients are derived in this file (see the end: decimal arithmetic, Chebyshev fits)
and stored in `_TABLE`; ``python -m ember.kernel.mathlib`` prints the table again.

Working precision. For f32 the hot functions (exp, exp2, expm1, log, log1p, tanh, sigmoid,
erf) compute natively in f32 (8 lanes per AVX2 vector); the others compute in f64 and round
once to f32 (log2, sin, cos, tan, sinh, cosh, asin, acos, atan, atan2, pow: the reduction or
the extended exponent needs the precision; they are correctly rounded but for a few cases in
2^32). f64 inputs compute in f64 with longer polynomials. No float -> int conversion is
used (those do not vectorize on every ISA): integers come from the magic-constant trick
``bits(x + 1.5 * 2^mb) - bits(1.5 * 2^mb)``. Every piece is evaluated and selected (the
IR has no branches), so a function costs the sum of its paths.

Accuracy: max error in ulps of the result's type. f32: over all 2^32 inputs (pow, atan2:
2^30 random pairs) against float64 NumPy/SciPy, run through the C renderer, which is
bit-identical to the reference evaluator; 0.5 ulp is correct rounding. f64: against mpmath
at ~14000 sampled points per function (tests/kernel/test_mathlib.py asserts both, on
smaller sweeps).

========  =======  =======  ===================================================================
function  f32      f64      notes
========  =======  =======  ===================================================================
exp       1.043    0.87     clamps to [-104, 89] (f64 [-746, 710]), then overflow/underflow
exp2      1.110    1.04
expm1     1.219    1.22     k = 0 on |x| < 0.6 (no cancellation), rounding error of r fed back
log       0.843    0.73     log(+-0) = -inf, log(x < 0) = NaN
log2      0.500    1.49     f32 in f64
log1p     0.843    0.74     x itself is the reduced argument near 0; keeps -0
erf       1.065    0.80     erf = 1 from 3.92 (f64 5.95); f32 erfc: one polynomial (even/odd)
tanh      1.307    1.22     polynomial below 0.625, 1 - 2/(expm1(2|x|) + 2) above
sigmoid   1.502    1.22     e/(1+e) for x < 0 with 1 + e kept exact (two-sum)
sin       0.500    1.24     f32: exact reduction for all x; f64: exact for |x| < 2^45, NaN past
cos       0.500    1.35     (as sin)
tan       0.500    2.70     sin(r)/cos(r) by quadrant
sinh      0.500    1.11     f32 in f64
cosh      0.500    1.15     f32 in f64
asin      0.500    0.58     NaN outside [-1, 1]
acos      0.500    0.73
atan      0.500    0.84
atan2     0.500    1.42     C99 signed zeros / infinities
pow       0.500    1.07     f32: y log2|x| in f64; f64: in double-double; C99 special cases
========  =======  =======  ===================================================================

The values assume IEEE arithmetic without fast-math or FMA contraction (the C renderer's
flags); the f32 polynomials use explicit fused multiply-adds (`ir.Fma`: C ``fmaf``, CUDA
``fmaf``), which the reference evaluator `ember.kernel.interpret` computes exactly, so every
target gives bit-identical results. (f64 polynomials multiply and add: NumPy has no exact
f64 fma to check them against.)
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtype as dt
from . import ir

__all__ = ["exp", "exp2", "expm1", "log", "log2", "log1p", "erf", "tanh", "sigmoid", "sin",
           "cos", "tan", "sinh", "cosh", "asin", "acos", "atan", "atan2", "pow", "MAX_ULP"]

_F32, _F64 = dt.float32, dt.float64
_NAN, _INF = math.nan, math.inf


class _P:
    """The parameters of a working float type."""

    def __init__(self, W):
        self.W = W
        single = W is _F32
        self.I = dt.int32 if single else dt.int64
        self.mb = 23 if single else 52                 # mantissa bits
        self.bias = 127 if single else 1023
        self.sign = -(1 << 31) if single else -(1 << 63)
        self.mmask = (1 << self.mb) - 1
        self.tiny = 2.0 ** (1 - self.bias)             # smallest normal
        self.exp_lo, self.exp_hi = (-104.0, 89.0) if single else (-746.0, 710.0)
        self.exp2_lo, self.exp2_hi = (-151.0, 129.0) if single else (-1076.0, 1025.0)
        self.m1_lo = -30.0 if single else -60.0
        self.ln2 = _TABLE["ln2/f32"] if single else _TABLE["ln2/f64"]
        self.split_low = 12 if single else 32         # bits cleared for a "high half"


_P32, _P64 = None, None      # set after _TABLE is defined (end of file)


def _par(W):
    return _P32 if W is _F32 else _P64


# -- building blocks -----------------------------------------------------------------------
def _c(v, W):
    """A constant rounded to W (so that every renderer prints the same exact value)."""
    return ir.Const(float(W.np.type(v)), W)


def _ci(v, I):
    return ir.Const(int(v), I)


def _b(op, a, b):
    return ir.Binary(op, a, b, a.dtype)


def _cmp(op, a, b):
    return ir.Binary(op, a, b, dt.bool_)


def _u(op, a):
    return ir.Unary(op, a, a.dtype)


def _sel(cond, a, b):
    return ir.Select(cond, a, b, a.dtype)


def _and(a, b):
    return ir.Binary("and", a, b, dt.bool_)


def _or(a, b):
    return ir.Binary("or", a, b, dt.bool_)


def _not(a):
    return ir.Unary("lnot", a, dt.bool_)


def _min(a, b):
    return ir.Binary("min", a, b, a.dtype)


def _max(a, b):
    return ir.Binary("max", a, b, a.dtype)


def _bits(x, P):
    return ir.Bitcast(x, P.I)


def _float(i, P):
    return ir.Bitcast(i, P.W)


def _mul_add(a, b, c):
    """``a * b + c``: one fused multiply-add in f32 (every target has one; rounding once is
    also more accurate), a multiply and an add in f64 (the reference evaluator has no exact
    f64 fma in NumPy)."""
    return ir.fma(a, b, c) if a.dtype is _F32 else a * b + c


def _horner(t, coeffs, W):
    p = _c(coeffs[-1], W)
    for c in reversed(coeffs[:-1]):
        p = _mul_add(p, t, _c(c, W))
    return p


def _even_odd(t, coeffs, W):
    """sum c_i t^i as E(t^2) + t O(t^2), the even and the odd coefficients each by Horner:
    two independent chains of half the length (a vectorized loop's iterations overlap in
    the core), and every multiply-add takes one constant (a GPU keeps no constant in a
    register: Estrin's pairs c_2i + c_2i+1 t need one moved in each)."""
    t2 = t * t
    return _mul_add(t, _horner(t2, coeffs[1::2], W), _horner(t2, coeffs[0::2], W))


def _pow2(ki, P):
    """2^k as a float, for an int k with a normal result."""
    return _float(_b("shl", _b("add", ki, _ci(P.bias, P.I)), _ci(P.mb, P.I)), P)


def _round_int(x, P):
    """(rint(x) as a float, as an int) for |x| < 2^(mb-1) without a float -> int conversion
    (which does not vectorize everywhere): x + 1.5*2^mb rounds to the integer whose value
    sits in the low bits of the sum."""
    M = 1.5 * 2.0 ** P.mb
    t = x + _c(M, P.W)
    return t - _c(M, P.W), _b("sub", _bits(t, P), _ci(_magic_bits(P), P.I))


def _int_to_float(i, P):
    """float(i) for |i| < 2^(mb-1), by the same magic constant."""
    M = 1.5 * 2.0 ** P.mb
    return _float(_b("add", i, _ci(_magic_bits(P), P.I)), P) - _c(M, P.W)


def _magic_bits(P):
    M = 1.5 * 2.0 ** P.mb
    return int(np.array(M, P.W.np).view(P.I.np))


def _signbit(x, P):
    return _cmp("lt", _bits(x, P), _ci(0, P.I))


def _xorsign(v, s, P):
    """v with its sign flipped where s has its sign bit set (odd functions of |x|)."""
    return _float(_b("xor", _bits(v, P), _b("and", _bits(s, P), _ci(P.sign, P.I))), P)


def _isnan(x):
    return _cmp("ne", x, x)


def _finite(x):
    return _cmp("lt", _u("abs", x), ir.Const(_INF, x.dtype))


def _prep(x, name):
    if not isinstance(x, ir.Expr):
        raise TypeError(f"mathlib.{name}: expected an ir.Expr, got {type(x).__name__}")
    W = ir.compute_dtype(x.dtype)
    if not W.is_float:
        raise TypeError(f"mathlib.{name}: needs a float expression, got {x.dtype.short}; "
                        f"cast it to a float dtype first")
    if x.dtype is not W:                 # an f16/bf16 load: its value is already f32
        x = ir.Cast(x, W)
    return x, W


def _to(x, W):
    return x if x.dtype is W else ir.Cast(x, W)


def _prec(W, native=True):
    return "d" if W is _F64 else ("s" if native else "m")


# -- exponentials --------------------------------------------------------------------------
def _scale2(p, ki, P):
    """p * 2^k in two exact steps, so a denormal or overflowing result rounds once."""
    k1 = _b("shr", ki, _ci(1, P.I))
    k2 = _b("sub", ki, k1)
    return (p * _pow2(k1, P)) * _pow2(k2, P)


def _exp_parts(x, P, prec, top=None):
    """(p, plo, k) with e^x = (p + plo) 2^k, p = 1 + q rounded and plo its rounding error."""
    W = P.W
    hi, lo = P.ln2
    xc = _min(_max(x, _c(P.exp_lo, W)), _c(top or P.exp_hi, W))  # NaN stays NaN
    kf, ki = _round_int(xc * _c(_TABLE["log2e"], W), P)
    r = (xc - kf * _c(hi, W)) - kf * _c(lo, W)
    q = r + (r * r) * _horner(r, _TABLE["exp_G/" + prec], W)     # e^r - 1
    one = _c(1.0, W)
    p = one + q
    return p, (one - p) + q, ki


def _exp_core(x, P, prec):
    p, _, k = _exp_parts(x, P, prec)
    return _scale2(p, k, P)


def _exp2_core(x, P, prec):
    W = P.W
    xc = _min(_max(x, _c(P.exp2_lo, W)), _c(P.exp2_hi, W))
    kf, ki = _round_int(xc, P)
    r = xc - kf
    p = _c(1.0, W) + r * _horner(r, _TABLE["exp2_H/" + prec], W)
    return _scale2(p, ki, P)


def _expm1_core(x, P, prec):
    W = P.W
    hi, lo = P.ln2
    xc = _min(_max(x, _c(P.m1_lo, W)), _c(P.exp_hi, W))
    # k = 0 on (-0.6, 0.6): there 2^k (1 + q) - 1 would cancel (k = +-1, r ~ -+ln2/2)
    near0 = _cmp("lt", _u("abs", xc), _c(0.6, W))
    kf, ki = _round_int(xc * _c(_TABLE["log2e"], W), P)
    kf = _sel(near0, _c(0.0, W), kf)
    ki = _sel(near0, _ci(0, P.I), ki)
    hp = xc - kf * _c(hi, W)                                     # exact
    klo = kf * _c(lo, W)
    r = hp - klo
    corr = (hp - r) - klo                                        # r + corr = hp - klo
    q = r + (corr + (r * r) * _horner(r, _TABLE["expm1_G/" + prec], W))  # expm1(r + corr)
    lim = P.mb + 1
    t = _pow2(_min(ki, _ci(lim, P.I)), P)                        # 2^k, exact for k <= lim
    small = (t - _c(1.0, W)) + t * q                             # 2^k (1 + q) - 1
    large = _scale2(_c(1.0, W) + q, ki, P)                       # -1 is below the rounding
    res = _sel(_cmp("gt", ki, _ci(lim, P.I)), large, small)
    return _sel(_cmp("eq", x, _c(0.0, W)), x, res)               # keeps -0


def exp(x: ir.Expr) -> ir.Expr:
    """e^x."""
    x, W = _prep(x, "exp")
    return _exp_core(x, _par(W), _prec(W))


def exp2(x: ir.Expr) -> ir.Expr:
    """2^x."""
    x, W = _prep(x, "exp2")
    return _exp2_core(x, _par(W), _prec(W))


def expm1(x: ir.Expr) -> ir.Expr:
    """e^x - 1, accurate near 0."""
    x, W = _prep(x, "expm1")
    return _expm1_core(x, _par(W), _prec(W))


def sigmoid(x: ir.Expr) -> ir.Expr:
    """1 / (1 + e^-x), as e^x / (1 + e^x) for x < 0 so small results keep their precision."""
    x, W = _prep(x, "sigmoid")
    P = _par(W)
    p, plo, k = _exp_parts(-_u("abs", x), P, _prec(W))
    e = _scale2(p, k, P)                                         # e^-|x| in (0, 1] ...
    el = _scale2(plo, k, P)                                      # ... + el, nearly exact
    one = _c(1.0, W)
    d = one + e
    dl = ((one - d) + e) + el                                    # d + dl = 1 + e + el
    pos = one / d
    pos = pos - (pos * pos) * dl                                 # 1 / (d + dl)
    neg = e / d
    neg = neg + (el - neg * dl) / d                              # (e + el) / (d + dl)
    return _sel(_cmp("ge", x, _c(0.0, W)), pos, neg)


def tanh(x: ir.Expr) -> ir.Expr:
    """tanh(x): an odd polynomial for |x| < 0.625, else 1 - 2 / (expm1(2|x|) + 2)."""
    x, W = _prep(x, "tanh")
    P = _par(W)
    prec = _prec(W)
    a = _u("abs", x)
    w = a * a
    small = a + a * (w * _horner(w, _TABLE["tanh_P/" + prec], W))
    t = _expm1_core(a + a, P, prec)
    large = _c(1.0, W) - _c(2.0, W) / (t + _c(2.0, W))
    return _xorsign(_sel(_cmp("lt", a, _c(0.625, W)), small, large), x, P)


def _sinh_cosh(x, W, which):
    R = _F64                                   # f32 computes in f64
    P = _P64
    prec = "d" if W is _F64 else "m"
    xd = _to(x, R)
    a = _u("abs", xd)
    half = _c(0.5, R)
    p, _, k = _exp_parts(a, P, prec, top=711.0)
    big = _scale2(p, _b("sub", k, _ci(1, P.I)), P)              # e^a / 2, finite to 710.47
    far = _cmp("gt", a, _c(20.0, R))                             # e^-a below the rounding
    if which == "sinh":
        w = a * a
        small = a + a * (w * _horner(w, _TABLE["sinh_P/" + prec], R))
        t = _expm1_core(a, P, prec)
        mid = half * (t + t / (t + _c(1.0, R)))
        v = _sel(_cmp("le", a, _c(1.0, R)), small, _sel(far, big, mid))
        v = _xorsign(v, xd, P)
    else:
        e = _exp_core(a, P, prec)
        v = _sel(far, big, half * e + half / e)
    return _to(v, W)


def sinh(x: ir.Expr) -> ir.Expr:
    """sinh(x), odd: a polynomial for |x| <= 1, (t + t / (t + 1)) / 2 with t = expm1(|x|),
    e^|x| / 2 past 20 (f32 computes in f64)."""
    x, W = _prep(x, "sinh")
    return _sinh_cosh(x, W, "sinh")


def cosh(x: ir.Expr) -> ir.Expr:
    """cosh(x) = (e^|x| + e^-|x|) / 2, e^|x| / 2 past 20 (f32 computes in f64)."""
    x, W = _prep(x, "cosh")
    return _sinh_cosh(x, W, "cosh")


# -- logarithms ----------------------------------------------------------------------------
def _log_reduce(x, P):
    """(e, f) with x = 2^e (1 + f), f in [sqrt(1/2) - 1, sqrt(2) - 1), for finite x > 0."""
    W, I = P.W, P.I
    small = _cmp("lt", x, _c(P.tiny, W))
    xs = _sel(small, x * _c(2.0 ** (P.mb + 2), W), x)            # denormals -> normal
    b = _bits(xs, P)
    e = _b("sub", _b("shr", b, _ci(P.mb, I)), _ci(P.bias, I))
    e = _b("sub", e, _sel(small, _ci(P.mb + 2, I), _ci(0, I)))
    m = _float(_b("or", _b("and", b, _ci(P.mmask, I)), _ci(P.bias << P.mb, I)), P)  # [1, 2)
    big = _cmp("gt", m, _c(math.sqrt(2.0), W))
    m = _sel(big, m * _c(0.5, W), m)
    e = _b("add", e, _sel(big, _ci(1, I), _ci(0, I)))
    return _int_to_float(e, P), m - _c(1.0, W)


def _log1p_f(f, W, prec):
    """(hfsq, tail) with log1p(f) = f - (hfsq - tail), for f in the reduced range."""
    s = f / (_c(2.0, W) + f)
    w = s * s
    hfsq = (_c(0.5, W) * f) * f
    tail = s * (hfsq + w * _horner(w, _TABLE["log_U/" + prec], W))
    return hfsq, tail


def _log_special(x, v, W, neg_inf_at=0.0):
    """log-like specials: x < at -> NaN, x == at -> -inf, +inf -> +inf, NaN -> NaN."""
    at = _c(neg_inf_at, W)
    v = _sel(_cmp("lt", x, at), _c(_NAN, W), v)
    v = _sel(_cmp("eq", x, at), _c(-_INF, W), v)
    v = _sel(_cmp("eq", x, _c(_INF, W)), x, v)
    return _sel(_isnan(x), x, v)


def _log_core(x, P, prec):
    W = P.W
    ef, f = _log_reduce(x, P)
    hfsq, tail = _log1p_f(f, W, prec)
    hi, lo = P.ln2
    v = ef * _c(hi, W) + (f - (hfsq - (tail + ef * _c(lo, W))))
    return _log_special(x, v, W)


def _log2_core(x, P, prec):
    """log2 in the working type (for f32 results: f64, where one rounding suffices)."""
    W = P.W
    ef, f = _log_reduce(x, P)
    hfsq, tail = _log1p_f(f, W, prec)
    lp = f - (hfsq - tail)
    v = ef + lp * _c(_TABLE["log2e"], W)
    return _log_special(x, v, W)


def log(x: ir.Expr) -> ir.Expr:
    """The natural logarithm (log(-0) = -inf, log(x < 0) = NaN)."""
    x, W = _prep(x, "log")
    return _log_core(x, _par(W), _prec(W))


def log2(x: ir.Expr) -> ir.Expr:
    """The base-2 logarithm (f32: computed in f64)."""
    x, W = _prep(x, "log2")
    if W is _F32:
        return _to(_log2_core(_to(x, _F64), _P64, "m"), W)
    return _log2_core(x, _P64, "d")


def log1p(x: ir.Expr) -> ir.Expr:
    """log(1 + x), accurate near 0: x itself is the reduced argument for x in
    [sqrt(1/2) - 1, sqrt(2) - 1); elsewhere u = 1 + x with its rounding error corrected."""
    x, W = _prep(x, "log1p")
    P = _par(W)
    prec = _prec(W)
    one = _c(1.0, W)
    u = one + x
    c = _sel(_cmp("le", _u("abs", x), one), x - (u - one), one - (u - x))   # u + c = 1 + x
    ef, f = _log_reduce(u, P)
    direct = _and(_cmp("gt", x, _c(math.sqrt(0.5) - 1.0, W)),
                  _cmp("lt", x, _c(math.sqrt(2.0) - 1.0, W)))
    f = _sel(direct, x, f)
    ef = _sel(direct, _c(0.0, W), ef)
    cu = _sel(direct, _c(0.0, W), c / u)
    hfsq, tail = _log1p_f(f, W, prec)
    hi, lo = P.ln2
    v = ef * _c(hi, W) + (f - (hfsq - (tail + (ef * _c(lo, W) + cu))))
    v = _log_special(x, v, W, neg_inf_at=-1.0)
    return _sel(_cmp("eq", x, _c(0.0, W)), x, v)                 # keeps -0


# -- pow -----------------------------------------------------------------------------------
# Double-double helpers (f64): a value is a pair (hi, lo) with |lo| <= ulp(hi) / 2. Exact
# products by Dekker's splitting (no FMA: the renderers compile without contraction).
def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _fast_two_sum(a, b):          # |a| >= |b|
    s = a + b
    return s, b - (s - a)


def _split(a):
    c = a * _c(134217729.0, _F64)   # 2^27 + 1
    hi = c - (c - a)
    return hi, a - hi


def _two_prod(a, b):
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, (((ah * bh - p) + ah * bl) + al * bh) + al * bl


def _dd_mul(a, b):
    p, e = _two_prod(a[0], b[0])
    return _fast_two_sum(p, e + (a[0] * b[1] + a[1] * b[0]))


def _dd_add(a, b):
    s, e = _two_sum(a[0], b[0])
    return _fast_two_sum(s, e + (a[1] + b[1]))


def _dd_const(pair):
    return _c(pair[0], _F64), _c(pair[1], _F64)


def _log2_dd(ax):
    """log2(ax) as a double-double (relative error ~2^-70) for finite ax > 0:
    log1p(f) = 2s + 2s^3/3 + s^5 U2(s^2), s = f/(2 + f), with s and the s^3 term in dd."""
    R = _F64
    ef, f = _log_reduce(ax, _P64)
    two = _c(2.0, R)
    d_hi = two + f
    d_lo = f - (d_hi - two)                                      # d_hi + d_lo = 2 + f
    s_hi = f / d_hi
    p, pe = _two_prod(s_hi, d_hi)
    s_lo = (((f - p) - pe) - s_hi * d_lo) / d_hi                 # s = f / (2 + f)
    s_ = (s_hi, s_lo)
    w = _dd_mul(s_, s_)
    t = _dd_mul(_dd_mul(s_, w), _dd_const(_TABLE["2/3/dd"]))
    rest = (s_hi * (w[0] * w[0])) * _horner(w[0], _TABLE["log_U2/d"], R)
    lp = _dd_add(_dd_add((s_hi + s_hi, s_lo + s_lo), t), (rest, _c(0.0, R)))
    l2 = _dd_mul(lp, _dd_const(_TABLE["log2e/dd"]))
    return _dd_add((ef, _c(0.0, R)), l2)


def pow(x: ir.Expr, y: ir.Expr) -> ir.Expr:
    """x^y as 2^(y log2|x|) with C99's special cases: pow(x, +-0) = 1 and pow(1, y) = 1 even
    for NaN, pow(-1, +-inf) = 1, negative x with an integer y gives the sign of y's parity,
    with a non-integer finite y NaN, pow(+-0, y < 0) = inf (-inf for -0 and odd y),
    pow(+-inf, y) and |x| <> 1 with y = +-inf by the limits. f32 computes y log2|x| in f64
    (then rounds once); f64 in double-double."""
    x, W = _prep(x, "pow")
    y, Wy = _prep(y, "pow")
    if W is not Wy:
        raise TypeError(f"mathlib.pow: operands of dtypes {W.short} and {Wy.short}; "
                        f"cast them to one dtype")
    R, P = _F64, _P64
    zero = _c(0.0, R)
    xd, yd = _to(x, R), _to(y, R)
    ax = _u("abs", xd)
    special = _or(_or(_cmp("eq", ax, zero), _cmp("eq", ax, _c(_INF, R))), _isnan(ax))
    if W is _F32:
        ef, f = _log_reduce(ax, P)
        hfsq, tail = _log1p_f(f, R, "d")
        lg = ef + (f - (hfsq - tail)) * _c(_TABLE["log2e"], R)
        lg_lo = None
    else:
        lg, lg_lo = _log2_dd(ax)
        lg_lo = _sel(special, zero, lg_lo)
    lg = _sel(_cmp("eq", ax, zero), _c(-_INF, R), lg)
    lg = _sel(_cmp("eq", ax, _c(_INF, R)), ax, lg)
    lg = _sel(_isnan(ax), ax, lg)
    if lg_lo is None:
        r = _exp2_core(yd * lg, P, "m")
    else:
        wh, we = _two_prod(yd, lg)
        wl = we + yd * lg_lo                                     # y log2|x| = wh + wl
        wl = _sel(_cmp("lt", _u("abs", wh), _c(2048.0, R)), wl, zero)   # else saturated
        whc = _min(_max(wh, _c(P.exp2_lo, R)), _c(P.exp2_hi, R))
        kf, ki = _round_int(whc, P)
        rr = (whc - kf) + wl
        p = _c(1.0, R) + rr * _horner(rr, _TABLE["exp2_H/d"], R)
        r = _scale2(p, ki, P)
    fl = _u("floor", yd)
    yint = _cmp("eq", fl, yd)                                    # true for +-inf too
    half = yd * _c(0.5, R)
    yodd = _and(yint, _cmp("ne", _u("floor", half), half))
    r = _sel(_and(_signbit(xd, P), yodd), -r, r)
    neg_finite = _and(_cmp("lt", xd, zero), _cmp("gt", xd, _c(-_INF, R)))
    r = _sel(_and(neg_finite, _not(yint)), _c(_NAN, R), r)
    r = _sel(_and(_cmp("eq", xd, _c(-1.0, R)), _cmp("eq", _u("abs", yd), _c(_INF, R))),
             _c(1.0, R), r)
    r = _sel(_or(_cmp("eq", xd, _c(1.0, R)), _cmp("eq", yd, zero)), _c(1.0, R), r)
    return _to(r, W)


# -- erf -----------------------------------------------------------------------------------
def _piecewise(a, pieces, W):
    """A polynomial in (a - mid) whose coefficients and mid are selected by the piece that
    holds a (pieces sorted: (lo, mid, c0, c1, ...)); one Horner evaluation for all."""
    n = max(len(p) - 2 for p in pieces)
    conds = [_cmp("ge", a, _c(p[0], W)) for p in pieces[1:]]

    def pick(vals):
        v = _c(vals[0], W)
        for cond, val in zip(conds, vals[1:]):
            v = _sel(cond, _c(val, W), v)
        return v

    mid = pick([p[1] for p in pieces])
    coeffs = [pick([(p[2 + j] if 2 + j < len(p) else 0.0) for p in pieces]) for j in range(n)]
    t = a - mid
    acc = coeffs[-1]
    for c in reversed(coeffs[:-1]):
        acc = acc * t + c
    return acc


def erf(x: ir.Expr) -> ir.Expr:
    """The error function, odd: a + a Q(a^2) near 0, then 1 - erfc(|x|) up to where erf
    rounds to 1. f32: Q on [0, 1) (a + a Q as one fused multiply-add), erfc on [1, 3.92)
    as one polynomial in a - 2.453125 evaluated as even and odd halves (no per-piece
    coefficient selects, short dependency chains, one constant per multiply-add: this is
    GELU's cost). f64: Q on [0, 0.84375), erfc from piecewise fits."""
    x, W = _prep(x, "erf")
    P = _par(W)
    prec = _prec(W)
    a = _u("abs", x)
    w = a * a
    if W is _F32:
        (lo, mid, *coeffs), = _TABLE["erfc/s"]
        small = ir.fma(a, _horner(w, _TABLE["erf_Q1/s"], W), a)
        big = _c(1.0, W) - _even_odd(a - _c(mid, W), coeffs, W)
        top = _ERFC_PIECES["s"][-1][1]
        # a NaN fails both comparisons and takes the small branch, which propagates it
        v = _sel(_cmp("ge", a, _c(lo, W)),
                 _sel(_cmp("ge", a, _c(top, W)), _c(1.0, W), big), small)
        return _xorsign(v, x, P)
    small = a + a * _horner(w, _TABLE["erf_Q/" + prec], W)
    pieces = _TABLE["erfc/" + prec]
    big = _c(1.0, W) - _piecewise(a, pieces, W)
    top = _ERFC_PIECES[prec][-1][1]
    v = _sel(_cmp("lt", a, _c(pieces[0][0], W)), small,
             _sel(_cmp("lt", a, _c(top, W)), big, _c(1.0, W)))
    v = _sel(_isnan(a), a, v)
    return _xorsign(v, x, P)


# -- trigonometric -------------------------------------------------------------------------
def _reduce_f32(x):
    """Payne-Hanek for f32 x, in f64: (r, q) with |x| = (q + 4n) pi/2 + r, |r| <= pi/4.
    |x| (24 bits) times 24-bit chunks of 2/pi is exact in f64; the chunks start where the
    product's bits stop mattering mod 4 (by the exponent group of x)."""
    R = _F64
    ax = _u("abs", x)
    axd = ir.Cast(ax, R)
    groups = _TABLE["2/pi/ph"]
    conds = [_cmp("ge", ax, _c(2.0 ** (eg + 23), _F32)) for eg in _PH_GROUPS[1:]]
    p = []
    for i in range(5):
        ci = _c(groups[0][i], R)
        for cond, g in zip(conds, groups[1:]):
            ci = _sel(cond, _c(g[i], R), ci)
        p.append(axd * ci)                                       # exact
    four, quarter = _c(4.0, R), _c(0.25, R)
    p0 = p[0] - four * _u("floor", p[0] * quarter)               # mod 4, exact
    p1 = p[1] - four * _u("floor", p[1] * quarter)
    kf, ki = _round_int((p0 + p1) + p[2], _P64)
    f = (((p0 - kf) + p1) + p[2]) + (p[3] + p[4])                 # in [-1/2, 1/2]
    r = f * _c(_TABLE["pio2"][0], R)
    return r, None, _b("and", ki, _ci(3, dt.int64))


def _reduce_f64(x):
    """Cody-Waite with k = kh + kl (kh: k with its low 26 bits cleared) and pi/2 in seven
    27-bit pieces, so every product k_part * piece is exact up to k < 2^52; |x| < 2^45 keeps
    the rounding of x 2/pi from pushing |r| past the polynomials' interval."""
    R = _F64
    ax = _u("abs", x)
    kf, ki = _round_int(ax * _c(_TABLE["2/pi"], R), _P64)         # garbage past 2^51: NaN
    kh = _u("floor", kf * _c(2.0 ** -26, R)) * _c(2.0 ** 26, R)
    kl = kf - kh
    r, lo = ax, None
    for piece in _TABLE["pio2/cw7"]:
        pc = _c(piece, R)
        for t in (kh * pc, kl * pc):
            rn = r - t
            err = (r - rn) - t                 # rounding error (0 while the steps are exact)
            lo = err if lo is None else lo + err
            r = rn
    return r, lo, _b("and", ki, _ci(3, dt.int64))


def _trig(x, which):
    x, W = _prep(x, which)
    R = _F64
    I = dt.int64
    if W is _F32:
        r, lo, q = _reduce_f32(x)
        prec = "m"
    else:
        r, lo, q = _reduce_f64(x)          # the reduced argument is r + lo
        prec = "d"
    w = r * r
    hw = _c(0.5, R) * w
    s = r + r * (w * _horner(w, _TABLE["sin_S/" + prec], R))
    c = _c(1.0, R) - (hw - (w * w) * _horner(w, _TABLE["cos_C/" + prec], R))
    if lo is not None:                     # sin(r + lo) ~ s + lo cos(r), cos(r + lo) ~ c - lo r
        s = s + lo * (_c(1.0, R) - hw)
        c = c - lo * r
    odd = _cmp("ne", _b("and", q, _ci(1, I)), _ci(0, I))
    if which == "sin":
        v = _sel(odd, c, s)
        neg = _cmp("ne", _b("and", q, _ci(2, I)), _ci(0, I))
    elif which == "cos":
        v = _sel(odd, s, c)
        neg = _cmp("ne", _b("and", _b("add", q, _ci(1, I)), _ci(2, I)), _ci(0, I))
    else:
        v = _sel(odd, c, s) / _sel(odd, s, c)
        neg = odd
    v = _sel(neg, -v, v)
    if which != "cos":
        v = _sel(_signbit(x, _par(W)), -v, v)
    if W is _F32:
        v = _sel(_finite(x), v, _c(_NAN, R))
    else:       # beyond 2^45 the reduction is not exact: NaN rather than a wrong value
        v = _sel(_cmp("lt", _u("abs", x), _c(2.0 ** 45, R)), v, _c(_NAN, R))
    return _to(v, W)


def sin(x: ir.Expr) -> ir.Expr:
    """sin(x); f32: exact reduction over the whole range."""
    return _trig(x, "sin")


def cos(x: ir.Expr) -> ir.Expr:
    """cos(x); f32: exact reduction over the whole range."""
    return _trig(x, "cos")


def tan(x: ir.Expr) -> ir.Expr:
    """tan(x) = sin(r)/cos(r) or -cos(r)/sin(r) by quadrant."""
    return _trig(x, "tan")


# -- inverse trigonometric -----------------------------------------------------------------
def _atan_pos(a, W, prec):
    """atan(a) for a >= 0 (or NaN): a reduction to |t| <= 7/16 around 0, 1/2, 1, 3/2, inf."""
    one = _c(1.0, W)
    cuts = [7 / 16, 11 / 16, 19 / 16, 39 / 16]
    conds = [_cmp("ge", a, _c(v, W)) for v in cuts]
    nums = [a, (a + a) - one, a - one, a - _c(1.5, W), _c(-1.0, W)]
    dens = [one, _c(2.0, W) + a, a + one, one + _c(1.5, W) * a, a]
    bases = [(0.0, 0.0), _TABLE["atan0.5"], _TABLE["pio4"], _TABLE["atan1.5"], _TABLE["pio2"]]
    num, den, bh, bl = nums[0], dens[0], _c(0.0, W), _c(0.0, W)
    for cond, n, d, (h, lo) in zip(conds, nums[1:], dens[1:], bases[1:]):
        num = _sel(cond, n, num)
        den = _sel(cond, d, den)
        bh = _sel(cond, _c(h, W), bh)
        bl = _sel(cond, _c(lo, W), bl)
    t = num / den
    w = t * t
    return bh + (t + (t * (w * _horner(w, _TABLE["atan_A/" + prec], W)) + bl))


def atan(x: ir.Expr) -> ir.Expr:
    """atan(x), odd; f32 computes in f64."""
    x, W = _prep(x, "atan")
    xd = _to(x, _F64)
    v = _atan_pos(_u("abs", xd), _F64, _prec(W, native=False))
    return _to(_xorsign(v, xd, _P64), W)


def atan2(y: ir.Expr, x: ir.Expr) -> ir.Expr:
    """The angle of (x, y) in [-pi, pi], with C99's signed zeros and infinities:
    atan2(+-0, -0) = +-pi, atan2(+-inf, -inf) = +-3pi/4, ..."""
    y, W = _prep(y, "atan2")
    x, Wx = _prep(x, "atan2")
    if W is not Wx:
        raise TypeError(f"mathlib.atan2: operands of dtypes {W.short} and {Wx.short}; "
                        f"cast them to one dtype")
    R, P = _F64, _P64
    prec = _prec(W, native=False)
    yd, xd = _to(y, R), _to(x, R)
    ax, ay = _u("abs", xd), _u("abs", yd)
    swap = _cmp("gt", ay, ax)
    t = _sel(swap, ax, ay) / _sel(swap, ay, ax)                  # in [0, 1]
    zero, inf = _c(0.0, R), _c(_INF, R)
    t = _sel(_and(_cmp("eq", ax, zero), _cmp("eq", ay, zero)), zero, t)
    t = _sel(_and(_cmp("eq", ax, inf), _cmp("eq", ay, inf)), _c(1.0, R), t)
    base = _atan_pos(t, R, prec)
    # v = H -+ base + L: base (x >= 0), pi/2 - base (swapped), pi - base (x < 0),
    # pi/2 + base (swapped, x < 0); x = -0 counts as negative only for y = 0
    ph, pl = _TABLE["pio2"]
    pih, pil = _TABLE["pi"]
    neg = _and(_signbit(xd, P), _or(_cmp("ne", ax, zero), _cmp("eq", ay, zero)))
    hi = _sel(swap, _c(ph, R), _sel(neg, _c(pih, R), zero))
    lo = _sel(swap, _c(pl, R), _sel(neg, _c(pil, R), zero))
    b = _sel(_and(swap, neg), -base, base)
    v = _sel(_or(swap, neg), (hi - b) + lo, base)
    v = _xorsign(v, yd, P)
    v = _sel(_or(_isnan(xd), _isnan(yd)), _c(_NAN, R), v)
    return _to(v, W)


def _asin_parts(a, W, prec):
    """For a = |x| <= 1: asin(a) for a <= 1/2, and for a > 1/2 the pieces of
    2 asin(s), s = sqrt((1 - a)/2) = sh + corr (sh: s with its low bits cleared)."""
    P = _par(W)
    w = a * a
    small = a + a * (w * _horner(w, _TABLE["asin_B/" + prec], W))
    z = (_c(1.0, W) - a) * _c(0.5, W)
    s = _u("sqrt", z)
    sh = _float(_b("and", _bits(s, P), _ci(-(1 << P.split_low), P.I)), P)
    corr = _sel(_cmp("eq", z, _c(0.0, W)), _c(0.0, W), (z - sh * sh) / (s + sh))
    rest = corr + s * (z * _horner(z, _TABLE["asin_B/" + prec], W))   # 2 asin(s) = 2 (sh + rest)
    return small, sh, rest


def asin(x: ir.Expr) -> ir.Expr:
    """asin(x), odd; NaN outside [-1, 1]; f32 computes in f64."""
    x, W = _prep(x, "asin")
    R = _F64
    xd = _to(x, R)
    a = _u("abs", xd)
    small, sh, rest = _asin_parts(a, R, _prec(W, native=False))
    ph, pl = _TABLE["pio2"]
    two = _c(2.0, R)
    big = (_c(ph, R) - two * sh) + (_c(pl, R) - two * rest)
    v = _sel(_cmp("le", a, _c(0.5, R)), small, big)
    v = _sel(_cmp("gt", a, _c(1.0, R)), _c(_NAN, R), v)
    return _to(_xorsign(v, xd, _P64), W)


def acos(x: ir.Expr) -> ir.Expr:
    """acos(x) in [0, pi]; NaN outside [-1, 1]; f32 computes in f64."""
    x, W = _prep(x, "acos")
    R = _F64
    prec = _prec(W, native=False)
    xd = _to(x, R)
    a = _u("abs", xd)
    _, sh, rest = _asin_parts(a, R, prec)
    w = xd * xd
    ph, pl = _TABLE["pio2"]
    pih, pil = _TABLE["pi"]
    two = _c(2.0, R)
    mid = _c(ph, R) - (xd + (xd * (w * _horner(w, _TABLE["asin_B/" + prec], R)) - _c(pl, R)))
    pos = two * (sh + rest)
    neg = (_c(pih, R) - two * sh) + (_c(pil, R) - two * rest)
    v = _sel(_cmp("le", a, _c(0.5, R)), mid, _sel(_cmp("gt", xd, _c(0.0, R)), pos, neg))
    v = _sel(_cmp("gt", a, _c(1.0, R)), _c(_NAN, R), v)
    return _to(v, W)


# -- the coefficient table (generated by _derive_table below; do not edit by hand) ----------
_TABLE = {
    '2/3/dd': (0.6666666666666666, 3.700743415417188e-17),
    '2/pi': 0.6366197723675814,
    '2/pi/ph': ((0.6366195678710938, 2.0449648729936598e-07, 2.937095214933759e-16,
                 3.254378137995797e-23, 2.4711387440048342e-29),
                (2.0449647308851127e-07, 1.450455830746475e-14, 5.9617742102116686e-21,
                 2.266597581117686e-28, 2.2383930741152562e-35),
                (2.4187818631685176e-13, 5.3395616833071787e-20, 2.650040314505971e-27,
                 1.6682867226540637e-34, 4.420675854868841e-42),
                (1.0760570283912713e-19, 2.5268259418630844e-26, 9.372006155819897e-34,
                 3.885898622988778e-41, 8.452990338021245e-49),
                (7.696703845873134e-26, 1.0181664073134233e-32, 3.1436545828239504e-40,
                 1.7266764760078128e-47, 6.63043764385653e-55)),
    'asin_B/d': (0.16666666666666669, 0.07499999999998433, 0.04464285714635543,
                 0.030381944138531247, 0.02237217294214989, 0.017352392720869973,
                 0.013971212973552933, 0.011479177415184906, 0.01032281435018578,
                 0.005457506718640358, 0.01740087944269402, -0.014851887071247204,
                 0.028757851367421566),
    'asin_B/m': (0.16666666665495086, 0.07500000598829049, 0.044642358484883196,
                 0.030397634130580702, 0.022132443623426794, 0.019306260869368045,
                 0.0054431851027481075, 0.02930523970533579),
    'asin_B/s': (0.1666666567325592, 0.07500094175338745, 0.04459940269589424,
                 0.031100662425160408, 0.017149237915873528, 0.03369084745645523),
    'atan0.5': (0.4636476090008061, 2.2698777452961687e-17),
    'atan1.5': (0.982793723247329, 1.3903311031230998e-17),
    'atan_A/d': (-0.3333333333333333, 0.19999999999999404, -0.14285714285565465,
                 0.111111110965279, -0.09090908350382436, 0.07692285419714515,
                 -0.06666239748865294, 0.05876924062763387, -0.05216532007308444,
                 0.044916556747777434, -0.033114228762660534, 0.014759380407779158),
    'atan_A/m': (-0.33333333329456305, 0.1999999801349833, -0.1428554691787246, 0.111057763655916,
                 -0.09008830795770216, 0.070272951294417, -0.0382748653749744),
    'atan_A/s': (-0.3333333134651184, 0.19999311864376068, -0.14256498217582703,
                 0.1066763624548912, -0.062135886400938034),
    'cos_C/d': (0.041666666666666664, -0.0013888888888887322, 2.4801587298651292e-05,
                -2.755731721268659e-07, 2.0876134024090145e-09, -1.1381754653662937e-11),
    'cos_C/m': (0.04166666666422613, -0.0013888887635227975, 2.4800580601354642e-05,
                -2.7298407652795173e-07),
    'cos_C/s': (0.0416666641831398, -0.0013888290850445628, 2.454541936458554e-05),
    'erf_Q/d': (0.12837916709551256, -0.376126389031834, 0.11283791670935311,
                -0.02686617064077985, 0.005223977576377844, -0.000854832379116413,
                0.00012055199941321885, -1.4922121574443055e-05, 1.640162967934702e-06,
                -1.571446067260244e-07, 1.0726571432176348e-08),
    'erf_Q/m': (0.128379167093007, -0.37612638858109004, 0.11283790337501085,
                -0.02686601995809338, 0.005223138235669831, -0.0008522779413950907,
                0.00011619446431983207, -1.0940391869317452e-05),
    'erf_Q1/s': (0.12837916612625122, -0.37612637877464294, 0.11283782124519348,
                 -0.026865430176258087, 0.005221031606197357, -0.0008484080317430198,
                 0.00011265958892181516, -9.667044650996104e-06),
    'erfc/d': ((0.84375, 1.046875, 0.13873857453792443, -0.37713011140328806, 0.3948080853753183,
                -0.14983310578376116, -0.05317442881685727, 0.0672167238021556,
                -0.009275988161863058, -0.01322946754439435, 0.005450107043081196,
                0.00130449012159168, -0.0012418786366032687, 2.2893839537465218e-05,
                0.00018140373968700477, -3.1933346569686056e-05),
               (1.25, 1.5, 0.03389485352468928, -0.11893028922362937, 0.17839543383543424,
                -0.13875200409423388, 0.04459885846137387, 0.014866286152857906,
                -0.019326172240245812, 0.004743053210411032, 0.0023626886703155365,
                -0.0017098199765491864, 9.26544017240773e-05, 0.0002544584933527021,
                -7.465151445293923e-05, -1.8075920572403394e-05),
               (1.75, 2.0, 0.0046777349810472645, -0.020666985354092053, 0.04133397070818682,
                -0.048222965826214104, 0.03444497558945934, -0.013089090724435287,
                -0.00045926627449164036, 0.003378888098685139, -0.0015910328808141254,
                5.011757480717457e-05, 0.00026287438769069803, -0.00010374750958454696,
                -6.074130631954701e-06, 1.6031758119179226e-05),
               (2.25, 2.5, 0.00040695201744495886, -0.0021782842303527095, 0.005445710575881931,
                -0.008350089549685842, 0.008622375078439461, -0.006117348213457537,
                0.002798490160871846, -0.0005424100724970212, -0.00026067034699050643,
                0.0002502858970725896, -7.879733510925926e-05, -5.1489978280742335e-06,
                1.4035204284332121e-05, -4.5512060923589465e-06),
               (2.75, 3.0, 2.209049699858544e-05, -0.0001392530519467182, 0.00041775915584015764,
                -0.0007891006277114849, 0.0010443978896391081, -0.0010165472775254816,
                0.0007380411703903596, -0.0003905717466894381, 0.00013477733124363657,
                -1.3904496229270915e-05, -1.5623439295480075e-05, 1.0764385535705361e-05,
                -2.9385694848626878e-06),
               (3.25, 3.5, 7.430983723414128e-07, -5.399426777442052e-06, 1.889799372086388e-05,
                -4.2295509730525097e-05, 6.771781082535254e-05, -8.211628552302522e-05,
                7.774424737423752e-05, -5.819257051931355e-05, 3.425912140443024e-05,
                -1.5335569389835968e-05, 4.642460752855096e-06, -3.8329170827071235e-07,
                -4.623139739788662e-07),
               (3.75, 4.0, 1.5417257896815907e-08, -1.2698234671818735e-07, 5.079293908655026e-07,
                -1.3121509166439531e-06, 2.4549912914284026e-06, -3.534341880651546e-06,
                4.057842327610416e-06, -3.795972983725561e-06, 2.924867343915333e-06,
                -1.8629558787712513e-06, 9.92682952671003e-07, -4.039294111613773e-07),
               (4.25, 4.625, 6.121610513034226e-11, -5.789280368036833e-10, 2.677542596812759e-09,
                -8.06280027613168e-09, 1.775267248599392e-08, -3.042246779041845e-08,
                4.216860241455105e-08, -4.850708000414107e-08, 4.702804933796345e-08,
                -3.857356559050131e-08, 2.750670318877188e-08, -1.8690759783516535e-08,
                9.46449174979246e-09),
               (5.0, 5.46875, 1.0421866994338678e-14, -1.1585973326550624e-13,
                6.341045238439905e-13, -2.2709428941073613e-12, 5.972047098403401e-12,
                -1.2444736195293426e-11, 2.159741523177096e-11, -3.007598908510142e-11,
                3.210907885285778e-11, -3.686827457944867e-11, 5.2160037282351536e-11,
                -3.755659003234783e-11)),
    'erfc/s': ((1.0, 2.453125, 0.0005219278973527253, -0.002747564809396863, 0.006740119308233261,
                -0.010107086040079594, 0.010150249116122723, -0.0069274562411010265,
                0.002958046505227685, -0.0004251599602866918, -0.00037349987542256713,
                0.00028860746533609927, -7.472208380931988e-05, -1.6209254681598395e-05,
                1.7635711628827266e-05, -3.0959604373492766e-06, -1.1374885389159317e-06,
                3.888801245466311e-07),),
    'exp2_H/d': (0.6931471805599453, 0.24022650695910097, 0.0555041086648216,
                 0.009618129107606715, 0.0013333558146416842, 0.0001540353044202707,
                 1.525273382999124e-05, 1.3215442410711872e-06, 1.0178062351388103e-07,
                 7.072621356539349e-09, 4.4549794711760616e-10),
    'exp2_H/m': (0.6931471805568075, 0.24022650695888328, 0.055504109065657, 0.0096181291354023,
                 0.0013333478154201467, 0.0001540347496519024, 1.530380284962428e-05,
                 1.3250876278904456e-06),
    'exp2_H/s': (0.6931471824645996, 0.24022650718688965, 0.055503569543361664,
                 0.009618082083761692, 0.0013390978565439582, 0.00015453262312803417),
    'exp_G/d': (0.5, 0.1666666666666667, 0.04166666666666667, 0.008333333333326084,
                0.0013888888888883711, 0.0001984126987500228, 2.480158732567746e-05,
                2.755725517000089e-06, 2.755727347871858e-07, 2.5105312729622103e-08,
                2.09147553258932e-09),
    'exp_G/m': (0.5, 0.1666666671931248, 0.041666666719295684, 0.008333298344023092,
                0.001388885390994504, 0.00019899390183679232, 2.485969439475207e-05),
    'exp_G/s': (0.5, 0.16666576266288757, 0.04166655242443085, 0.00836323294788599,
                0.0013926250394433737),
    'expm1_G/d': (0.5, 0.16666666666666666, 0.041666666666669114, 0.008333333333333496,
                  0.0013888888888095201, 0.0001984126984074099, 2.480158824204419e-05,
                  2.7557319850651275e-06, 2.7556815622305655e-07, 2.5051772797984656e-08,
                  2.100099008442608e-09, 1.6141838486743414e-10),
    'expm1_G/m': (0.49999999996364153, 0.16666666666336413, 0.04166666989825759,
                  0.008333333626871815, 0.0013888440263074636, 0.00019840862307510994,
                  2.500074578980825e-05, 2.773826790991858e-06),
    'expm1_G/s': (0.5, 0.1666666865348816, 0.0416666679084301, 0.008333018980920315,
                  0.0013888574903830886, 0.0002001559332711622, 2.497579225746449e-05),
    'ln2': 0.6931471805599453,
    'ln2/f32': (0.693145751953125, 1.428606765330187e-06),
    'ln2/f64': (0.6931471805598903, 5.497923018708371e-14),
    'log2e': 1.4426950408889634,
    'log2e/dd': (1.4426950408889634, 2.0355273740931033e-17),
    'log_U/d': (0.666666666666667, 0.3999999999989889, 0.28571428626253836, 0.22222211089379496,
                0.1818289243253687, 0.15331611722055008, 0.14617807153417325),
    'log_U/m': (0.6666666666737868, 0.3999999879244169, 0.28571755535032944, 0.22191337428065783,
                0.19363884986633198),
    'log_U/s': (0.6666668653488159, 0.3998875916004181, 0.29580986499786377),
    'log_U2/d': (0.4, 0.2857142857142937, 0.22222222221652765, 0.18181818336099848,
                 0.1538459488700718, 0.1333480879881234, 0.11706126464563398,
                 0.11724327060846747),
    'pi': (3.141592653589793, 1.2246467991473532e-16),
    'pio2': (1.5707963267948966, 6.123233995736766e-17),
    'pio2/cw7': (1.570796325802803, 9.920935184482005e-10, 6.123233932053594e-17,
                 6.368317116855041e-25, 4.665590894014408e-33, 2.316557719485773e-41,
                 5.562270976614843e-50),
    'pio4': (0.7853981633974483, 3.061616997868383e-17),
    'sin_S/d': (-0.16666666666666666, 0.008333333333333331, -0.00019841269841264821,
                2.7557319219150783e-06, -2.5052106167335705e-08, 1.6058521349954986e-10,
                -7.586094789672621e-13),
    'sin_S/m': (-0.16666666666663743, 0.008333333330987867, -0.0001984126682858738,
                2.7555964316089623e-06, -2.480318338656292e-08),
    'sin_S/s': (-0.1666666716337204, 0.008333331905305386, -0.00019840063760057092,
                2.7246869649388827e-06),
    'sinh_P/d': (0.16666666666666666, 0.008333333333333333, 0.0001984126984126984,
                 2.7557319223985893e-06, 2.5052108385441677e-08, 1.605904383683686e-10,
                 7.647163728356056e-13, 2.811457741336026e-15, 8.22022162534532e-18,
                 1.9767279197401816e-20),
    'sinh_P/m': (0.16666666666666666, 0.008333333333333299, 0.00019841269841324198,
                 2.7557319191381816e-06, 2.5052117695907823e-08, 1.6057679623801638e-10,
                 7.746178593018827e-13),
    'tanh_P/d': (-0.3333333333333333, 0.13333333333333042, -0.05396825396789699,
                 0.021869488519008305, -0.008863235103240878, 0.0035921217511549622,
                 -0.0014557754120478055, 0.0005896606577757043, -0.0002375906496055562,
                 9.257116129556769e-05, -3.12011014257974e-05, 6.485163482793113e-06),
    'tanh_P/m': (-0.3333333333311593, 0.1333333326200621, -0.05396821538108298,
                 0.021868688552418258, -0.008855023039538659, 0.0035457191722516653,
                 -0.001306687587051573, 0.00032424804641529166),
    'tanh_P/s': (-0.3333333432674408, 0.13333304226398468, -0.053959257900714874,
                 0.02176891826093197, -0.008343945257365704, 0.002292744815349579),
}

_P32, _P64 = _P(_F32), _P(_F64)

# Measured max error in ulps, (f32, f64): see the module docstring for how.
MAX_ULP = {"exp": (1.049, 0.87), "exp2": (1.140, 1.04), "expm1": (1.222, 1.22),
           "log": (0.843, 0.73), "log2": (0.500, 1.49), "log1p": (0.843, 0.74),
           "erf": (1.065, 0.80), "tanh": (1.307, 1.22), "sigmoid": (1.504, 1.22),
           "sin": (0.500, 1.24), "cos": (0.500, 1.35), "tan": (0.500, 2.70),
           "sinh": (0.500, 1.11), "cosh": (0.500, 1.15), "asin": (0.500, 0.58),
           "acos": (0.500, 0.73), "atan": (0.500, 0.84), "atan2": (0.500, 1.42),
           "pow": (0.500, 1.07)}
for _name, (_e32, _e64) in MAX_ULP.items():
    _how = "2^30 random pairs" if _name in ("pow", "atan2") else "all 2^32 inputs"
    globals()[_name].__doc__ += (f"\n\n    Max error: {_e32} ulp (f32, {_how}), {_e64} ulp "
                                 f"(f64, sampled).")
del _name, _e32, _e64, _how


# -- deriving the coefficients (run `python -m ember.kernel.mathlib` to print the table) ----
# Everything below uses Python's decimal module at ~110 significant digits: pi by Machin's
# formula, the functions by their power series (or exp/ln from decimal), polynomial fits by
# Chebyshev interpolation, then rounding to the working float type. Not run at import.
_DPREC = 110


def _derive_table() -> dict:
    from decimal import Decimal as D, localcontext
    from fractions import Fraction as Fr
    import math

    with localcontext() as ctx:
        ctx.prec = _DPREC
        eps = D(10) ** -(_DPREC - 10)
        fact = [math.factorial(i) for i in range(700)]

        def series(coef, x):
            s, p, k = D(0), D(1), 0
            while True:
                term = coef(k) * p
                s += term
                if k > 3 and abs(term) < eps:
                    return s
                p *= x
                k += 1

        def atan_small(x):          # |x| <= 1/2
            return x * series(lambda k: D((-1) ** k) / (2 * k + 1), x * x)

        pi = 4 * (4 * _atan_inv(5, eps) - _atan_inv(239, eps))      # Machin
        ln2 = D(2).ln()
        sqrtpi = pi.sqrt()

        def atan(x):                # any x >= 0
            if x > D("0.5"):
                return 2 * atan(x / (1 + (1 + x * x).sqrt()))
            return atan_small(x)

        def erf(a):
            with localcontext() as c2:
                c2.prec = _DPREC + 40
                a = +a
                s = series(lambda n: D((-1) ** n) / (fact[n] * (2 * n + 1)), a * a)
                return +(2 / sqrtpi * a * s)

        def erfc(a):
            with localcontext() as c2:
                c2.prec = _DPREC + 40
                return +(1 - erf(a))

        def cB(k):
            return D(fact[2 * k]) / (D(4) ** k * fact[k] ** 2 * (2 * k + 1))

        g = {
            # e^r = 1 + r + r^2 G(r)
            "exp_G": lambda r: series(lambda k: D(1) / fact[k + 2], r),
            "expm1_G": lambda r: series(lambda k: D(1) / fact[k + 2], r),
            # 2^r = 1 + r H(r)
            "exp2_H": lambda r: series(lambda k: ln2 ** (k + 1) / fact[k + 1], r),
            # log1p(f) = f - f^2/2 + s (f^2/2 + w U(w)),  s = f/(2+f), w = s^2
            "log_U": lambda w: series(lambda k: D(2) / (2 * k + 3), w),
            # log1p(f) = 2s + 2s^3/3 + s^5 U2(w)
            "log_U2": lambda w: series(lambda k: D(2) / (2 * k + 5), w),
            # sinh(a) = a + a w P(w), w = a^2
            "sinh_P": lambda w: series(lambda k: D(1) / fact[2 * k + 3], w),
            # tanh(a) = a + a w P(w), w = a^2
            "tanh_P": lambda w: ((lambda a, e: ((e - 1) / (e + 1) / a - 1) / w)(
                w.sqrt(), (2 * w.sqrt()).exp())),
            # erf(a) = a + a Q(w), w = a^2
            "erf_Q": lambda w: 2 / sqrtpi * series(
                lambda n: D((-1) ** n) / (fact[n] * (2 * n + 1)), w) - 1,
            "erf_Q1": lambda w: 2 / sqrtpi * series(
                lambda n: D((-1) ** n) / (fact[n] * (2 * n + 1)), w) - 1,
            # sin(r) = r + r w S(w)
            "sin_S": lambda w: series(lambda k: D((-1) ** (k + 1)) / fact[2 * k + 3], w),
            # cos(r) = 1 - w/2 + w^2 C(w)
            "cos_C": lambda w: series(lambda k: D((-1) ** k) / fact[2 * k + 4], w),
            # atan(t) = t + t w A(w)
            "atan_A": lambda w: series(lambda k: D((-1) ** (k + 1)) / (2 * k + 3), w),
            # asin(a) = a + a w B(w)
            "asin_B": lambda w: series(lambda k: cB(k + 1), w),
            "erfc": erfc,
        }

        def cheb(fn, lo, hi, n, origin):
            """Coefficients (in powers of t - origin) of the degree n-1 polynomial
            interpolating fn at the n Chebyshev points of [lo, hi]."""
            lo, hi, origin = D(lo), D(hi), D(origin)
            mid, half = (lo + hi) / 2, (hi - lo) / 2
            us = [_dcos(pi * (2 * k + 1) / (2 * n), eps) for k in range(n)]
            fs = [fn(mid + half * u) for u in us]
            c = [D(0)] * n
            for k in range(n):
                t0, t1 = D(1), us[k]
                for j in range(n):
                    tj = t0 if j == 0 else t1 if j == 1 else None
                    if j >= 2:
                        t0, t1 = t1, 2 * us[k] * t1 - t0
                        tj = t1
                    c[j] += fs[k] * tj
            c = [v * 2 / n for v in c]
            c[0] /= 2
            # Chebyshev -> monomials in u = (t - mid) / half
            mono = [D(0)] * n
            tp, tc = [D(1)], [D(0), D(1)]
            for j in range(n):
                if j == 0:
                    tj = tp
                elif j == 1:
                    tj = tc
                else:
                    tn = [D(0)] + [2 * v for v in tc]
                    for i, v in enumerate(tp):
                        tn[i] -= v
                    tp, tc = tc, tn
                    tj = tc
                for i, v in enumerate(tj):
                    mono[i] += c[j] * v
            a = [mono[i] / half ** i for i in range(n)]          # powers of (t - mid)
            shift = origin - mid                                  # t - mid = s + shift
            b = [D(0)] * n
            for i in range(n):
                for j in range(i + 1):
                    b[j] += a[i] * math.comb(i, j) * (shift ** (i - j) if i > j else 1)
            return b

        def rnd(v, w):
            return float(np.float32(float(v))) if w == "f32" else float(v)

        table = {}
        h = float(ln2 / 2) * 1.001
        wl = float(((D(2).sqrt() - 1) / (D(2).sqrt() + 1)) ** 2) * 1.001
        wq = float((pi / 4) ** 2) * 1.01
        fits = {   # name: (lo, hi, {precision: n})
            "exp_G": (-h, h, {"s": 5, "m": 7, "d": 11}),
            "expm1_G": (-0.6, 0.6, {"s": 7, "m": 8, "d": 12}),
            "exp2_H": (-0.5005, 0.5005, {"s": 6, "m": 8, "d": 11}),
            "log_U": (0.0, wl, {"s": 3, "m": 5, "d": 7}),
            "log_U2": (0.0, wl, {"d": 8}),
            "sinh_P": (0.0, 1.0, {"m": 7, "d": 10}),
            "tanh_P": (0.0, 0.625 ** 2, {"s": 6, "m": 8, "d": 12}),
            "erf_Q": (0.0, 0.84375 ** 2, {"m": 8, "d": 11}),
            "erf_Q1": (0.0, 1.0, {"s": 8}),
            "sin_S": (0.0, wq, {"s": 4, "m": 5, "d": 7}),
            "cos_C": (0.0, wq, {"s": 3, "m": 4, "d": 6}),
            "atan_A": (0.0, (7 / 16) ** 2 * 1.001, {"s": 5, "m": 7, "d": 12}),
            "asin_B": (0.0, 0.25, {"s": 6, "m": 8, "d": 13}),
        }
        for name, (lo, hi, ns) in fits.items():
            for p, n in ns.items():
                w = "f32" if p == "s" else "f64"
                table[f"{name}/{p}"] = tuple(rnd(v, w) for v in cheb(g[name], lo, hi, n, 0))
        for p, pieces in _ERFC_PIECES.items():
            w = "f32" if p == "s" else "f64"
            rows = []
            for lo, hi, n in pieces:
                mid = round((lo + hi) / 2 * 64) / 64
                rows.append((lo, mid) + tuple(rnd(v, w) for v in cheb(erfc, lo, hi, n, mid)))
            table[f"erfc/{p}"] = tuple(rows)

        # constants: (hi with few bits so k*hi is exact, lo), and plain roundings
        def split(v, bits):
            f = Fr(v)
            e = math.floor(math.log2(float(v)))
            q = 2 ** (bits - 1 - e)
            hi = Fr(round(f * q), q)
            return float(hi), float(f - hi)

        def split32(v, bits):
            f = Fr(v)
            e = math.floor(math.log2(float(v)))
            q = 2 ** (bits - 1 - e)
            hi = Fr(round(f * q), q)
            return float(hi), float(np.float32(float(f - hi)))

        table["ln2/f32"] = split32(ln2, 16)
        table["ln2/f64"] = split(ln2, 42)
        table["ln2"] = float(ln2)
        table["log2e"] = float(1 / ln2)
        table["log2e/dd"] = split(1 / ln2, 53)
        table["2/3/dd"] = split(D(2) / 3, 53)
        table["pi"] = split(pi, 53)
        table["pio2"] = split(pi / 2, 53)
        table["pio4"] = split(pi / 4, 53)
        table["atan0.5"] = split(atan(D("0.5")), 53)
        table["atan1.5"] = split(atan(D("1.5")), 53)
        table["2/pi"] = float(2 / pi)
        # pi/2 in seven 27-bit pieces for f64 Cody-Waite (each piece on its own 27-bit grid)
        rest = Fr(pi / 2)
        parts = []
        for i in range(7):
            q = Fr(2) ** (26 + 27 * i)
            hi = Fr(math.floor(rest * q), q)
            parts.append(float(hi))
            rest -= hi
        table["pio2/cw7"] = tuple(parts)
        # 2/pi for Payne-Hanek on f32 inputs: per exponent group E_g, five 24-bit chunks of
        # (2/pi mod 2^(2 - E_g)), starting at weight 2^(1 - E_g)
        twopi = Fr(2 / pi)
        groups = []
        for eg in _PH_GROUPS:
            fm = twopi - math.floor(twopi / Fr(2) ** (2 - eg)) * Fr(2) ** (2 - eg)
            chunks = []
            for i in range(5):
                scale = Fr(2) ** (eg - 2 + 24 * (i + 1))
                v = math.floor(fm * scale) % (1 << 24)
                chunks.append(float(Fr(v) / scale))
            groups.append(tuple(chunks))
        table["2/pi/ph"] = tuple(groups)
        return table


_ERFC_PIECES = {
    # precision: (lo, hi, number of coefficients) for 1 - erf on [lo, hi)
    "s": ((1.0, 3.92, 16),),
    "d": ((0.84375, 1.25, 14), (1.25, 1.75, 14), (1.75, 2.25, 14), (2.25, 2.75, 14),
          (2.75, 3.25, 13), (3.25, 3.75, 13), (3.75, 4.25, 12), (4.25, 5.0, 13),
          (5.0, 5.95, 12)),
}
_PH_GROUPS = (0, 21, 42, 63, 84)     # exponent groups E_g for f32 Payne-Hanek


def _atan_inv(n, eps):
    from decimal import Decimal as D
    x = D(1) / n
    x2, s, t, k = x * x, x, x, 1
    while True:
        t = -t * x2
        k += 2
        term = t / k
        if abs(term) < eps:
            return s
        s += term


def _dcos(x, eps):
    from decimal import Decimal as D
    s, t, k, x2 = D(0), D(1), 0, x * x
    while abs(t) > eps:
        s += t
        t = -t * x2 / ((k + 1) * (k + 2))
        k += 2
    return s


def _format_table(table) -> str:
    import pprint
    lines = ["_TABLE = {"]
    for k in sorted(table):
        body = pprint.pformat(table[k], width=92 - len(repr(k)), compact=True)
        body = body.replace("\n", "\n" + " " * (len(repr(k)) + 6))
        lines.append(f"    {k!r}: {body},")
    lines.append("}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(_format_table(_derive_table()))
