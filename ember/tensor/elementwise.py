"""Elementwise functions of the Tensor API and their operator overloads.

Binary functions take tensors or Python scalars on either side; scalars are weak (see
`ember.dtype`). Semantics shared by every backend are listed in `ember.ops.elementwise`.
"""
from __future__ import annotations

from .. import dtype as dt
from ..errors import DTypeError
from ..ops import elementwise as E
from . import dispatch
from .creation import full
from .dispatch import _is_scalar, _py_scalar, apply, binary, unary

__all__ = [
    "add", "sub", "mul", "div", "neg", "exp", "log", "expm1", "log1p", "sqrt", "rsqrt",
    "recip", "sin", "cos", "tan", "sinh", "cosh", "tanh", "asin", "acos", "atan", "erf",
    "abs", "sign", "round", "floor", "ceil", "trunc", "is_nan", "is_inf", "is_finite",
    "pow", "atan2", "remainder", "floor_div", "maximum", "minimum", "clamp", "clamp_min",
    "clamp_max", "cast", "equal", "not_equal", "greater", "greater_equal", "lower",
    "lower_equal", "logical_and", "logical_or", "logical_xor", "logical_not", "bitwise_and",
    "bitwise_or", "bitwise_xor", "bitwise_not", "bitwise_left_shift", "bitwise_right_shift",
    "where", "mask_fill", "mask_where",
]


# -- arithmetic -----------------------------------------------------------------------------
def add(a, b):
    return binary(E.ADD, a, b)


def sub(a, b):
    return binary(E.SUB, a, b)


def mul(a, b):
    return binary(E.MUL, a, b)


def div(a, b):
    """True division; int inputs give float results."""
    return binary(E.DIV, a, b)


def pow(a, b):  # noqa: A001
    """``a ** b`` for tensors and scalars on either side. Int tensors need exponents >= 0."""
    return binary(E.POW, a, b)


def atan2(a, b):
    """The angle of the point ``(b, a)``; ints are promoted to float."""
    return binary(E.ATAN2, a, b)


def remainder(a, b):
    """``a % b`` with the divisor's sign (Python's convention)."""
    return binary(E.REMAINDER, a, b)


def floor_div(a, b):
    """``a // b``: the quotient rounded toward -inf."""
    return binary(E.FLOOR_DIV, a, b)


def maximum(a, b):
    """Elementwise max; nan propagates; on ties the gradient is split half and half."""
    return binary(E.MAXIMUM, a, b)


def minimum(a, b):
    """Elementwise min; nan propagates; on ties the gradient is split half and half."""
    return binary(E.MINIMUM, a, b)


# -- unary ----------------------------------------------------------------------------------
def neg(x):
    return unary(E.NEG, x)


def exp(x):
    return unary(E.EXP, x)


def log(x):
    return unary(E.LOG, x)


def expm1(x):
    return unary(E.EXPM1, x)


def log1p(x):
    return unary(E.LOG1P, x)


def sqrt(x):
    return unary(E.SQRT, x)


def rsqrt(x):
    return unary(E.RSQRT, x)


def recip(x):
    return unary(E.RECIP, x)


def sin(x):
    return unary(E.SIN, x)


def cos(x):
    return unary(E.COS, x)


def tan(x):
    return unary(E.TAN, x)


def sinh(x):
    return unary(E.SINH, x)


def cosh(x):
    return unary(E.COSH, x)


def tanh(x):
    return unary(E.TANH, x)


def asin(x):
    return unary(E.ASIN, x)


def acos(x):
    return unary(E.ACOS, x)


def atan(x):
    return unary(E.ATAN, x)


def erf(x):
    return unary(E.ERF, x)


def abs(x):  # noqa: A001
    return unary(E.ABS, x)


def sign(x):
    return unary(E.SIGN, x)


def round(x):  # noqa: A001
    """Round half to even; int tensors are returned unchanged."""
    return unary(E.ROUND, x)


