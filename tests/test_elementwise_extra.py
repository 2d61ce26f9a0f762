"""Elementwise behaviour the conformance cases do not pin down: kind errors naming the op,
scalars that do not fit, erf's float64 accuracy, signed zeros, gradients at ties and bounds,
the integer power rule, where/mask/clamp dtype rules and operator spellings."""
from __future__ import annotations

import math

import numpy as np
import pytest

import ember as em
from ember.errors import DTypeError, ShapeError
from tests.conformance.harness import ALL

ND = em.device("cpu")
AD = ND.autodiff()

FLOAT_ONLY = ["exp", "log", "expm1", "log1p", "sqrt", "rsqrt", "recip", "sin", "cos", "tan",
              "sinh", "cosh", "tanh", "asin", "acos", "atan", "erf"]


@pytest.mark.parametrize("name", FLOAT_ONLY)
@pytest.mark.parametrize("dtype", ["i64", "i8", "u8", "bool"])
def test_float_only_ops_refuse_ints_naming_the_op(name, dtype):
    x = em.tensor([1, 0, 1], dtype=dtype)
    for call in (lambda: getattr(em, name)(x), lambda: getattr(x, name)()):
        with pytest.raises(DTypeError) as info:
            call()
        m = str(info.value)
        assert m.startswith(f"{name}:") and dtype in m and "float" in m, m


@pytest.mark.parametrize("fn,name", [
    (lambda x: x & 1.5, "bitwise_and"), (lambda x: ~x, "bitwise_not"),
    (lambda x: x << 1, "bitwise_left_shift"), (lambda x: x >> x, "bitwise_right_shift"),
    (lambda x: x | x, "bitwise_or"), (lambda x: x ^ x, "bitwise_xor")])
def test_bitwise_ops_refuse_floats(fn, name):
    with pytest.raises(DTypeError, match=f"^{name}: .*f32"):
        fn(em.tensor([1.0, 2.0]))


def test_shifts_refuse_bool_pairs_and_kinds_are_checked():
    b = em.tensor([True, False])
    with pytest.raises(DTypeError, match="bitwise_left_shift: .*int.*bool"):
        b << b
    with pytest.raises(DTypeError, match="abs: .*bool"):
        abs(b)
    with pytest.raises(DTypeError, match="remainder: .*bool"):
        b % b
    with pytest.raises(DTypeError, match="clamp: .*bool"):
        b.clamp(0, 1)
    assert em.atan2(b, b).dtype is em.f32   # promoted to float, like division


@pytest.mark.parametrize("fn,op", [
    (lambda x: x + 300, "add"), (lambda x: x * 256, "mul"), (lambda x: x - (-1), "sub"),
    (lambda x: x < 256, "lower"), (lambda x: x == -1, "equal"), (lambda x: 300 % x, "remainder"),
    (lambda x: x & 512, "bitwise_and"), (lambda x: em.maximum(x, 1000), "maximum"),
    (lambda x: em.where(x > 0, x, 300), "where"), (lambda x: x.mask_fill(x > 0, -1), "mask_fill"),
    (lambda x: x ** 256, "pow")])
def test_int_scalars_that_do_not_fit_raise_dtype_errors(fn, op):
    x = em.tensor([1, 2, 3], dtype="u8")
    with pytest.raises(DTypeError) as info:
        fn(x)
    m = str(info.value)
    assert m.startswith(f"{op}:") and "u8" in m and "0..255" in m, m


def test_int_scalars_at_the_edges_fit():
    assert (em.tensor([1], dtype="i8") + 126).tolist() == [127]
    assert (em.tensor([1], dtype="i8") * -128).tolist() == [-128]
    assert (em.tensor([0], dtype="u8") + 255).tolist() == [255]
    assert (em.tensor([True]) + (2 ** 63 - 1)).dtype is em.i64
    with pytest.raises(DTypeError, match="i64"):
        em.tensor([True]) + 2 ** 63


