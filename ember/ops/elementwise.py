"""Elementwise ops: unary math, binary arithmetic, comparisons, logic, bitwise, select, clamp
and cast.

Unary and binary ops broadcast like NumPy. Binary inputs arrive already promoted to one
dtype by the Tensor API (``promote``); a scalar operand stays a Python scalar (weak: it never
widens the tensor's dtype, and an int scalar that does not fit the dtype is refused).

Conventions (shared by every backend):

* float-only ops (``exp``, ``sqrt``, ``sin``, ``erf`` ...) raise ``DTypeError`` on int or
  bool tensors; binary ``div`` and ``atan2`` promote ints to the default float instead;
* ``round`` rounds half to even (like NumPy and PyTorch); ``round``/``floor``/``ceil``/
  ``trunc`` return int tensors unchanged; their gradient (and ``sign``'s) is zero;
* ``remainder`` takes the divisor's sign (Python's ``%``), ``floor_div`` floors (Python's
  ``//``); int division by zero gives 0 (NumPy's result) rather than an error;
* ``pow`` on ints: a negative scalar exponent is a ``DTypeError``; negative exponents in an
  exponent *tensor* give ``1`` for base 1, ``+-1`` for base -1 and 0 otherwise (PyTorch);
* ``maximum``/``minimum`` propagate nan; on ties the gradient is split half and half;
* comparisons, logical ops and ``is_*`` return bool tensors; logical ops take any kind by
  truthiness; bitwise ops take int and bool, shifts ints only;
* ``cast``: float to int truncates toward zero, nan and +-inf give 0, values beyond the
  target range wrap modulo 2**bits (as through i64; beyond i64 they are unspecified);
  anything to bool is ``x != 0`` (so nan is True).
"""
from __future__ import annotations

import math
from decimal import Decimal, localcontext

import numpy as np

from .. import dtype as dt
from ..errors import DTypeError
from ..kernel import lower_ops as L
from ._api import api
from .registry import declare
from .rules import broadcast_many, broadcast_shapes, require_kind

FLOAT = "float"
NUMERIC = "float int"
INTEGRAL = "int bool"
INT = "int"
ANY = "float int bool"

# IEEE results (nan, inf) of special inputs are values, not warnings, as on every other
# backend: ops whose NumPy form warns on them run under this.
_quiet = np.errstate(divide="ignore", invalid="ignore", over="ignore")
_FLOAT_NP = frozenset(d.np for d in dt.FLOATS)


# -- rule builders --------------------------------------------------------------------------
def unary_infer(name, kinds, out=None):
    """Same shape; dtype kept (or ``out``); input kind must be in ``kinds``."""
    def infer(x):
        d = x._dtype
        if d.kind not in kinds:
            require_kind(name, d, kinds)
        return (x._shape, d if out is None else out)
    return infer


def binary_infer(name, kinds, out=None):
    """Broadcast shapes of tensor or scalar operands; dtype of the (promoted) tensors."""
    def infer(a, b):
        if hasattr(a, "_shape"):
            d = a._dtype
            if hasattr(b, "_shape"):
                sa, sb = a._shape, b._shape
                shape = sa if sa == sb else broadcast_shapes(name, sa, sb)
            else:
                shape = a._shape
        else:
            d, shape = b._dtype, b._shape
        if d.kind not in kinds:
            require_kind(name, d, kinds)
        return (shape, d if out is None else out)
    return infer


def unary(name, numpy, vjp=None, *, kinds=FLOAT, out=None, expr=None, doc=""):
    return declare(name, "unary", nin=1, infer=unary_infer(name, kinds, out), numpy=numpy,
                   vjp=vjp, expr=expr, doc=doc)


def binary(name, numpy, vjp=None, *, kinds=NUMERIC, out=None, promote="same", infer=None,
           expr=None, doc="", vjp_needs=False):
    return declare(name, "binary", nin=2, infer=infer or binary_infer(name, kinds, out),
                   numpy=numpy, vjp=vjp, promote=promote, expr=expr, doc=doc,
                   vjp_needs=vjp_needs)


def _is_t(x):
    return hasattr(x, "_shape")


