"""Cases for the elementwise family: unary math, binary arithmetic, comparisons, logic, bits,
where/mask, clamp and casts between every pair of dtypes.

References are independent of ember: NumPy in float64/int64, and the Python ``math`` module
or Python's own operators (``%``, ``//``, ``round``, ``**``) elementwise. Every case name
starts with ``ew_`` (run them with ``-k ew_``).
"""
import math
import operator

import numpy as np

import ember as em
from tests.conformance.harness import ALL, FLOATS, INTS, NUMERIC, TOL, Case, Input

UN = [((2, 3),), ((),), ((0, 3),), ((1, 4),)]
BIN = [((2, 3), (2, 3)), ((), ()), ((0, 3), (0, 3)), ((4, 1), (1, 3)), ((3,), (2, 3)),
       ((2, 1, 3), (4, 1))]
TRI = [((2, 3),) * 3, ((),) * 3, ((0, 3),) * 3, ((4, 1), (1, 3), (4, 3)),
       ((2, 1, 3), (3,), (4, 1))]
SIGNED = ("i64", "i32", "i16", "i8")
INTEGRAL = INTS + ("bool",)
T_F32 = {"f32": TOL["f32"]}         # for int inputs whose result is f32
BOOL = Input("bool", dtype="bool", differentiable=False)


def pyvec(fn, otype=np.float64):
    """``fn`` applied elementwise (with broadcasting) through Python: an independent
    reference. ``otype`` None: int64 when every input is int, else float64."""
    def run(*arrays):
        ot = otype
        if ot is None:
            ot = np.int64 if all(np.asarray(a).dtype.kind in "iub" for a in arrays) \
                else np.float64
        return np.vectorize(fn, otypes=[ot])(*arrays)
    return run


def values(*vals):
    """Input values cycling through ``vals`` (shuffled), so every one shows up."""
    def gen(rng, shape):
        n = int(np.prod(shape)) if shape else 1
        return np.resize(rng.permutation(np.array(vals, dtype=np.float64)), n).reshape(shape)
    return gen


def grid(*vals, axis):
    """An (n, n) input over ``vals`` along ``axis``: two such inputs, one per axis, pair every
    value of one with every value of the other."""
    v = np.array(vals, dtype=np.float64)
    return lambda rng, shape: np.broadcast_to(v[:, None] if axis == 0 else v, (len(v),) * 2)


def nonzero(rng, shape):
    """Values of either sign, |v| in [0.5, 2] (ints: +-2..6 after the harness' x3)."""
    return rng.choice([-1.0, 1.0], size=shape) * rng.uniform(0.5, 2.0, size=shape)


def halves(rng, shape):
    return rng.integers(-8, 9, size=shape) / 2.0


def _round_ref(v):
    return float(round(v)) if math.isfinite(v) else v


def _int_pow(a, b):
    """PyTorch's integer power: negative exponents give 1, +-1 or 0."""
    a, b = int(a), int(b)
    if b >= 0:
        return a ** b
    if a == 1:
        return 1
    if a == -1:
        return -1 if b % 2 else 1
    return 0


SPECIAL = (0.0, -0.0, 1.5, -2.25, np.inf, -np.inf, np.nan, 1e-30)
SP_SHAPES = [((3, 4),), ((8,),)]

CASES = []


def case(*args, **kw):
    CASES.append(Case(*args, **kw))


# -- unary float math -----------------------------------------------------------------------
_UNARY_FLOAT = [
    ("expm1", np.expm1, Input()),
    ("log1p", np.log1p, Input("uniform", -0.5, 2.0)),
    ("sqrt", np.sqrt, Input("positive")),
    ("rsqrt", lambda a: 1.0 / np.sqrt(a), Input("positive")),
    ("recip", lambda a: 1.0 / a, Input(nonzero)),
    ("sin", np.sin, Input("uniform", -4, 4)),
    ("cos", np.cos, Input("uniform", -4, 4)),
    ("tan", np.tan, Input("uniform", -1.2, 1.2)),
    ("sinh", np.sinh, Input()),
    ("cosh", np.cosh, Input()),
    ("tanh", np.tanh, Input()),
    ("asin", np.arcsin, Input("uniform", -0.9, 0.9)),
    ("acos", np.arccos, Input("uniform", -0.9, 0.9)),
    ("atan", np.arctan, Input("uniform", -4, 4)),
    ("erf", pyvec(math.erf), Input("uniform", -4, 4)),
]
for _name, _ref, _inp in _UNARY_FLOAT:
    case(f"ew_{_name}", _name, (lambda n: lambda a: getattr(a, n)())(_name), _ref, UN,
         inputs=(_inp,))
    case(f"ew_{_name}_fn", _name, (lambda n: lambda a: getattr(em, n)(a))(_name), _ref,
         [((3, 2),)], inputs=(_inp,), grad=False, layouts=False)