def floor(x):
    return unary(E.FLOOR, x)


def ceil(x):
    return unary(E.CEIL, x)


def trunc(x):
    return unary(E.TRUNC, x)


def is_nan(x):
    return unary(E.IS_NAN, x)


def is_inf(x):
    return unary(E.IS_INF, x)


def is_finite(x):
    return unary(E.IS_FINITE, x)


def cast(x, dtype):
    """``x`` converted to ``dtype``: float to int truncates toward zero (nan and inf give 0,
    out-of-range values wrap), anything to bool is ``x != 0``."""
    dtype = dt.as_dtype(dtype)
    if x._dtype is dtype:
        return x
    return unary(E.CAST, x, {"dtype": dtype})


# -- clamp ----------------------------------------------------------------------------------
def clamp(x, min=None, max=None):  # noqa: A002
    """``x`` clipped to ``[min, max]``; bounds are scalars, tensors (broadcast) or None.
    Scalar bounds are weak like binary operands (a float bound makes an int tensor float);
    min > max gives max everywhere; nan stays nan."""
    Tensor = dispatch.Tensor
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        out = x
        if isinstance(min, Tensor):
            out = maximum(out, min)
        elif min is not None:
            out = clamp(out, min=min)
        if isinstance(max, Tensor):
            out = minimum(out, max)
        elif max is not None:
            out = clamp(out, max=max)
        return out
    if not isinstance(x, Tensor):
        raise DTypeError(f"clamp: expects a Tensor, got {type(x).__name__}")
    d = x._dtype
    if d.kind == "bool":
        raise DTypeError("clamp: expects a float or int tensor, got bool")
    common = d
    for b in (min, max):
        if b is None or (type(b) is float and common.kind == "float") or type(b) is int:
            continue  # the common cases: nothing to promote
        if not _is_scalar(b):
            raise DTypeError(f"clamp: bounds must be Tensors, numbers or None, got "
                             f"{type(b).__name__} {b!r}")
        common = dt.promote(common, dt.promote_scalar(d, b))
    if common is not d:
        x = x.cast(common)
    lo = _bound(min, common)
    hi = _bound(max, common)
    if lo is None and hi is None:
        return x
    return unary(E.CLAMP, x, {"min": lo, "max": hi})


def _bound(b, d):
    if b is None:
        return None
    if d.kind == "float":
        return float(b)
    # an int bound beyond the dtype's range clips nothing on that side: saturate it
    lo, hi = dispatch.INT_RANGE[d]
    v = int(b)
    return lo if v < lo else hi if v > hi else v


def clamp_min(x, min):  # noqa: A002
    return clamp(x, min=min)


def clamp_max(x, max):  # noqa: A002
    return clamp(x, max=max)


# -- comparisons ----------------------------------------------------------------------------
def equal(a, b):
    return binary(E.EQUAL, a, b)


def not_equal(a, b):
    return binary(E.NOT_EQUAL, a, b)


def greater(a, b):
    return binary(E.GREATER, a, b)


def greater_equal(a, b):
    return binary(E.GREATER_EQUAL, a, b)


def lower(a, b):
    return binary(E.LOWER, a, b)


def lower_equal(a, b):
    return binary(E.LOWER_EQUAL, a, b)


# -- logic and bits -------------------------------------------------------------------------
def logical_and(a, b):
    """Truthiness of both operands (nonzero is True), any kinds."""
    return binary(E.LOGICAL_AND, a, b)


def logical_or(a, b):
    return binary(E.LOGICAL_OR, a, b)


def logical_xor(a, b):
    return binary(E.LOGICAL_XOR, a, b)


def logical_not(x):
    return unary(E.LOGICAL_NOT, x)


def bitwise_and(a, b):
    return binary(E.BITWISE_AND, a, b)


def bitwise_or(a, b):
    return binary(E.BITWISE_OR, a, b)


