"""Scalar expressions of the elementwise ops: what each registry op's ``expr`` builds.

Every function takes the op's input expressions (tensor operands and scalar ``Arg``/``Const``
operands alike) and its static attributes, and returns an `ir.Expr` whose value is the op's
result, in the op's output *compute* dtype (f16/bf16 results are f32 values; storing them
rounds). The semantics are those of the op's NumPy reference (``op.numpy``), edge cases
included: int division by zero, ``INT_MIN // -1``, floor division and remainder sign
conventions (NumPy's float algorithm, snapping included), shift counts out of range, casts
(nan/inf -> 0 for ints, one rounding for f64 -> f16), NaN propagation of ``maximum`` and
``minimum``, half-to-even ``round``, truthiness of logical ops. Transcendental ops use
`ember.kernel.mathlib` (its documented accuracy).

Conventions for callers (the fuser):

* Inputs may be ``Load`` nodes of f16/bf16 buffers (dtype f16/bf16, value f32): they are
  widened here (`w`), so the result's dtype is always a compute dtype. An input's dtype is
  also a hint (`hint`): f16 (a ``Load``, a rounding ``Cast(e, f16)`` or its widening
  ``Cast(Cast(e, f16), f32)``) makes scalars round to f16 and ``pow`` skip NumPy's f32/f64
  fast paths; bf16 makes ``sign(-0.0)`` ``-0.0`` (ml_dtypes). An f16/bf16 intermediate
  handed over as a plain f32 expression loses them, and the ``cast`` op to f32 drops them
  on purpose (NumPy computes on the f32 result in f32).
* A scalar operand (``Arg``/``Const``, possibly under ``Cast``) whose dtype differs from the
  tensor operand's is converted to it. NumPy converts a weak Python float to the tensor's
  dtype: f16 -> rounded to f16 (done here next to an f16-hinted operand: an f64 ``Arg``
  holding the Python value rounds once); bf16 -> NumPy computes in f32 with the scalar
  rounded to f32 only (ml_dtypes does not take part in weak promotion), so a bf16 tensor's
  scalar must *not* be rounded to bf16; f32/f64 -> that dtype.
* A NumPy op on f16/bf16 rounds its result before the next op reads it; inside a fused
  chain the fuser rounds intermediates (``ir.cast(e, f16)``) where it wants NumPy's bits.
  The ``cast`` op to f16/bf16 rounds itself.

`-0.0` constants are built as ``neg(0.0)`` (from before `ir.Const` compared by exact value,
which keeps ``Const(-0.0)`` and ``Const(0.0)`` apart too).
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtype as dt
from . import ir
from .ir import Binary, Cast, Const, Expr, Select, Unary

F32 = dt.float32
F64 = dt.float64
BOOL = dt.bool_
_NARROW = (dt.float16, dt.bfloat16)


# -- basics ---------------------------------------------------------------------------------
def w(x: Expr) -> Expr:
    """``x`` in its compute dtype (f16/bf16 loads widened to f32; nothing rounded)."""
    d = ir.compute_dtype(x.dtype)
    return x if x.dtype is d else Cast(x, d)


def hint(e: Expr) -> dt.DType:
    """The storage dtype ``e``'s value is known to fit: f16/bf16 for a node of that dtype (a
    ``Load``, a rounding ``Cast``) or the exact widening ``Cast(that, f32)`` of one; else
    its dtype."""
    if isinstance(e, Cast) and e.dtype is F32 and e.x.dtype in _NARROW:
        return e.x.dtype
    return e.dtype


def _is_scalar(e: Expr) -> bool:
    while isinstance(e, Cast):
        e = e.x
    return isinstance(e, (ir.Arg, Const))


def _to_f16(e: Expr) -> Expr:
    """A scalar rounded to f16, as an f32 value (a constant folded here)."""
    if isinstance(e, Const):
        with np.errstate(over="ignore"):
            return k(float(np.float16(e.value)), F32)
    return Cast(Cast(e, dt.float16), F32)


def pair(a: Expr, b: Expr) -> tuple[Expr, Expr]:
    """Two operands in one compute dtype: a scalar (``Arg``/``Const``) operand of another
    dtype is converted to the other operand's dtype; next to an operand whose dtype is f16
    (a ``Load`` of an f16 buffer, a rounding ``Cast``) a scalar is rounded to f16 first, as
    NumPy converts a weak scalar to the tensor's dtype (idempotent on an f16 value)."""
    ha, hb = hint(a), hint(b)
    a, b = w(a), w(b)
    sa, sb = _is_scalar(a), _is_scalar(b)
    if sb and not sa and ha is dt.float16 and hb is not dt.float16 and hb.is_float:
        return a, _to_f16(b)
    if sa and not sb and hb is dt.float16 and ha is not dt.float16 and ha.is_float:
        return _to_f16(a), b
    if a.dtype is b.dtype:
        return a, b
    if sb or not sa:
        return a, Cast(b, a.dtype)
    return Cast(a, b.dtype), b