case("ew_erf_tails", "erf", lambda a: a.erf(), pyvec(math.erf), [((4, 5),), ((20,),)],
     inputs=(Input("uniform", -7, 7),), layouts=False)
case("ew_erf_special", "erf", lambda a: a.erf(), pyvec(math.erf), SP_SHAPES,
     inputs=(Input(values(*SPECIAL, 6.0, -5.99, 3.5, 0.124, 0.126)),), grad=False)
case("ew_sqrt_special", "sqrt", lambda a: a.sqrt(), np.sqrt, SP_SHAPES,
     inputs=(Input(values(0.0, -0.0, 0.25, 4.0, np.inf, 2.0, 1e-30, np.nan)),), grad=False)
case("ew_exp_log_special", ("exp", "log", "log1p", "expm1"),
     lambda a: (a.exp(), a.abs().log(), a.abs().log1p(), a.expm1()),
     lambda a: (np.exp(a), np.log(np.abs(a)), np.log1p(np.abs(a)), np.expm1(a)), SP_SHAPES,
     inputs=(Input(values(*SPECIAL)),), grad=False)
case("ew_trig_special", ("sin", "cos", "tanh", "atan", "recip", "rsqrt"),
     lambda a: (a.sin(), a.cos(), a.tanh(), a.atan(), a.recip(), a.abs().rsqrt()),
     lambda a: (np.sin(a), np.cos(a), np.tanh(a), np.arctan(a), 1 / a, 1 / np.sqrt(np.abs(a))),
     SP_SHAPES, inputs=(Input(values(*SPECIAL)),), grad=False)

# -- unary numeric --------------------------------------------------------------------------
case("ew_abs", "abs", lambda a: a.abs(), np.abs, UN, dtypes=NUMERIC)
case("ew_abs_builtin", "abs", lambda a: abs(a), np.abs, UN[:1], dtypes=NUMERIC, grad=False)
case("ew_sign", "sign", lambda a: a.sign(), np.sign, UN, dtypes=NUMERIC,
     inputs=(Input("int", -2, 2),), grad=False)
case("ew_sign_grad", "sign", lambda a: em.sign(a), np.sign, UN)
case("ew_round_halves", "round", lambda a: a.round(), pyvec(_round_ref), UN, dtypes=NUMERIC,
     inputs=(Input(halves),), grad=False)
case("ew_round", "round", lambda a: em.round(a), pyvec(_round_ref), UN,
     inputs=(Input("uniform", -4, 4),))
for _name, _fn in (("floor", math.floor), ("ceil", math.ceil), ("trunc", math.trunc)):
    case(f"ew_{_name}", _name, (lambda n: lambda a: getattr(a, n)())(_name),
         pyvec((lambda f: lambda v: float(f(v)) if math.isfinite(v) else v)(_fn)), UN,
         dtypes=NUMERIC, inputs=(Input("uniform", -4, 4),))
    case(f"ew_{_name}_halves", _name, (lambda n: lambda a: getattr(em, n)(a))(_name),
         pyvec((lambda f: lambda v: float(f(v)))(_fn)), UN[:1], inputs=(Input(halves),),
         grad=False)
case("ew_rounding_special", ("round", "floor", "ceil", "trunc", "sign", "abs"),
     lambda a: (a.round(), a.floor(), a.ceil(), a.trunc(), a.sign(), a.abs()),
     lambda a: (np.rint(a), np.floor(a), np.ceil(a), np.trunc(a), np.sign(a), np.abs(a)),
     SP_SHAPES, inputs=(Input(values(*SPECIAL)),), grad=False)