# -- erf ------------------------------------------------------------------------------------
def test_erf_float64_accuracy_against_math_erf():
    x = np.concatenate([np.linspace(-7, 7, 40001), np.geomspace(1e-300, 1e-2, 300),
                        -np.geomspace(1e-20, 6.5, 300), np.arange(-24, 25) / 4,
                        np.arange(-24, 24) / 4 + 1 / 8, [5.999999, 6.0, 6.000001, 1e300]])
    got = em.tensor(x, dtype="f64").erf().numpy()
    ref = np.vectorize(math.erf, otypes=[np.float64])(x)
    rel = np.abs(got - ref) / np.maximum(np.abs(ref), 1e-300)
    assert rel.max() < 1e-15, (rel.max(), x[rel.argmax()])
    assert np.all(np.abs(got) <= 1.0)


def test_erf_special_values_and_low_precision():
    x = em.tensor([np.nan, np.inf, -np.inf, 0.0, -0.0], dtype="f64").erf().numpy()
    assert np.isnan(x[0]) and x[1] == 1.0 and x[2] == -1.0
    assert x[3] == 0.0 and not np.signbit(x[3]) and np.signbit(x[4])
    for d in ("f32", "f16", "bf16"):
        t = em.tensor([0.5, -1.25, 3.0], dtype=d).erf()
        assert t.dtype.short == d
        ref = [math.erf(v) for v in em.tensor([0.5, -1.25, 3.0], dtype=d).numpy().astype(float)]
        np.testing.assert_allclose(t.numpy().astype(np.float64), ref, rtol=1e-2)


# -- signed zeros and rounding --------------------------------------------------------------
def test_signed_zeros():
    z = em.tensor([-0.0, 0.0], dtype="f32")
    assert np.signbit(z.sqrt().numpy()).tolist() == [True, False]
    assert np.signbit(em.tensor([-0.4, 0.4]).round().numpy()).tolist() == [True, False]
    assert np.signbit(em.tensor([-0.5, -0.3]).trunc().numpy()).tolist() == [True, True]
    assert np.signbit(em.tensor([-0.5]).ceil().numpy()).tolist() == [True]
    assert z.recip().numpy().tolist() == [-np.inf, np.inf]


def test_round_is_half_to_even_and_ints_pass_through():
    x = em.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5], dtype="f64")
    assert x.round().tolist() == [-2.0, -2.0, -0.0, 0.0, 2.0, 2.0, 4.0]
    for d in ("i64", "i8", "u8"):
        t = em.tensor([1, 2, 7], dtype=d)
        for name in ("round", "floor", "ceil", "trunc"):
            out = getattr(t, name)()
            assert out.dtype is t.dtype and out.tolist() == [1, 2, 7]


def test_is_nan_family_on_ints_and_bools():
    for d in ("i32", "u8", "bool"):
        t = em.tensor([1, 0], dtype=d)
        assert t.is_nan().tolist() == [False, False] and t.is_inf().tolist() == [False, False]
        assert t.is_finite().tolist() == [True, True] and t.is_finite().dtype is em.bool_