def _zero_grad(g, i, o, **_):
    """Piecewise-constant ops (sign, floor, ...): a zero gradient, as in PyTorch."""
    return tuple(api.zeros_like(g) if _is_t(x) else None for x in i)


def _int_passthrough(name):
    """The ufunc ``name`` on floats; int tensors are returned unchanged (rounding them is the
    identity)."""
    fn = getattr(np, name)

    def run(x, *, xp=np):
        if x.dtype in _FLOAT_NP:
            return fn(x) if xp is np else getattr(xp, name)(x)
        return x
    return run


# -- arithmetic -----------------------------------------------------------------------------
ADD = binary("add", np.add, lambda g, i, o: (g, g), expr=L.add)
SUB = binary("sub", np.subtract,
             lambda g, i, o, needs: (g if needs[0] else None, -g if needs[1] else None),
             expr=L.sub, vjp_needs=True)
# mul and div compute only the gradients wanted (``needs``): in ``x * w`` with a constant
# ``x``, the product for ``x`` would be a full-size op for nothing.
MUL = binary("mul", np.multiply, lambda g, i, o, needs: (g * i[1] if needs[0] else None,
                                                         g * i[0] if needs[1] else None),
             expr=L.mul, vjp_needs=True)
DIV = binary("div", np.true_divide,
             lambda g, i, o, needs: (g / i[1] if needs[0] else None,
                                     -g * o / i[1] if needs[1] else None),
             kinds=FLOAT, promote="float", expr=L.div, vjp_needs=True,
             doc="true division; ints are promoted to float")

NEG = unary("neg", np.negative, lambda g, i, o: (-g,), kinds=NUMERIC, expr=L.neg)


# -- unary float math -----------------------------------------------------------------------
EXP = unary("exp", _quiet(np.exp), lambda g, i, o: (g * o,), expr=L.mathfn("exp"))
LOG = unary("log", _quiet(np.log), lambda g, i, o: (g / i[0],), expr=L.mathfn("log"))
EXPM1 = unary("expm1", _quiet(np.expm1), lambda g, i, o: (g * (o + 1.0),),
              expr=L.mathfn("expm1"), doc="exp(x) - 1, accurate near 0")
LOG1P = unary("log1p", _quiet(np.log1p), lambda g, i, o: (g / (i[0] + 1.0),),
              expr=L.mathfn("log1p"), doc="log(1 + x), accurate near 0")
SQRT = unary("sqrt", _quiet(np.sqrt), lambda g, i, o: (g * 0.5 / o,), expr=L.sqrt)


@_quiet
def _rsqrt_numpy(x, *, xp=np):
    if x.dtype.itemsize < 4:  # f16/bf16: one rounding, through f32
        return 1.0 / xp.sqrt(x.astype(np.float32))
    return 1.0 / xp.sqrt(x)


RSQRT = unary("rsqrt", _rsqrt_numpy, lambda g, i, o: (g * (o * o * o) * -0.5,),
              expr=L.rsqrt, doc="1 / sqrt(x)")
RECIP = unary("recip", _quiet(np.reciprocal), lambda g, i, o: (-g * (o * o),), expr=L.recip,
              doc="1 / x")
SIN = unary("sin", _quiet(np.sin), lambda g, i, o: (g * i[0].cos(),), expr=L.mathfn("sin"))
COS = unary("cos", _quiet(np.cos), lambda g, i, o: (-g * i[0].sin(),), expr=L.mathfn("cos"))
TAN = unary("tan", _quiet(np.tan), lambda g, i, o: (g * (o * o + 1.0),), expr=L.mathfn("tan"))
SINH = unary("sinh", _quiet(np.sinh), lambda g, i, o: (g * i[0].cosh(),),
             expr=L.mathfn("sinh"))
COSH = unary("cosh", _quiet(np.cosh), lambda g, i, o: (g * i[0].sinh(),),
             expr=L.mathfn("cosh"))
TANH = unary("tanh", np.tanh, lambda g, i, o: (g * (1.0 - o * o),), expr=L.mathfn("tanh"))
ASIN = unary("asin", _quiet(np.arcsin), lambda g, i, o: (g * (1.0 - i[0] * i[0]).rsqrt(),),
             expr=L.mathfn("asin"))