for _name, _ref in (("is_nan", np.isnan), ("is_inf", np.isinf), ("is_finite", np.isfinite)):
    case(f"ew_{_name}", _name, (lambda n: lambda a: getattr(a, n)())(_name), _ref, SP_SHAPES,
         inputs=(Input(values(*SPECIAL)),), grad=False)
    case(f"ew_{_name}_ints", _name, (lambda n: lambda a: getattr(em, n)(a))(_name),
         lambda a, r=_ref: r(a.astype(np.float64)), UN, dtypes=INTEGRAL, grad=False)

# -- pow ------------------------------------------------------------------------------------
case("ew_pow", "pow", lambda a, b: a ** b, np.power, BIN,
     inputs=(Input("positive", 0.5, 2.0), Input("uniform", -2, 2)))
case("ew_pow_fn", "pow", lambda a, b: em.pow(a, b), np.power, BIN[:2],
     inputs=(Input("positive", 0.5, 2.0), Input("uniform", -2, 2)))
case("ew_pow_ints", "pow", lambda a, b: a ** b, pyvec(operator.pow, None), BIN, dtypes=INTS,
     inputs=(Input("int", -3, 3), Input("int", 0, 3)), grad=False)
case("ew_pow_ints_neg_exponent", "pow", lambda a, b: a.pow(b), pyvec(_int_pow, np.int64), BIN,
     dtypes=SIGNED, inputs=(Input("int", -3, 3), Input("int", -3, 3)), grad=False)
case("ew_pow_scalar_2", "pow", lambda a: a ** 2, lambda a: a ** 2, UN, dtypes=NUMERIC)
case("ew_pow_scalar_half", "pow", lambda a: a ** 0.5, np.sqrt, UN,
     inputs=(Input("positive"),))
case("ew_pow_scalar_neg", "pow", lambda a: a.pow(-1.5), lambda a: a ** -1.5, UN,
     inputs=(Input("positive"),))
case("ew_pow_int_float_exponent", "pow", lambda a: a ** 1.5, lambda a: np.abs(a) ** 1.5, UN,
     dtypes=INTS, inputs=(Input("uniform", 0, 2),), tol=T_F32, grad=False)
case("ew_rpow_scalar", "pow", lambda a: 2.0 ** a, lambda a: 2.0 ** a, UN)
case("ew_rpow_scalar_int", "pow", lambda a: 2 ** a, lambda a: np.power(2, a), UN,
     dtypes=INTS, inputs=(Input("int", 0, 4),), grad=False)
case("ew_pow_special", "pow", lambda a, b: a ** b, np.power, [((8, 8), (8, 8))],
     inputs=(Input(grid(0.0, -0.0, 2.0, -2.0, np.inf, np.nan, 1.0, 0.5, axis=0)),
             Input(grid(0.0, 1.0, -1.0, 2.0, 0.5, np.inf, -np.inf, np.nan, axis=1))),
     grad=False, layouts=False)

# -- atan2, remainder, floor_div ------------------------------------------------------------
case("ew_atan2", "atan2", lambda a, b: em.atan2(a, b), np.arctan2, BIN)
case("ew_atan2_method_scalar", "atan2", lambda a: a.atan2(-0.5), lambda a: np.arctan2(a, -0.5),
     UN)
case("ew_atan2_ints", "atan2", lambda a, b: em.atan2(a, b),
     lambda a, b: np.arctan2(a.astype(np.float64), b.astype(np.float64)), BIN[:4],
     dtypes=INTEGRAL, tol=T_F32, grad=False)
case("ew_atan2_special", "atan2", lambda a, b: em.atan2(a, b), np.arctan2, [((8, 8), (8, 8))],
     inputs=(Input(grid(0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 2.0, axis=0)),
             Input(grid(0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 3.0, axis=1))),
     grad=False, layouts=False)
case("ew_remainder", "remainder", lambda a, b: a % b, pyvec(operator.mod, None), BIN,
     dtypes=NUMERIC, inputs=(Input("uniform", -5, 5), Input(nonzero)))