# -- division-like ops ----------------------------------------------------------------------
def test_remainder_and_floor_div_follow_python():
    a = [7, -7, 7, -7, 0]
    b = [3, 3, -3, -3, 5]
    for d in ("i64", "i32", "i8", "f64", "f32"):
        x, y = em.tensor(a, dtype=d), em.tensor(b, dtype=d)
        assert (x % y).tolist() == [p % q for p, q in zip(a, b)]
        assert (x // y).tolist() == [p // q for p, q in zip(a, b)]
    assert (em.tensor([5.5, -5.5]) % 2).tolist() == [1.5, 0.5]


def test_int_division_by_zero_gives_zero():
    x = em.tensor([5, -5], dtype="i32")
    assert (x // 0).tolist() == [0, 0] and (x % 0).tolist() == [0, 0]
    f = em.tensor([1.0, -1.0, 0.0])
    out = (f // 0.0).numpy()
    assert out[0] == np.inf and out[1] == -np.inf and np.isnan(out[2])


def test_integer_power_rules():
    x = em.tensor([2, -2, 1, -1, 0, 3], dtype="i32")
    assert (x ** 3).tolist() == [8, -8, 1, -1, 0, 27] and (x ** 3).dtype is em.i32
    assert (x ** 0).tolist() == [1] * 6
    e = em.tensor([-1, -2, -3, -3, -1, -2], dtype="i32")
    assert (x ** e).tolist() == [0, 0, 1, -1, 0, 0]   # PyTorch's rule for int ** negative
    with pytest.raises(DTypeError, match="pow: .*negative int power -1.*float"):
        x ** -1
    assert (x ** -1.0).dtype is em.f32
    assert (x ** 0.5).dtype is em.f32
    assert (2 ** em.tensor([0, 3], dtype="u8")).tolist() == [1, 8]
    assert (2.0 ** em.tensor([1, 3], dtype="u8")).dtype is em.f32


# -- gradients at ties and bounds -----------------------------------------------------------
def test_maximum_minimum_split_ties_half_and_half():
    a = em.tensor([1.0, 2.0, 3.0], device=AD).require_grad()
    b = em.tensor([1.0, 5.0, 0.0], device=AD).require_grad()
    for fn, ga, gb in ((em.maximum, [0.5, 0.0, 1.0], [0.5, 1.0, 0.0]),
                       (em.minimum, [0.5, 1.0, 0.0], [0.5, 0.0, 1.0])):
        g = fn(a, b).sum().backward()
        assert a.grad(g).tolist() == ga and b.grad(g).tolist() == gb
    g = em.maximum(a, a).sum().backward()       # the same tensor twice: halves add up to 1
    assert a.grad(g).tolist() == [1.0, 1.0, 1.0]
    g = em.maximum(a, 2.0).sum().backward()
    assert a.grad(g).tolist() == [0.0, 0.5, 1.0]


def test_maximum_propagates_nan():
    out = em.maximum(em.tensor([np.nan, 1.0]), em.tensor([0.0, np.nan])).numpy()
    assert np.isnan(out).all()


def test_clamp_gradient_passes_within_bounds_inclusive():
    x = em.tensor([-2.0, -1.0, 0.0, 1.0, 2.0], device=AD).require_grad()
    g = x.clamp(-1.0, 1.0).sum().backward()
    assert x.grad(g).tolist() == [0.0, 1.0, 1.0, 1.0, 0.0]
    g = x.clamp(min=0.0).sum().backward()
    assert x.grad(g).tolist() == [0.0, 0.0, 1.0, 1.0, 1.0]


def test_piecewise_constant_ops_have_zero_gradients():
    x = em.tensor([-1.3, 0.2, 2.7], device=AD).require_grad()
    for name in ("round", "floor", "ceil", "trunc", "sign"):
        g = getattr(x, name)().sum().backward()
        assert x.grad(g).tolist() == [0.0, 0.0, 0.0], name
    g = (x // 0.5).sum().backward()
    assert x.grad(g).tolist() == [0.0, 0.0, 0.0]


def test_pow_gradients_at_zero_base():
    x = em.tensor([0.0, 2.0], device=AD).require_grad()
    y = em.tensor([2.0, 3.0], device=AD).require_grad()
    g = (x ** y).sum().backward()
    assert x.grad(g).tolist() == [0.0, 12.0]
    np.testing.assert_allclose(y.grad(g).numpy(), [0.0, 8 * math.log(2.0)], rtol=1e-6)
    g = (x ** 0).sum().backward()
    assert x.grad(g).tolist() == [0.0, 0.0]


# -- where, masks, clamp --------------------------------------------------------------------
def test_where_dtype_rules():
    c = em.tensor([True, False])
    f16 = em.tensor([1.0, 2.0], dtype="f16")
    i8 = em.tensor([3, 4], dtype="i8")
    assert em.where(c, f16, i8).dtype is em.f16
    assert em.where(c, i8, 2.5).dtype is em.f32
    assert em.where(c, i8, 7).dtype is em.i8
    assert em.where(c, 1, 0).dtype is em.i64 and em.where(c, 1, 0).tolist() == [1, 0]
    assert em.where(c, True, False).dtype is em.bool_
    assert em.where(c, 1.0, 0).dtype is em.f32
    out = em.where(em.tensor([[True], [False]]), em.tensor([1.0, 2.0, 3.0]), 0.0)
    assert out.shape == (2, 3) and out.tolist() == [[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]


def test_where_refuses_non_bool_conditions_and_bad_shapes():
    x = em.tensor([1.0, 2.0])
    with pytest.raises(DTypeError, match="where: the condition must be a bool tensor, got f32"):
        em.where(x, x, x)
    with pytest.raises(DTypeError, match="where"):
        em.where(True, x, x)
    with pytest.raises(DTypeError, match="mask_fill: the mask must be a bool tensor, got i64"):
        x.mask_fill(em.tensor([1, 0]), 0.0)
    with pytest.raises(DTypeError, match="mask_where"):
        x.mask_where(x, x)
    with pytest.raises(ShapeError, match="where"):
        em.where(em.tensor([True, False, True]), x, x)


def test_mask_fill_keeps_the_dtype():
    x = em.tensor([1, 2, 3], dtype="i16")
    m = em.tensor([True, False, True])
    out = x.mask_fill(m, 9)
    assert out.dtype is em.i16 and out.tolist() == [9, 2, 9]
    assert x.mask_fill(m, 4.0).tolist() == [4, 2, 4]
    with pytest.raises(DTypeError, match="mask_fill: the value 2.5 is not an integer.*i16"):
        x.mask_fill(m, 2.5)
    f = em.tensor([1.0, 2.0, 3.0], dtype="bf16")
    out = f.mask_fill(m, em.tensor(-1.0, dtype="f64"))
    assert out.dtype is em.bf16 and out.tolist() == [-1.0, 2.0, -1.0]
    assert f.mask_fill(m, float("-inf")).numpy()[0] == -np.inf


def test_clamp_dtype_rules():
    u = em.tensor([0, 100, 255], dtype="u8")
    assert u.clamp(-5, 300).tolist() == [0, 100, 255] and u.clamp(-5, 300).dtype is em.u8
    assert u.clamp(10, 200).tolist() == [10, 100, 200]
    assert u.clamp(0.5).dtype is em.f32
    assert em.tensor([1.0, 5.0], dtype="f16").clamp(2, 3).dtype is em.f16
    x = em.tensor([-3.0, 0.0, 3.0])
    assert x.clamp().tolist() == [-3.0, 0.0, 3.0]
    assert x.clamp(em.tensor([-1.0, 1.0, 1.0]), 2.0).tolist() == [-1.0, 1.0, 2.0]
    with pytest.raises(DTypeError, match="clamp"):
        x.clamp("a")


# -- cast -----------------------------------------------------------------------------------
@pytest.mark.parametrize("src", ALL)
@pytest.mark.parametrize("dst", ALL)
def test_cast_every_pair(src, dst):
    vals = [0, 1, 3, 100] if src != "bool" else [0, 1, 1, 0]
    x = em.tensor(np.array(vals).astype(em.dtype.as_dtype(src).np))
    y = x.cast(dst)
    assert y.dtype.short == dst and y.shape == (4,)
    want = [bool(v) for v in vals] if dst == "bool" else vals
    assert y.tolist() == want


def test_cast_float_to_int_rules():
    x = em.tensor([2.7, -2.7, np.nan, np.inf, -np.inf, 300.0, -1.0], dtype="f32")
    assert x.cast("i32").tolist() == [2, -2, 0, 0, 0, 300, -1]
    assert x.cast("u8").tolist() == [2, 254, 0, 0, 0, 44, 255]   # wraps modulo 256
    assert x.cast("bool").tolist() == [True, True, True, True, True, True, True]
    b = em.tensor([2.7, np.nan, -0.0], dtype="bf16")
    assert b.cast("i8").tolist() == [2, 0, 0] and b.cast("bool").tolist() == [True, True, False]


# -- operators ------------------------------------------------------------------------------
def test_operator_spellings_match_functions():
    a = em.tensor([[5, -3, 0], [7, 2, -8]], dtype="i32")
    b = em.tensor([[2, 2, 3], [-3, 1, 3]], dtype="i32")
    eq = lambda x, y: x.dtype is y.dtype and x.tolist() == y.tolist()  # noqa: E731
    assert eq(a // b, em.floor_div(a, b)) and eq(a % b, em.remainder(a, b))
    assert eq(abs(a), em.abs(a)) and eq(~a, em.bitwise_not(a)) and eq(-a, em.neg(a))
    assert eq(a & b, em.bitwise_and(a, b)) and eq(a | b, em.bitwise_or(a, b))
    assert eq(a ^ b, em.bitwise_xor(a, b))
    s = em.tensor([1, 2], dtype="i32")
    assert eq(s << s, em.bitwise_left_shift(s, s)) and eq(s >> 1, em.bitwise_right_shift(s, 1))
    assert eq(a != b, em.not_equal(a, b)) and eq(a < b, em.lower(a, b))
    assert eq(a <= b, em.lower_equal(a, b)) and eq(a > b, em.greater(a, b))
    assert eq(a >= b, em.greater_equal(a, b))
    # reversed forms
    assert eq(1 < a, em.greater(a, 1)) and eq(2 >= a, em.lower_equal(a, 2))
    assert eq(10 // b, em.floor_div(10, b)) and eq(10 % b, em.remainder(10, b))
    assert eq(3 & a, em.bitwise_and(3, a)) and eq(3 | a, em.bitwise_or(3, a))
    assert eq(3 ^ a, em.bitwise_xor(3, a)) and eq(1 << s, em.bitwise_left_shift(1, s))
    assert eq(8 >> s, em.bitwise_right_shift(8, s)) and eq(2 ** s, em.pow(2, s))
    f = em.tensor([1.5, 2.0])
    assert eq(f ** 2, em.pow(f, 2)) and eq(f ** f, em.pow(f, f))
    bools = em.tensor([True, False])
    assert (~bools).tolist() == [False, True] and (bools & True).dtype is em.bool_


def test_comparisons_and_logic_return_bool():
    x = em.tensor([0.0, 1.5, np.nan])
    for out in (x > 1, x != 0, em.logical_and(x, x), em.logical_not(x), x.is_nan()):
        assert out.dtype is em.bool_
    assert (x != x).tolist() == [False, False, True]
    assert em.logical_or(x, 0).tolist() == [False, True, True]
    assert em.logical_xor(em.tensor([1, 0], dtype="u8"), True).tolist() == [False, True]


def test_autodiff_stack_matches_plain_stack():
    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 2.0, size=(3, 4))
    b = rng.normal(size=(3, 4))
    for dev in (ND, AD):
        x, y = em.tensor(a, device=dev), em.tensor(b, device=dev)
        out = (x ** y + em.atan2(y, x) + (y % x) - y.erf() * x.rsqrt()).numpy()
        ref = (a ** b + np.arctan2(b, a) + np.mod(b, a)
               - np.vectorize(math.erf)(b) / np.sqrt(a))
        np.testing.assert_allclose(out.astype(np.float64), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["f16", "f32", "f64"])
def test_division_by_a_scalar_has_numpys_bits(dtype):
    """``x / c`` on the default (fused) device against NumPy's division in the dtype, powers
    of two (which Fusion plans as a multiply by the reciprocal, `planner.scalar_tag`) and
    others, subnormals and specials included; and its gradient."""
    npd = {"f16": np.float16, "f32": np.float32, "f64": np.float64}[dtype]
    rng = np.random.default_rng(3)
    h = np.concatenate([rng.standard_normal(300) * 10.0 ** rng.integers(-4, 4, 300),
                        [0.0, -0.0, np.inf, -np.inf, np.nan]]).astype(npd)
    info = np.finfo(npd)
    h = np.concatenate([h, np.array([info.tiny, info.smallest_subnormal * 3, info.max,
                                     -info.max], npd)])
    with np.errstate(all="ignore"):
        for c in (2, 0.5, -4.0, 2.0 ** 14, 2.0 ** -14, 3.0, 0.1, 2.0 ** 15, -(2.0 ** -15)):
            got = (em.tensor(h, dtype=dtype) / c).numpy()
            want = h / npd(c)
            same = (got.view(f"u{h.itemsize}") == want.view(f"u{h.itemsize}")) | (
                np.isnan(got) & np.isnan(want))
            assert same.all(), (c, h[~same][:4], got[~same][:4], want[~same][:4])
    x = em.tensor(h[:10], dtype=dtype, device=AD).require_grad()
    g = em.div(x, 4).sum().backward()
    assert (x.grad(g).numpy() == npd(0.25)).all()


def test_scalars_beyond_the_float_range_are_dtype_errors():
    x = em.tensor([1.0, 2.0])
    for call in (lambda: x / 2 ** 3000, lambda: x + 2 ** 1100, lambda: 2 ** 1024 * x):
        with pytest.raises(DTypeError, match="bits is beyond the float range"):
            call()