ACOS = unary("acos", _quiet(np.arccos), lambda g, i, o: (-g * (1.0 - i[0] * i[0]).rsqrt(),),
             expr=L.mathfn("acos"))
ATAN = unary("atan", np.arctan, lambda g, i, o: (g / (i[0] * i[0] + 1.0),),
             expr=L.mathfn("atan"))


# -- erf ------------------------------------------------------------------------------------
# NumPy has no erf and scipy is not a dependency. erf is evaluated by Taylor expansions
# around the centers k/4 (k = 0..24), |h| <= 1/8, of degree 17:
#   erf(c + h) = sum_n c_n h^n,  c_0 = erf(c),
#   c_n = 2/sqrt(pi) * e^{-c^2} * (-1)^(n-1) * H_{n-1}(c) / n!   (physicists' Hermite H),
# since d^m/dx^m e^{-x^2} = (-1)^m H_m(x) e^{-x^2}. The coefficients are computed once, in
# 45-digit decimal arithmetic (erf(c) from its all-positive series
# erf(x) = 2/sqrt(pi) e^{-x^2} sum_n 2^n x^(2n+1) / (2n+1)!!). The truncation error is below
# 1e-17 and the result is within ~2 ulp of the true value in float64; |x| >= 6 gives +-1
# (erfc(6) < 2.2e-17). Every dtype is evaluated in float64.
_ERF_STEP = 4
_ERF_CENTERS = 24
_ERF_DEG = 17
_ERF_TABLE = None
_PI = Decimal("3.14159265358979323846264338327950288419716939937510")
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _erf_table():
    rows = []
    with localcontext() as ctx:
        ctx.prec = 45
        k2 = 2 / _PI.sqrt()
        tiny = Decimal("1e-42")
        for k in range(_ERF_CENTERS + 1):
            c = Decimal(k) / _ERF_STEP
            term, s, n = c, Decimal(0), 0
            while term > s * tiny:
                s += term
                n += 1
                term = term * 2 * c * c / (2 * n + 1)
            w = k2 * (-c * c).exp()
            coefs = [w * s]
            h_prev, h = Decimal(0), Decimal(1)      # H_{m-1}, H_m with m = n - 1
            fact = Decimal(1)
            for n in range(1, _ERF_DEG + 1):
                fact *= n
                m = n - 1
                if m > 0:
                    h_prev, h = h, 2 * c * h - 2 * (m - 1) * h_prev
                coefs.append(w * (-1) ** m * h / fact)
            rows.append([float(v) for v in coefs])
    # one contiguous column per power of h: Horner gathers column[k] per element
    return [np.ascontiguousarray(col) for col in np.array(rows, dtype=np.float64).T]


def erf_f64(x):
    """erf of ``x`` in float64 (vectorized; nan stays nan, +-inf give +-1, erf(-0) = -0)."""
    global _ERF_TABLE
    cols = _ERF_TABLE
    if cols is None:
        cols = _ERF_TABLE = _erf_table()
    x = np.asarray(x, dtype=np.float64)
    shape = x.shape
    x = x.reshape(-1)
    a = np.abs(x)
    nan = np.isnan(a)
    has_nan = nan.any()
    np.minimum(a, 6.0, out=a)
    if has_nan:
        a[nan] = 0.0
    k = np.rint(a * _ERF_STEP).astype(np.intp)
    h = a - k * (1.0 / _ERF_STEP)
    p = cols[_ERF_DEG][k]
    for n in range(_ERF_DEG - 1, -1, -1):
        p *= h
        p += cols[n][k]
    np.copysign(p, x, out=p)
    if has_nan:
        p[nan] = np.nan
    return p.reshape(shape)


ERF = unary("erf", erf_f64,
            lambda g, i, o: (g * ((i[0] * i[0]).neg().exp() * _TWO_OVER_SQRT_PI),),
            expr=L.mathfn("erf"),
            doc="the error function, 2/sqrt(pi) * integral_0^x e^(-t^2) dt")


# -- unary numeric --------------------------------------------------------------------------
ABS = unary("abs", np.abs, lambda g, i, o: (g * i[0].sign(),), kinds=NUMERIC, expr=L.abs_,
            doc="absolute value (ints wrap: abs(-128 as i8) is -128, as in C and PyTorch)")