case("ew_remainder_fn", "remainder", lambda a, b: em.remainder(a, b),
     pyvec(operator.mod, None), BIN[:2], dtypes=NUMERIC,
     inputs=(Input("uniform", -5, 5), Input(nonzero)))
case("ew_remainder_scalar", "remainder", lambda a: a % 1.5, pyvec(lambda v: v % 1.5), UN,
     inputs=(Input("uniform", -5, 5),))
case("ew_remainder_scalar_neg", "remainder", lambda a: a.remainder(-3),
     pyvec(lambda v: v % -3, None), UN, dtypes=FLOATS + SIGNED,
     inputs=(Input("uniform", -5, 5),))
case("ew_rremainder_scalar", "remainder", lambda a: 5 % a, pyvec(lambda v: 5 % v, None), UN,
     dtypes=NUMERIC, inputs=(Input(nonzero),))
case("ew_floor_div", "floor_div", lambda a, b: a // b, pyvec(operator.floordiv, None), BIN,
     dtypes=NUMERIC, inputs=(Input("uniform", -5, 5), Input(nonzero)))
case("ew_floor_div_fn", "floor_div", lambda a, b: em.floor_div(a, b),
     pyvec(operator.floordiv, None), BIN[:2], dtypes=NUMERIC,
     inputs=(Input("uniform", -5, 5), Input(nonzero)), grad=False)
case("ew_floor_div_scalar", "floor_div", lambda a: a // 2, pyvec(lambda v: v // 2, None), UN,
     dtypes=NUMERIC, inputs=(Input("uniform", -5, 5),))
case("ew_rfloor_div_scalar", "floor_div", lambda a: 7 // a, pyvec(lambda v: 7 // v, None), UN,
     dtypes=NUMERIC, inputs=(Input(nonzero),), grad=False)

# -- maximum, minimum, clamp ----------------------------------------------------------------
for _name, _ref in (("maximum", np.maximum), ("minimum", np.minimum)):
    case(f"ew_{_name}", _name, (lambda n: lambda a, b: getattr(em, n)(a, b))(_name), _ref, BIN,
         dtypes=ALL)
    case(f"ew_{_name}_scalar", _name, (lambda n: lambda a: getattr(a, n)(0.25))(_name),
         lambda a, r=_ref: r(a, 0.25), UN)
    case(f"ew_{_name}_scalar_int", _name, (lambda n: lambda a: getattr(em, n)(1, a))(_name),
         lambda a, r=_ref: r(1, a), UN, dtypes=INTS, grad=False)
    case(f"ew_{_name}_nan", _name, (lambda n: lambda a, b: getattr(em, n)(a, b))(_name), _ref,
         [((3, 4), (3, 4))], inputs=(Input(values(*SPECIAL)), Input()), grad=False)

case("ew_clamp", "clamp", lambda a: a.clamp(-0.5, 0.7), lambda a: np.clip(a, -0.5, 0.7), UN)
case("ew_clamp_ints", "clamp", lambda a: em.clamp(a, -2, 3), lambda a: np.clip(a, -2, 3), UN,
     dtypes=INTS, grad=False)
case("ew_clamp_min", "clamp", lambda a: a.clamp(min=-0.3), lambda a: np.maximum(a, -0.3), UN)
case("ew_clamp_max", "clamp", lambda a: a.clamp_max(0.4), lambda a: np.minimum(a, 0.4), UN,
     dtypes=NUMERIC, tol=T_F32)
case("ew_clamp_wide_int_bounds", "clamp", lambda a: a.clamp(-1000, 1000), lambda a: a, UN,
     dtypes=INTS, grad=False)
case("ew_clamp_int_float_bounds", "clamp", lambda a: a.clamp(-1.5, 2.5),
     lambda a: np.clip(a, -1.5, 2.5), UN, dtypes=INTS, tol=T_F32, grad=False)
case("ew_clamp_min_gt_max", "clamp", lambda a: a.clamp(1.0, -1.0),
     lambda a: np.full_like(a, -1.0), UN[:2], grad=False)
case("ew_clamp_special", "clamp", lambda a: a.clamp(-1.0, 1.0), lambda a: np.clip(a, -1, 1),
     SP_SHAPES, inputs=(Input(values(*SPECIAL)),), grad=False)