def k(v, like: Expr | dt.DType) -> Expr:
    """The constant ``v`` in ``like``'s compute dtype (``-0.0`` as ``neg(0.0)``)."""
    d = ir.compute_dtype(like if isinstance(like, dt.DType) else like.dtype)
    if d.is_float:
        v = float(v)
        if v == 0.0 and math.copysign(1.0, v) < 0:
            return Unary("neg", Const(0.0, d), d)
    elif d.is_int:
        v = int(v)
    else:
        v = bool(v)
    return Const(v, d)


def bits(d: dt.DType) -> int:
    return 8 * d.itemsize


def int_min(d: dt.DType) -> int:
    return -(1 << (bits(d) - 1)) if d.signed else 0


def int_max(d: dt.DType) -> int:
    return (1 << (bits(d) - 1)) - 1 if d.signed else (1 << bits(d)) - 1


def b2(op: str, a: Expr, b: Expr) -> Expr:
    """``a op b`` (an arithmetic/bitwise `ir.BINARY_OPS` op), operands in one dtype."""
    a, b = pair(a, b)
    return Binary(op, a, b, a.dtype)


def cmp(op: str, a: Expr, b) -> Expr:
    if not isinstance(b, Expr):
        a = w(a)
        b = k(b, a)
    a, b = pair(a, b)
    return Binary(op, a, b, BOOL)


def sel(c: Expr, a: Expr, b: Expr) -> Expr:
    a, b = pair(a, b)
    return Select(c, a, b, a.dtype)


def land(a: Expr, b: Expr) -> Expr:
    return Binary("and", a, b, BOOL)


def lor(a: Expr, b: Expr) -> Expr:
    return Binary("or", a, b, BOOL)


def lxor(a: Expr, b: Expr) -> Expr:
    return Binary("xor", a, b, BOOL)


def u(op: str, x: Expr) -> Expr:
    x = w(x)
    return Unary(op, x, BOOL if op == "lnot" else x.dtype)


def _m():
    from . import mathlib
    return mathlib


# -- classification -------------------------------------------------------------------------
def is_nan(x: Expr) -> Expr:
    x = w(x)
    if not x.dtype.is_float:
        return Const(False, BOOL)
    return Binary("ne", x, x, BOOL)


def is_inf(x: Expr) -> Expr:
    x = w(x)
    if not x.dtype.is_float:
        return Const(False, BOOL)
    return cmp("eq", u("abs", x), math.inf)


def is_finite(x: Expr) -> Expr:
    x = w(x)
    if not x.dtype.is_float:
        return Const(True, BOOL)
    return cmp("lt", u("abs", x), math.inf)      # nan: False


def truthy(x: Expr) -> Expr:
    """``x != 0`` (nan is True); bools as they are."""
    x = w(x)
    return x if x.dtype.is_bool else cmp("ne", x, 0)


def copysign0(q: Expr) -> Expr:
    """A zero with the sign of ``q`` (``q`` not nan; zeros are returned as they are)."""
    return sel(cmp("lt", q, 0), k(-0.0, q), sel(cmp("gt", q, 0), k(0.0, q), q))


# -- arithmetic -----------------------------------------------------------------------------
def add(a, b):
    return b2("add", a, b)


def sub(a, b):
    return b2("sub", a, b)


def mul(a, b):
    return b2("mul", a, b)


def div(a, b):
    return b2("div", a, b)


def neg(x):
    return u("neg", x)


def recip(x):
    x = w(x)
    return Binary("div", k(1, x), x, x.dtype)


def sqrt(x):
    return u("sqrt", x)


def rsqrt(x):
    """``1 / sqrt(x)``, two roundings (as the NumPy reference)."""
    return recip(sqrt(x))


def abs_(x):
    x = w(x)
    if x.dtype.is_int and not x.dtype.signed:
        return x
    return u("abs", x)