SIGN = unary("sign", np.sign, _zero_grad, kinds=NUMERIC, expr=L.sign,
             doc="-1, 0 or 1 (nan stays nan)")
ROUND = unary("round", _int_passthrough("rint"), _zero_grad, kinds=NUMERIC,
              expr=L.rounding("rint"),
              doc="round half to even; ints unchanged")
FLOOR = unary("floor", _int_passthrough("floor"), _zero_grad, kinds=NUMERIC,
              expr=L.rounding("floor"),
              doc="round toward -inf; ints unchanged")
CEIL = unary("ceil", _int_passthrough("ceil"), _zero_grad, kinds=NUMERIC,
             expr=L.rounding("ceil"),
             doc="round toward +inf; ints unchanged")
TRUNC = unary("trunc", _int_passthrough("trunc"), _zero_grad, kinds=NUMERIC,
              expr=L.rounding("trunc"),
              doc="round toward 0; ints unchanged")


def _is_special(name, int_value):
    fn = getattr(np, name)

    def run(x, *, xp=np):
        if x.dtype in _FLOAT_NP:
            return fn(x) if xp is np else getattr(xp, name)(x)
        return xp.full(x.shape, int_value, dtype=np.bool_)
    return run


IS_NAN = unary("is_nan", _is_special("isnan", False), kinds=ANY, out=dt.bool_,
               expr=L.is_nan,
               doc="True where x is nan (never for ints and bools)")
IS_INF = unary("is_inf", _is_special("isinf", False), kinds=ANY, out=dt.bool_,
               expr=L.is_inf,
               doc="True where x is +-inf (never for ints and bools)")
IS_FINITE = unary("is_finite", _is_special("isfinite", True), kinds=ANY, out=dt.bool_,
                  expr=L.is_finite,
                  doc="True where x is neither nan nor +-inf (always for ints and bools)")


# -- binary arithmetic ----------------------------------------------------------------------
def _pow_infer(a, b):
    meta = _pow_base_infer(a, b)
    if meta[1].kind == "int" and type(b) is int and b < 0:
        raise DTypeError(f"pow: an int tensor ({meta[1].short}) cannot be raised to the "
                         f"negative int power {b}; valid: exponents >= 0, or a float tensor "
                         f"(x.float() ** {b})")
    return meta


_pow_base_infer = binary_infer("pow", NUMERIC)


@_quiet
def _pow_numpy(a, b, *, xp=np):
    if _is_int_operand(a) and _is_int_operand(b) and not isinstance(b, int):
        b = xp.asarray(b)
        neg = b < 0
        # (on a device, always take this path: asking whether any exponent is negative
        # would synchronize)
        if xp is not np or neg.any():
            # PyTorch's rule for negative int exponents: 1 ** -n = 1, (-1) ** -n = +-1, else 0
            a = xp.asarray(a)
            r = xp.power(a, xp.where(neg, 0, b))
            odd = (b & 1).astype(np.bool_)
            inv = xp.where(a == 1, 1, xp.where(a == -1, xp.where(odd, -1, 1), 0))
            return xp.where(neg, inv, r)
    return xp.power(a, b)


def _is_int_operand(x):
    if isinstance(x, (int, np.integer)):
        return not isinstance(x, bool)
    return getattr(x, "dtype", None) is not None and x.dtype.kind in "iu"


def _pow_vjp(g, i, o):
    a, b = i
    ga = gb = None
    if _is_t(a):
        if _is_t(b):
            # b * a^(b-1), taken as 0 where b == 0 (also at a == 0, where 0 * inf is nan)
            ga = g * (b * api.where(b == 0.0, 1.0, a) ** (b - 1.0))
        elif b == 0:
            ga = api.zeros_like(g)
        else:
            ga = g * (a ** (b - 1) * b)
    if _is_t(b):
        if _is_t(a):
            # d/db a^b = a^b log(a); taken as 0 where a == 0 (the limit for b > 0)
            gb = g * (o * api.where(a == 0.0, 1.0, a).log())
        elif a == 0:
            gb = api.zeros_like(g)
        else:
            gb = g * o * (math.log(a) if a > 0 else math.nan)
    return (ga, gb)