case("ew_clamp_tensor_bounds", ("maximum", "minimum"), lambda a, lo, hi: a.clamp(lo, hi),
     lambda a, lo, hi: np.minimum(np.maximum(a, lo), hi),
     [((2, 3), (2, 3), (2, 3)), ((), (), ()), ((4, 3), (3,), (4, 1))],
     inputs=(Input(), Input("uniform", -1.5, -0.2), Input("uniform", 0.2, 1.5)))
case("ew_clamp_mixed_bounds", ("clamp", "minimum"), lambda a, hi: a.clamp(-0.5, hi),
     lambda a, hi: np.minimum(np.maximum(a, -0.5), hi), [((2, 3), (2, 3)), ((4, 3), (3,))],
     inputs=(Input(), Input("uniform", 0.2, 1.5)))

# -- comparisons ----------------------------------------------------------------------------
_CMP = (("not_equal", operator.ne, np.not_equal), ("greater", operator.gt, np.greater),
        ("greater_equal", operator.ge, np.greater_equal), ("lower", operator.lt, np.less),
        ("lower_equal", operator.le, np.less_equal))
_TIES = (Input("int", 0, 2), Input("int", 0, 2))
for _name, _op, _ref in _CMP:
    case(f"ew_{_name}", _name, _op, _ref, BIN, dtypes=ALL, inputs=_TIES, grad=False)
    case(f"ew_{_name}_fn", _name, (lambda n: lambda a, b: getattr(em, n)(a, b))(_name), _ref,
         BIN[:3], dtypes=ALL, inputs=_TIES, grad=False, layouts=False)
    case(f"ew_{_name}_scalar", _name, (lambda o: lambda a: o(a, 1))(_op),
         (lambda r: lambda a: r(a, 1))(_ref), UN, dtypes=ALL, inputs=_TIES[:1], grad=False)
    case(f"ew_{_name}_rscalar", _name, (lambda o: lambda a: o(1, a))(_op),
         (lambda r: lambda a: r(1, a))(_ref), UN, dtypes=ALL, inputs=_TIES[:1], grad=False)
    case(f"ew_{_name}_float_scalar", _name, (lambda o: lambda a: o(a, 1.5))(_op),
         (lambda r: lambda a: r(a, 1.5))(_ref), UN, dtypes=ALL, inputs=_TIES[:1], grad=False)
case("ew_equal_scalar", "equal", lambda a: a.equal_elem(1), lambda a: a == 1, UN, dtypes=ALL,
     inputs=_TIES[:1], grad=False)
case("ew_compare_special", ("equal", "not_equal", "greater", "lower_equal"),
     lambda a, b: (a == b, a != b, a > b, a <= b),
     lambda a, b: (a == b, a != b, a > b, a <= b), [((8, 8), (8, 8))],
     inputs=(Input(grid(0.0, -0.0, 1.0, np.inf, -np.inf, np.nan, 2.0, -1.0, axis=0)),
             Input(grid(-0.0, 0.0, 1.0, np.inf, -np.inf, np.nan, 3.0, -1.0, axis=1))),
     grad=False, layouts=False)
case("ew_compare_mixed_dtypes", ("greater", "cast"), lambda a, b: a > b, np.greater, BIN[:4],
     dtypes=NUMERIC, inputs=(Input(), Input("int", -2, 2, dtype="i32")), grad=False)

# -- logical --------------------------------------------------------------------------------
_LOGIC = (("logical_and", np.logical_and), ("logical_or", np.logical_or),
          ("logical_xor", np.logical_xor))
for _name, _ref in _LOGIC:
    case(f"ew_{_name}", _name, (lambda n: lambda a, b: getattr(a, n)(b))(_name), _ref, BIN,
         dtypes=ALL, inputs=_TIES, grad=False)
    case(f"ew_{_name}_scalar", _name, (lambda n: lambda a: getattr(em, n)(a, 1))(_name),
         lambda a, r=_ref: r(a, 1), UN, dtypes=ALL, inputs=_TIES[:1], grad=False)
    case(f"ew_{_name}_rscalar_false", _name,
         (lambda n: lambda a: getattr(em, n)(False, a))(_name), lambda a, r=_ref: r(False, a),
         UN, dtypes=ALL, inputs=_TIES[:1], grad=False)