def bitwise_xor(a, b):
    return binary(E.BITWISE_XOR, a, b)


def bitwise_not(x):
    return unary(E.BITWISE_NOT, x)


def bitwise_left_shift(a, b):
    return binary(E.BITWISE_LEFT_SHIFT, a, b)


def bitwise_right_shift(a, b):
    return binary(E.BITWISE_RIGHT_SHIFT, a, b)


# -- select ---------------------------------------------------------------------------------
def where(cond, a, b):
    """``a`` where ``cond`` else ``b``, broadcast over all three. ``cond`` must be a bool
    tensor; ``a`` and ``b`` (tensors or scalars) are promoted like binary operands."""
    Tensor = dispatch.Tensor
    if not isinstance(cond, Tensor):
        raise DTypeError(f"where: the condition must be a bool Tensor, got "
                         f"{type(cond).__name__}")
    ta, tb = isinstance(a, Tensor), isinstance(b, Tensor)
    if ta and tb:
        d = dt.promote(a._dtype, b._dtype) if a._dtype is not b._dtype else a._dtype
    elif ta:
        d = dt.promote_scalar(a._dtype, _scalar("where", b))
    elif tb:
        d = dt.promote_scalar(b._dtype, _scalar("where", a))
    else:
        d = dt.promote(dt.scalar_dtype(_scalar("where", a)), dt.scalar_dtype(_scalar("where", b)))
        a, ta = _full_scalar(a, d, cond), True
    a = _as(a, ta, d, "where")
    b = _as(b, tb, d, "where")
    return apply(E.WHERE, (cond, a, b))


def _scalar(op, s):
    if not _is_scalar(s):
        raise DTypeError(f"{op}: expects a Tensor or a number, got {type(s).__name__} {s!r}")
    return s


def _as(x, is_tensor, d, op):
    if is_tensor:
        return x if x._dtype is d else x.cast(d)
    return _py_scalar(x, d, op)


def _full_scalar(s, d, like):
    return full((), _py_scalar(s, d, "where"), dtype=d, device=like._device)


def _check_mask(op, mask):
    if not isinstance(mask, dispatch.Tensor) or mask._dtype.kind != "bool":
        got = mask._dtype.short if isinstance(mask, dispatch.Tensor) else type(mask).__name__
        raise DTypeError(f"{op}: the mask must be a bool tensor, got {got}; compare first "
                         f"(e.g. x > 0) or cast with .bool()")


def mask_fill(x, mask, value):
    """``x`` with ``value`` where ``mask`` is True. The result keeps ``x``'s dtype: an int
    tensor cannot take a fractional value."""
    _check_mask("mask_fill", mask)
    d = x._dtype
    if isinstance(value, dispatch.Tensor):
        value = value if value._dtype is d else value.cast(d)
    else:
        _scalar("mask_fill", value)
        if d.kind != "float" and isinstance(value, float) and not value.is_integer():
            raise DTypeError(f"mask_fill: the value {value} is not an integer but the tensor "
                             f"is {d.short}; cast the tensor to float first")
        value = _py_scalar(value, d, "mask_fill")
    return apply(E.WHERE, (mask, value, x))


def mask_where(x, mask, other):
    """``other`` where ``mask`` is True, else ``x`` (dtypes promote like ``where``)."""
    _check_mask("mask_where", mask)
    return where(mask, other, x)