POW = binary("pow", _pow_numpy, _pow_vjp, infer=_pow_infer, expr=L.pow_,
             doc="a ** b; ints need exponents >= 0 (see the module doc for negative ones)")


def _atan2_vjp(g, i, o):
    a, b = i
    den = a * a + b * b
    return (g * b / den if _is_t(a) else None, -g * a / den if _is_t(b) else None)


ATAN2 = binary("atan2", np.arctan2, _atan2_vjp, kinds=FLOAT, promote="float", expr=L.atan2,
               doc="the angle of (b, a) in (-pi, pi]; ints are promoted to float")


def _remainder_vjp(g, i, o):
    a, b = i
    return (g if _is_t(a) else None,
            -g * api.floor_div(a, b) if _is_t(b) else None)


REMAINDER = binary("remainder", _quiet(np.remainder), _remainder_vjp, expr=L.remainder,
                   doc="a - floor(a / b) * b: the sign of the divisor, like Python's %")
FLOOR_DIV = binary("floor_div", _quiet(np.floor_divide), _zero_grad, expr=L.floor_div,
                   doc="floor(a / b), like Python's //")


def _minmax_vjp(cmp):
    def vjp(g, i, o):
        a, b = i
        d = g._dtype
        # the share of the gradient that goes to ``a``: 1 where it wins, 1/2 on ties
        share = cmp(a, b).cast(d) + api.equal(a, b).cast(d) * 0.5
        ga = g * share if _is_t(a) else None
        gb = g - g * share if _is_t(b) else None
        return (ga, gb)
    return vjp


MAXIMUM = binary("maximum", _quiet(np.maximum), _minmax_vjp(lambda a, b: api.greater(a, b)),
                 kinds=ANY, expr=L.maximum,
                 doc="elementwise max (nan wins; ties split the gradient)")
MINIMUM = binary("minimum", _quiet(np.minimum), _minmax_vjp(lambda a, b: api.lower(a, b)),
                 kinds=ANY, expr=L.minimum,
                 doc="elementwise min (nan wins; ties split the gradient)")


# -- clamp ----------------------------------------------------------------------------------
def _clamp_infer(x, min, max):
    d = x._dtype
    if d.kind not in NUMERIC:
        require_kind("clamp", d, NUMERIC)
    return (x._shape, d)


@_quiet
def _clamp_numpy(x, min, max, *, xp=np):
    # maximum then minimum (np.clip's order: min > max gives max), cheaper than np.clip
    if min is not None:
        x = xp.maximum(x, min)
    if max is not None:
        x = xp.minimum(x, max)
    return x


def _clamp_vjp(g, i, o, min, max):
    x = i[0]
    if min is None:
        keep = x <= max
    elif max is None:
        keep = x >= min
    else:
        keep = api.logical_and(x >= min, x <= max)
    return (api.where(keep, g, 0.0),)


CLAMP = declare("clamp", "unary", nin=1, attrs=("min", "max"), infer=_clamp_infer,
                numpy=_clamp_numpy, vjp=_clamp_vjp, expr=L.clamp,
                doc="clip to [min, max] (scalar bounds, either may be None; min > max gives "
                    "max); the gradient passes where min <= x <= max")


# -- cast -----------------------------------------------------------------------------------
def _cast_infer(x, dtype):
    return (x._shape, dtype)


@_quiet
def _float_to_i64(x, xp=np):
    return xp.where(xp.isfinite(x), x, 0).astype(np.int64)


def _cast_numpy(x, dtype, *, xp=np):
    x = xp.asarray(x)
    if dtype.kind == "int" and x.dtype in _FLOAT_NP:
        # truncate toward zero; nan/+-inf give 0; through i64 so that out-of-range values wrap
        # modulo 2**bits the same way on every platform
        x = _float_to_i64(x, xp)
        return x if dtype is dt.int64 else x.astype(dtype.np)
    return x.astype(dtype.np)


def _cast_vjp(g, i, o, dtype):
    src = i[0]._dtype
    return (g.cast(src) if src.is_float and dtype.is_float else None,)