def sign(x):
    """-1, 0 or 1; nan stays nan; unsigned: 0 or 1. ``sign(-0.0)`` is ``0.0`` (NumPy), but
    ``-0.0`` for bf16 (ml_dtypes returns zeros as they are): an input whose dtype is bf16
    (a ``Load`` of a bf16 buffer or a rounding ``Cast``) gets that."""
    keep_zero = hint(x) is dt.bfloat16
    x = w(x)
    pos = cmp("gt", x, 0)
    if x.dtype.is_int and not x.dtype.signed:
        return Cast(pos, x.dtype)
    neg_ = sel(cmp("lt", x, 0), k(-1, x), k(0, x))
    if x.dtype.is_float:
        rest = x if keep_zero else sel(is_nan(x), x, k(0, x))
        neg_ = sel(cmp("lt", x, 0), k(-1, x), rest)
    return sel(pos, k(1, x), neg_)


def rounding(op: str):
    """``round``(rint)/``floor``/``ceil``/``trunc``: ints unchanged."""
    def f(x):
        x = w(x)
        return u(op, x) if x.dtype.is_float else x
    f.__name__ = op
    return f


def maximum(a, b):
    a, b = pair(a, b)
    if a.dtype.is_bool:
        return lor(a, b)
    return Binary("max", a, b, a.dtype)


def minimum(a, b):
    a, b = pair(a, b)
    if a.dtype.is_bool:
        return land(a, b)
    return Binary("min", a, b, a.dtype)


def clamp(x, min=None, max=None):  # noqa: A002
    """``minimum(maximum(x, min), max)`` (NumPy's order: min > max gives max)."""
    x = w(x)
    if min is not None:
        x = maximum(x, min if isinstance(min, Expr) else k(min, x))
    if max is not None:
        x = minimum(x, max if isinstance(max, Expr) else k(max, x))
    return x


def relu(x):
    x = w(x)
    return maximum(x, k(0, x))


# -- floor division and remainder (Python's sign conventions) -------------------------------
def floor_div(a, b):
    """NumPy's ``floor_divide``. Ints: floor, ``x // 0 == 0``, ``INT_MIN // -1 == INT_MIN``.
    Floats: ``a / b`` when ``b == 0``, else ``(a - fmod(a, b)) / b`` adjusted down by one when
    the remainder's sign differs from ``b``'s, floored and snapped to the nearest integer
    (NumPy's ``npy_divmod``); a zero quotient takes the sign of ``a / b``."""
    a, b = pair(a, b)
    d = a.dtype
    if d.is_int:
        q = Binary("div", a, b, d)                      # trunc; /0 -> 0; MIN/-1 -> MIN
        if not d.signed:
            return q
        r = Binary("rem", a, b, d)
        fix = land(cmp("ne", r, 0), lxor(cmp("lt", r, 0), cmp("lt", b, 0)))
        return sel(fix, Binary("sub", q, k(1, d), d), q)
    q = Binary("div", a, b, d)
    mod = Binary("rem", a, b, d)                        # fmod
    dv = Binary("div", Binary("sub", a, mod, d), b, d)
    adj = land(cmp("ne", mod, 0), lxor(cmp("lt", b, 0), cmp("lt", mod, 0)))
    dv = sel(adj, Binary("sub", dv, k(1, d), d), dv)
    fl = u("floor", dv)
    fl = sel(cmp("gt", Binary("sub", dv, fl, d), 0.5), Binary("add", fl, k(1, d), d), fl)
    res = sel(cmp("ne", dv, 0), fl, copysign0(q))
    return sel(cmp("eq", b, 0), q, res)


def remainder(a, b):
    """NumPy's ``remainder``: the sign of the divisor. Ints: ``x % 0 == 0``. Floats:
    ``fmod`` plus ``b`` when the signs differ; a zero result takes ``b``'s sign; ``b == 0``
    or an infinite ``a`` give nan."""
    a, b = pair(a, b)
    d = a.dtype
    r = Binary("rem", a, b, d)                          # int: %0 -> 0, MIN % -1 -> 0
    if d.is_int and not d.signed:
        return r
    fix = land(cmp("ne", r, 0), lxor(cmp("lt", r, 0), cmp("lt", b, 0)))
    rb = Binary("add", r, b, d)
    if d.is_int:
        return sel(fix, rb, r)
    zero = sel(cmp("lt", b, 0), k(-0.0, d), k(0.0, d))
    return sel(fix, rb, sel(cmp("eq", r, 0), zero, r))