case("ew_logical_not", "logical_not", lambda a: a.logical_not(), np.logical_not, UN,
     dtypes=ALL, inputs=_TIES[:1], grad=False)
case("ew_logical_special", ("logical_and", "logical_not"),
     lambda a: (em.logical_and(a, 1.0), em.logical_not(a)),
     lambda a: (a != 0, a == 0), SP_SHAPES, inputs=(Input(values(*SPECIAL)),), grad=False)

# -- bitwise --------------------------------------------------------------------------------
_BITS = Input("int", -8, 8)
for _name, _op, _ref in (("bitwise_and", operator.and_, np.bitwise_and),
                         ("bitwise_or", operator.or_, np.bitwise_or),
                         ("bitwise_xor", operator.xor, np.bitwise_xor)):
    case(f"ew_{_name}", _name, _op, _ref, BIN, dtypes=INTEGRAL, inputs=(_BITS, _BITS),
         grad=False)
    case(f"ew_{_name}_fn", _name, (lambda n: lambda a, b: getattr(em, n)(a, b))(_name), _ref,
         BIN[:2], dtypes=INTEGRAL, inputs=(_BITS, _BITS), grad=False, layouts=False)
    case(f"ew_{_name}_scalar", _name, (lambda o: lambda a: o(a, 6))(_op),
         (lambda r: lambda a: r(a, 6))(_ref), UN, dtypes=INTEGRAL, inputs=(_BITS,), grad=False)
    case(f"ew_{_name}_rscalar", _name, (lambda o: lambda a: o(5, a))(_op),
         (lambda r: lambda a: r(5, a))(_ref), UN, dtypes=INTS, inputs=(_BITS,), grad=False)
    case(f"ew_{_name}_bool_scalar", _name, (lambda o: lambda a: o(a, True))(_op),
         (lambda r: lambda a: r(a, True))(_ref), UN[:2], dtypes=("bool",), inputs=(_BITS,),
         grad=False)
case("ew_bitwise_not", "bitwise_not", lambda a: ~a, np.invert, UN, dtypes=INTEGRAL,
     inputs=(_BITS,), grad=False)
case("ew_bitwise_not_fn", "bitwise_not", lambda a: em.bitwise_not(a), np.invert, UN[:2],
     dtypes=INTEGRAL, inputs=(_BITS,), grad=False)
_SHIFT = Input("int", 0, 5)
case("ew_bitwise_left_shift", "bitwise_left_shift", lambda a, b: a << b, np.left_shift, BIN,
     dtypes=INTS, inputs=(_BITS, _SHIFT), grad=False)
case("ew_bitwise_right_shift", "bitwise_right_shift", lambda a, b: a >> b, np.right_shift, BIN,
     dtypes=INTS, inputs=(Input("int", -100, 100), _SHIFT), grad=False)
case("ew_bitwise_shift_fn", ("bitwise_left_shift", "bitwise_right_shift"),
     lambda a, b: (em.bitwise_left_shift(a, b), em.bitwise_right_shift(a, b)),
     lambda a, b: (np.left_shift(a, b), np.right_shift(a, b)), BIN[:2], dtypes=INTS,
     inputs=(_BITS, _SHIFT), grad=False)
case("ew_bitwise_shift_scalar", ("bitwise_left_shift", "bitwise_right_shift"),
     lambda a: (a << 2, a >> 1, 1 << a, 64 >> a),
     lambda a: (a << 2, a >> 1, np.left_shift(1, a), np.right_shift(64, a)), UN, dtypes=INTS,
     inputs=(Input("int", 0, 6),), grad=False)

# -- where, mask_fill, mask_where -----------------------------------------------------------
case("ew_where", "where", lambda c, a, b: em.where(c, a, b), np.where, TRI, dtypes=ALL,
     inputs=(BOOL, Input(), Input()))
case("ew_where_scalar_else", "where", lambda c, a: em.where(c, a, 0.0),
     lambda c, a: np.where(c, a, 0.0), [((2, 3), (2, 3)), ((), ()), ((4, 1), (3,))],
     inputs=(BOOL, Input()))