CAST = declare("cast", "cast", nin=1, attrs=("dtype",), infer=_cast_infer, numpy=_cast_numpy,
               vjp=_cast_vjp, expr=L.cast, doc="convert to another dtype (see the module doc)")


# -- comparisons ----------------------------------------------------------------------------
EQUAL = binary("equal", _quiet(np.equal), kinds=ANY, out=dt.bool_, expr=L.comparison("eq"))
NOT_EQUAL = binary("not_equal", _quiet(np.not_equal), kinds=ANY, out=dt.bool_,
                   expr=L.comparison("ne"))
GREATER = binary("greater", _quiet(np.greater), kinds=ANY, out=dt.bool_,
                 expr=L.comparison("gt"))
GREATER_EQUAL = binary("greater_equal", _quiet(np.greater_equal), kinds=ANY, out=dt.bool_,
                       expr=L.comparison("ge"))
LOWER = binary("lower", _quiet(np.less), kinds=ANY, out=dt.bool_, expr=L.comparison("lt"))
LOWER_EQUAL = binary("lower_equal", _quiet(np.less_equal), kinds=ANY, out=dt.bool_,
                     expr=L.comparison("le"))


# -- logical and bitwise --------------------------------------------------------------------
LOGICAL_AND = binary("logical_and", np.logical_and, kinds=ANY, out=dt.bool_,
                     expr=L.logical_and,
                     doc="truthiness of both (nonzero is True)")
LOGICAL_OR = binary("logical_or", np.logical_or, kinds=ANY, out=dt.bool_,
                    expr=L.logical_or)
LOGICAL_XOR = binary("logical_xor", np.logical_xor, kinds=ANY, out=dt.bool_,
                     expr=L.logical_xor)
LOGICAL_NOT = unary("logical_not", np.logical_not, kinds=ANY, out=dt.bool_,
                    expr=L.logical_not)

BITWISE_AND = binary("bitwise_and", np.bitwise_and, kinds=INTEGRAL, expr=L.bitwise("and"))
BITWISE_OR = binary("bitwise_or", np.bitwise_or, kinds=INTEGRAL, expr=L.bitwise("or"))
BITWISE_XOR = binary("bitwise_xor", np.bitwise_xor, kinds=INTEGRAL, expr=L.bitwise("xor"))
BITWISE_NOT = unary("bitwise_not", np.invert, kinds=INTEGRAL, expr=L.bitwise_not,
                    doc="~x (logical not for bool)")
BITWISE_LEFT_SHIFT = binary("bitwise_left_shift", np.left_shift, kinds=INT,
                            expr=L.shift("shl"),
                            doc="a << b (wraps; shifts >= the bit width give 0)")
BITWISE_RIGHT_SHIFT = binary("bitwise_right_shift", np.right_shift, kinds=INT,
                             expr=L.shift("shr"),
                             doc="a >> b, arithmetic for signed ints")


# -- select ---------------------------------------------------------------------------------
def _where_infer(cond, a, b):
    cd = cond._dtype
    if cd.kind != "bool":
        raise DTypeError(f"where: the condition must be a bool tensor, got {cd.short}; "
                         f"compare first (e.g. x > 0) or cast with .bool()")
    ta, tb = _is_t(a), _is_t(b)
    d = a._dtype if ta else b._dtype
    if ta and tb and b._dtype is not d:
        raise DTypeError(f"where: the two branches must share a dtype, got {d.short} and "
                         f"{b._dtype.short} (the Tensor API promotes them)")
    shapes = [cond._shape]
    if ta:
        shapes.append(a._shape)
    if tb:
        shapes.append(b._shape)
    return (broadcast_many("where", shapes), d)


def _where_numpy(cond, a, b, *, xp=np):
    return xp.where(cond, a, b)


def _where_vjp(g, i, o):
    cond, a, b = i
    return (None,
            api.where(cond, g, 0.0) if _is_t(a) else None,
            api.where(cond, 0.0, g) if _is_t(b) else None)


WHERE = declare("where", "other", nin=3, infer=_where_infer, numpy=_where_numpy,
                vjp=_where_vjp, expr=L.where,
                doc="a where cond else b, broadcast over all three")