# -- pow ------------------------------------------------------------------------------------
def int_pow(a, b):
    """``a ** b`` on ints, wrapping modulo 2**bits, over every exponent bit; a negative
    exponent gives 1 for ``a == 1``, +-1 for ``a == -1``, else 0.

    A tensor exponent: square and multiply from the exponent's top bit down (a left-to-right
    chain, so a loop-invariant base never makes a long chain of squares, which sends GCC's
    analyses exponential). A scalar exponent (``Arg``) with a tensor base: the product of
    ``a**(2**i)`` over the exponent's set bits, each factor selected by a mask of bits
    (``((s - 1) & m) + 1``, ``m`` all ones or zero) rather than a ``Select``: a select on a
    loop-invariant condition makes GCC version the loop per condition (``-funswitch-loops``,
    0.3-0.6 s to compile an i8 kernel); the squarings and the product tree also shorten the
    chain of dependent multiplies."""
    scalar_exp = _is_scalar(b) and not _is_scalar(a)
    a, b = pair(a, b)
    d = a.dtype
    if isinstance(b, Const):
        return _int_pow_const(a, int(b.value))
    if scalar_exp:
        return _int_pow_invariant_exp(a, b)
    nb = bits(d) - 1 if d.signed else bits(d)
    e = sel(cmp("lt", b, 0), k(0, d), b) if d.signed else b

    def bit(i):
        return cmp("ne", Binary("and", e, k(1 << i, d), d), 0)

    r = sel(bit(nb - 1), a, k(1, d))
    for i in range(nb - 2, -1, -1):
        q = Binary("mul", r, r, d)
        r = sel(bit(i), Binary("mul", q, a, d), q)
    if not d.signed:
        return r
    odd = cmp("ne", Binary("and", b, k(1, d), d), 0)
    inv = sel(cmp("eq", a, 1), k(1, d),
              sel(cmp("eq", a, -1), sel(odd, k(-1, d), k(1, d)), k(0, d)))
    return sel(cmp("lt", b, 0), inv, r)


def _mask(c: Expr, d: dt.DType) -> Expr:
    """All ones where the bool ``c`` holds, else 0, in int dtype ``d``."""
    return Unary("neg", Cast(c, d), d)


def _int_pow_invariant_exp(a, b):
    """`int_pow` for a loop-invariant exponent ``b``: no select on a condition of ``b``."""
    d = a.dtype
    one = k(1, d)
    nb = bits(d) - 1 if d.signed else bits(d)
    if d.signed:
        neg = _mask(cmp("lt", b, 0), d)
        e = Binary("and", b, Unary("bnot", neg, d), d)          # 0 for a negative b
    else:
        e = b
    factors, s = [], a
    for i in range(nb):
        m = _mask(cmp("ne", Binary("and", e, k(1 << i, d), d), 0), d)
        factors.append(Binary("add", Binary("and", Binary("sub", s, one, d), m, d), one, d))
        if i + 1 < nb:
            s = Binary("mul", s, s, d)
    while len(factors) > 1:
        factors = [Binary("mul", factors[j], factors[j + 1], d) if j + 1 < len(factors)
                   else factors[j] for j in range(0, len(factors), 2)]
    r = factors[0]
    if not d.signed:
        return r
    # a negative exponent: 1 for a == 1, (-1)**b for a == -1, else 0
    sgn = Binary("sub", one, Binary("mul", Binary("and", b, one, d), k(2, d), d), d)
    inv = sel(cmp("eq", a, 1), one, sel(cmp("eq", a, -1), sgn, k(0, d)))
    return Binary("or", Binary("and", inv, neg, d),
                  Binary("and", r, Unary("bnot", neg, d), d), d)


def _int_pow_const(a, n):
    d = a.dtype
    if n < 0:
        odd = n & 1
        return sel(cmp("eq", a, 1), k(1, d),
                   sel(cmp("eq", a, -1), k(-1 if odd else 1, d), k(0, d)))
    r, base = None, a
    while n:
        if n & 1:
            r = base if r is None else Binary("mul", r, base, d)
        n >>= 1
        if n:
            base = Binary("mul", base, base, d)
    return k(1, d) if r is None else r