case("ew_where_scalar_then", "where", lambda c, b: em.where(c, -2.5, b),
     lambda c, b: np.where(c, -2.5, b), [((2, 3), (2, 3)), ((), ()), ((0, 3), (3,))],
     inputs=(BOOL, Input()))
case("ew_where_int_scalar", "where", lambda c, a: em.where(c, a, 3),
     lambda c, a: np.where(c, a, 3), [((2, 3), (2, 3)), ((), ())], dtypes=INTEGRAL,
     inputs=(BOOL, Input()), grad=False)
case("ew_where_two_scalars", "where", lambda c: em.where(c, 1.5, -2),
     lambda c: np.where(c, 1.5, -2.0), [((2, 3),), ((),), ((0, 2),)], dtypes=("bool",),
     inputs=(BOOL,), tol=T_F32, grad=False)
case("ew_where_promote", ("where", "cast"), lambda c, a, b: em.where(c, a, b), np.where,
     TRI[:2], dtypes=FLOATS, inputs=(BOOL, Input(), Input("int", -3, 3, dtype="i32")))
case("ew_mask_fill", "where", lambda x, m: x.mask_fill(m, -1.5),
     lambda x, m: np.where(m, -1.5, x), [((2, 3), (2, 3)), ((), ()), ((0, 3), (0, 3)),
                                         ((4, 3), (3,))], inputs=(Input(), BOOL))
case("ew_mask_fill_ints", "where", lambda x, m: em.mask_fill(x, m, 3),
     lambda x, m: np.where(m, 3, x), [((2, 3), (2, 3)), ((), ())], dtypes=INTS,
     inputs=(Input(), BOOL), grad=False)
case("ew_mask_fill_bool", "where", lambda x, m: x.mask_fill(m, True),
     lambda x, m: m | x, [((2, 3), (2, 3)), ((), ())], dtypes=("bool",),
     inputs=(Input(), BOOL), grad=False)
case("ew_mask_fill_tensor_value", "where",
     lambda x, m, v: x.mask_fill(m, v), lambda x, m, v: np.where(m, v, x),
     [((2, 3), (2, 3), ()), ((4, 3), (4, 1), (3,))], dtypes=NUMERIC,
     inputs=(Input(), BOOL, Input()))
case("ew_mask_where", "where", lambda x, m, o: x.mask_where(m, o),
     lambda x, m, o: np.where(m, o, x), [((2, 3), (2, 3), (2, 3)), ((), (), ()),
                                         ((0, 3), (0, 3), (0, 3)), ((4, 3), (3,), (4, 1))],
     dtypes=ALL, inputs=(Input(), BOOL, Input()))

# -- cast between every pair of dtypes ------------------------------------------------------
for _t in ALL:
    _d = em.dtype.as_dtype(_t)
    if _d.kind == "float":
        _ref = (lambda a: np.asarray(a, dtype=np.float64))
    elif _d.kind == "int":
        _ref = (lambda a: np.trunc(a).astype(np.int64) if a.dtype.kind == "f"
                else a.astype(np.int64))
    else:
        _ref = (lambda a: a != 0)
    case(f"ew_cast_all_to_{_t}", "cast", (lambda d: lambda a: a.cast(d))(_d), _ref, UN,
         dtypes=ALL, inputs=(Input("uniform", -300, 300),), tol={_t: TOL[_t]},
         grad=_t in ("f64", "f32"))
    if _d.kind != "float":
        case(f"ew_cast_special_to_{_t}", "cast", (lambda d: lambda a: a.cast(d))(_d),
             (lambda k: lambda a: (a != 0) if k == "bool" else
              np.where(np.isfinite(a), np.trunc(np.nan_to_num(a)), 0).astype(np.int64))(
                 _d.kind), SP_SHAPES,
             dtypes=FLOATS, inputs=(Input(values(*SPECIAL[:-1], 2.9, -2.9, 1e4, -1e4)),),
             grad=False)

# References of special values produce nan/inf on purpose: no warnings from them.
for _c in CASES:
    _c.ref = np.errstate(all="ignore")(_c.ref)