# -- methods and operators ------------------------------------------------------------------
class ElementwiseMethods:
    __slots__ = ()
    add = add
    sub = sub
    mul = mul
    div = div
    neg = neg
    exp = exp
    log = log
    expm1 = expm1
    log1p = log1p
    sqrt = sqrt
    rsqrt = rsqrt
    recip = recip
    sin = sin
    cos = cos
    tan = tan
    sinh = sinh
    cosh = cosh
    tanh = tanh
    asin = asin
    acos = acos
    atan = atan
    erf = erf
    abs = abs
    sign = sign
    round = round
    floor = floor
    ceil = ceil
    trunc = trunc
    is_nan = is_nan
    is_inf = is_inf
    is_finite = is_finite
    pow = pow
    atan2 = atan2
    remainder = remainder
    floor_div = floor_div
    maximum = maximum
    minimum = minimum
    clamp = clamp
    clamp_min = clamp_min
    clamp_max = clamp_max
    equal = equal
    not_equal = not_equal
    greater = greater
    greater_equal = greater_equal
    lower = lower
    lower_equal = lower_equal
    # Burn's spellings for a scalar operand (the plain forms take scalars too)
    equal_elem = equal
    not_equal_elem = not_equal
    greater_elem = greater
    greater_equal_elem = greater_equal
    lower_elem = lower
    lower_equal_elem = lower_equal
    logical_and = logical_and
    logical_or = logical_or
    logical_xor = logical_xor
    logical_not = logical_not
    bitwise_and = bitwise_and
    bitwise_or = bitwise_or
    bitwise_xor = bitwise_xor
    bitwise_not = bitwise_not
    bitwise_left_shift = bitwise_left_shift
    bitwise_right_shift = bitwise_right_shift
    mask_fill = mask_fill
    mask_where = mask_where

    def __add__(self, o):
        return binary(E.ADD, self, o)

    def __radd__(self, o):
        return binary(E.ADD, o, self)

    def __sub__(self, o):
        return binary(E.SUB, self, o)

    def __rsub__(self, o):
        return binary(E.SUB, o, self)

    def __mul__(self, o):
        return binary(E.MUL, self, o)

    def __rmul__(self, o):
        return binary(E.MUL, o, self)

    def __truediv__(self, o):
        return binary(E.DIV, self, o)

    def __rtruediv__(self, o):
        return binary(E.DIV, o, self)

    def __floordiv__(self, o):
        return binary(E.FLOOR_DIV, self, o)

    def __rfloordiv__(self, o):
        return binary(E.FLOOR_DIV, o, self)

    def __mod__(self, o):
        return binary(E.REMAINDER, self, o)

    def __rmod__(self, o):
        return binary(E.REMAINDER, o, self)

    def __pow__(self, o):
        return binary(E.POW, self, o)

    def __rpow__(self, o):
        return binary(E.POW, o, self)

    def __neg__(self):
        return unary(E.NEG, self)

    def __pos__(self):
        return self

    def __abs__(self):
        return unary(E.ABS, self)

    def __invert__(self):
        return unary(E.BITWISE_NOT, self)

    def __and__(self, o):
        return binary(E.BITWISE_AND, self, o)

    def __rand__(self, o):
        return binary(E.BITWISE_AND, o, self)

    def __or__(self, o):
        return binary(E.BITWISE_OR, self, o)

    def __ror__(self, o):
        return binary(E.BITWISE_OR, o, self)

    def __xor__(self, o):
        return binary(E.BITWISE_XOR, self, o)

    def __rxor__(self, o):
        return binary(E.BITWISE_XOR, o, self)

    def __lshift__(self, o):
        return binary(E.BITWISE_LEFT_SHIFT, self, o)

    def __rlshift__(self, o):
        return binary(E.BITWISE_LEFT_SHIFT, o, self)

    def __rshift__(self, o):
        return binary(E.BITWISE_RIGHT_SHIFT, self, o)

    def __rrshift__(self, o):
        return binary(E.BITWISE_RIGHT_SHIFT, o, self)

    def __eq__(self, o):
        return binary(E.EQUAL, self, o)

    def __ne__(self, o):
        return binary(E.NOT_EQUAL, self, o)

    def __lt__(self, o):
        return binary(E.LOWER, self, o)

    def __le__(self, o):
        return binary(E.LOWER_EQUAL, self, o)

    def __gt__(self, o):
        return binary(E.GREATER, self, o)

    def __ge__(self, o):
        return binary(E.GREATER_EQUAL, self, o)