def pow_(a, b):
    """``np.power``. Ints: `int_pow`. Floats: the math library's pow, except that NumPy
    takes fast paths for f32/f64 when the exponent is a scalar (a 0 stride): ``-1 -> 1/a``,
    ``0 -> 1``, ``0.5 -> sqrt(a)`` (so ``(-inf) ** 0.5`` is nan and ``(-0) ** 0.5`` is -0),
    ``1 -> a``, ``2 -> a*a``; the same here for a scalar (``Arg``/``Const``) exponent —
    folded for a ``Const``, selected at run time for an ``Arg``. f16/bf16 have no fast
    paths in NumPy; an input whose dtype is f16 (a ``Load`` of such a buffer, or a rounding
    ``Cast``) is taken as one (an exact ``a*a`` still serves ``2``). (bf16 with a Python
    float exponent computes in f32 in NumPy, fast paths included.)"""
    narrow = hint(a) is dt.float16 or hint(b) is dt.float16
    scalar = _is_scalar(b)
    a, b = pair(a, b)
    d = a.dtype
    if d.is_int:
        return int_pow(a, b)
    sq = Binary("mul", a, a, d)
    if scalar and isinstance(b, Const):
        v = float(b.value)
        if v == 0.0:
            return k(1, d)
        if v == 1.0:
            return a
        if v == 2.0:
            return sq
        if v == -1.0:
            return recip(a)
        if v == 0.5 and not narrow:
            return u("sqrt", a)
        return _m().pow(a, b)
    r = _m().pow(a, b)
    if not scalar or narrow:
        return r
    for v, fast in ((2.0, sq), (0.5, u("sqrt", a)), (-1.0, recip(a)), (1.0, a),
                    (0.0, k(1, d))):
        r = sel(cmp("eq", b, v), fast, r)
    return r


# -- math library ---------------------------------------------------------------------------
def mathfn(name: str):
    def f(x):
        return getattr(_m(), name)(w(x))
    f.__name__ = name
    return f


def atan2(a, b):
    a, b = pair(a, b)
    return _m().atan2(a, b)


def sigmoid(x):
    return _m().sigmoid(w(x))


# -- comparisons, logic, bits ---------------------------------------------------------------
def comparison(op: str):
    def f(a, b):
        return cmp(op, a, b)
    f.__name__ = op
    return f


def logical_and(a, b):
    return land(truthy(a), truthy(b))


def logical_or(a, b):
    return lor(truthy(a), truthy(b))


def logical_xor(a, b):
    return lxor(truthy(a), truthy(b))


def logical_not(x):
    return u("lnot", x)       # x == 0


def bitwise(op: str):
    def f(a, b):
        return b2(op, a, b)
    f.__name__ = op
    return f


def bitwise_not(x):
    x = w(x)
    return u("lnot" if x.dtype.is_bool else "bnot", x)


def shift(op: str):
    """``shl``/``shr`` with NumPy's counts: outside [0, bits) give 0 (or -1 for a negative
    value shifted right) — the IR's definition."""
    def f(a, b):
        return b2(op, a, b)
    f.__name__ = op
    return f


def where(c, a, b):
    c = w(c)
    if not c.dtype.is_bool:
        c = truthy(c)
    return sel(c, a, b)


# -- cast -----------------------------------------------------------------------------------
def cast(x, dtype):
    """NumPy ``astype`` with ember's rules: float -> int truncates, nan/+-inf give 0, then
    wraps (as through i64; beyond the i64 range: the IR's saturation, unspecified by the op);
    anything -> bool is ``x != 0``; -> f16/bf16 rounds to that type (`ir.cast`; f64 -> f16
    once, as NumPy; f64 -> bf16 through f32, as ml_dtypes); int -> f16/bf16 through f32
    (exact for f16's range; ml_dtypes' way for bf16). f16/bf16 -> f32 gives a plain f32
    value (``Cast(x, f32)`` of the widened value, no longer hinted as f16: NumPy computes
    on the f32 array in f32, a later scalar operand is not rounded to f16)."""
    narrow = hint(x) in _NARROW
    x = w(x)
    src = x.dtype
    tc = ir.compute_dtype(dtype)
    if dtype.is_bool:
        return x if src.is_bool else cmp("ne", x, 0)
    if dtype in _NARROW:
        return ir.cast(x if src.is_float else Cast(x, F32), dtype)
    if src is tc:
        return Cast(x, tc) if narrow else x
    if dtype.is_int and src.is_float:
        return Cast(sel(is_finite(x), x, k(0, src)), tc)
    return Cast(x, tc)
