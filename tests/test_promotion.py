"""Type promotion of binary ops: the rules documented in ember/dtype.py, checked by property
tests against an explicit table written from those docs, against NumPy float64 values, and
against PyTorch's ``torch.result_type`` where the rules coincide."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

import ember as em
from ember import dtype as dt
from ember.errors import DTypeError
from tests.conformance.harness import TOL

NAMES = ("f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8", "u8", "bool")
D = {n: dt.from_name(n) for n in NAMES}

# The documented lattice, written out by hand (not computed by ember's rules): for each
# unordered pair, what ``a <op> b`` gives for two tensors.
_RANK = {"bool": 0, "u8": 1, "i8": 1, "i16": 2, "i32": 3, "i64": 4,
         "f16": 10, "bf16": 10, "f32": 11, "f64": 12}
_SPECIAL = {
    frozenset({"f16", "bf16"}): "f32",     # neither holds the other
    frozenset({"u8", "i8"}): "i16",        # the smallest signed int holding both
}


def documented(a: str, b: str) -> str:
    if a == b:
        return a
    special = _SPECIAL.get(frozenset({a, b}))
    if special:
        return special
    return a if _RANK[a] > _RANK[b] else b


def test_documented_table_examples():
    # the examples quoted in ember/dtype.py's docstring
    assert documented("i32", "f16") == "f16" and documented("bool", "u8") == "u8"
    assert documented("f16", "f32") == "f32" and documented("i8", "i64") == "i64"
    assert documented("u8", "i8") == "i16" and documented("u8", "i16") == "i16"
    assert documented("u8", "i64") == "i64" and documented("bool", "f16") == "f16"


@pytest.mark.parametrize("a,b", list(itertools.product(NAMES, NAMES)))
def test_promote_matches_documented_rules(a, b):
    assert dt.promote(D[a], D[b]) is D[documented(a, b)]


def test_promotion_is_commutative_and_associative():
    for a, b in itertools.product(dt.ALL, dt.ALL):
        assert dt.promote(a, b) is dt.promote(b, a)
    for a, b, c in itertools.product(dt.ALL, dt.ALL, dt.ALL):
        left = dt.promote(dt.promote(a, b), c)
        right = dt.promote(a, dt.promote(b, c))
        assert left is right, (a.short, b.short, c.short, left.short, right.short)


try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

TORCH = None if torch is None else {
    "f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
    "i64": torch.int64, "i32": torch.int32, "i16": torch.int16, "i8": torch.int8,
    "u8": torch.uint8, "bool": torch.bool}


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
def test_tensor_tensor_promotion_matches_torch_result_type():
    inv = {v: k for k, v in TORCH.items()}
    differ = []
    for a, b in itertools.product(NAMES, NAMES):
        want = inv[torch.result_type(torch.zeros(2, dtype=TORCH[a]),
                                     torch.zeros(2, dtype=TORCH[b]))]
        got = dt.promote(D[a], D[b]).short
        if want != got:
            differ.append((a, b, got, want))
    assert differ == [], f"(a, b, ember, torch): {differ}"


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
@pytest.mark.parametrize("scalar", [True, 2, -3, 2.5])
def test_tensor_scalar_promotion_matches_torch(scalar):
    inv = {v: k for k, v in TORCH.items()}
    for a in NAMES:
        want = inv[torch.result_type(torch.zeros(2, dtype=TORCH[a]), scalar)]
        assert dt.promote_scalar(D[a], scalar).short == want, (a, scalar)


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
def test_zero_dim_tensors_differ_from_torch_as_documented():
    # ember: a 0-d tensor promotes like any tensor. PyTorch: it does not widen a
    # dimensioned tensor of the same kind. (Documented in ember/dtype.py.)
    a = em.tensor(np.ones(2, np.float32))
    b = em.tensor(np.float64(1.0))
    assert (a + b).dtype is em.f64
    assert torch.result_type(torch.ones(2), torch.tensor(1.0, dtype=torch.float64)) \
        is torch.float32


# -- weak scalars -----------------------------------------------------------------------------
@pytest.mark.parametrize("name,scalar,want", [
    ("i32", 2, "i32"), ("i32", 2.5, "f32"), ("bool", 1, "i64"), ("f16", 1.0, "f16"),
    ("bf16", 3, "bf16"), ("u8", 7, "u8"), ("i8", -3, "i8"), ("f64", 2, "f64"),
    ("f16", 2, "f16"), ("i64", 0.5, "f32"), ("bool", 0.5, "f32"), ("u8", 1.5, "f32"),
    ("i16", True, "i16"), ("f32", np.float64(2.0), "f32"), ("i8", np.int64(3), "i8"),
])
def test_scalars_are_weak(name, scalar, want):
    t = em.tensor(np.ones(3), dtype=name)
    out = t + scalar
    assert out.dtype is D[want], (name, scalar, out.dtype)
    assert (scalar + t).dtype is D[want]
    assert (t * scalar).dtype is D[want]
    ref = np.ones(3) + float(scalar)
    np.testing.assert_allclose(out.numpy().astype(np.float64), ref, rtol=1e-2)


def test_scalars_never_widen_within_a_kind():
    t = em.tensor([1.0, 2.0], dtype="f16")
    assert (t * 1e-3).dtype is em.f16
    t = em.tensor([1, 2], dtype="i8")
    assert (t + 100).dtype is em.i8


def test_bool_tensors_do_not_add():
    # PyTorch's bool + bool is a logical or; ember's add takes float or int tensors only
    b = em.tensor([True, False])
    with pytest.raises(DTypeError, match="add: expects a float or int tensor.*bool"):
        b + b
    assert (b + 1).dtype is em.i64


def test_division_promotes_ints_to_the_default_float():
    a = em.tensor([1, 2], dtype="i32")
    assert (a / a).dtype is em.f32 and (a / 2).dtype is em.f32
    h = em.tensor([1.0], dtype="f16")
    assert (a / h).dtype is em.f16 and (h / 2).dtype is em.f16
    np.testing.assert_array_equal((a / h).numpy(), [1.0, 2.0])


# -- property tests on values -----------------------------------------------------------------
def _values(rng, name, shape):
    d = D[name]
    if d.kind == "float":
        return rng.normal(scale=3.0, size=shape).astype(d.np)
    if d.kind == "bool":
        return rng.random(shape) < 0.5
    if name == "u8":
        return rng.integers(0, 40, size=shape).astype(np.uint8)
    return rng.integers(-20, 21, size=shape).astype(d.np)


def _tol(name):
    return TOL[name]


pairs = st.tuples(st.sampled_from(NAMES), st.sampled_from(NAMES)).filter(
    lambda p: p != ("bool", "bool"))


@settings(max_examples=150, deadline=None)
@given(pair=pairs,
       shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=4),
       seed=st.integers(0, 2 ** 32 - 1))
def test_add_promotes_broadcasts_and_matches_numpy(pair, shapes, seed):
    a_name, b_name = pair
    rng = np.random.default_rng(seed)
    av = _values(rng, a_name, shapes.input_shapes[0])
    bv = _values(rng, b_name, shapes.input_shapes[1])
    a = em.tensor(av, dtype=a_name)
    b = em.tensor(bv, dtype=b_name)
    want = documented(a_name, b_name)
    for out in (a + b, b + a):
        assert out.dtype is D[want]
        assert out.shape == shapes.result_shape
        got = out.numpy()
        assert got.shape == shapes.result_shape
        ref = av.astype(np.float64) + bv.astype(np.float64)
        atol, rtol = _tol(want)
        np.testing.assert_allclose(got.astype(np.float64), ref, atol=atol, rtol=rtol)
    np.testing.assert_array_equal((a + b).numpy(), (b + a).numpy())


@settings(max_examples=100, deadline=None)
@given(pair=pairs,
       shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=4),
       seed=st.integers(0, 2 ** 32 - 1))
def test_mul_and_sub_are_commutative_in_dtype(pair, shapes, seed):
    a_name, b_name = pair
    rng = np.random.default_rng(seed)
    a = em.tensor(_values(rng, a_name, shapes.input_shapes[0]), dtype=a_name)
    b = em.tensor(_values(rng, b_name, shapes.input_shapes[1]), dtype=b_name)
    assert (a * b).dtype is (b * a).dtype is D[documented(a_name, b_name)]
    assert (a - b).dtype is (b - a).dtype is D[documented(a_name, b_name)]
    np.testing.assert_array_equal((a * b).numpy(), (b * a).numpy())


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(NAMES),
       scalar=st.one_of(st.booleans(), st.integers(-5, 5),
                        st.floats(-4, 4, allow_nan=False).filter(lambda f: f != int(f))),
       shape=st.lists(st.integers(0, 3), max_size=3).map(tuple),
       seed=st.integers(0, 2 ** 32 - 1))
def test_tensor_scalar_promotion_property(name, scalar, shape, seed):
    d = D[name]
    if isinstance(scalar, bool):
        want = d
    elif isinstance(scalar, int):
        want = em.i64 if d.kind == "bool" else d
    else:
        want = d if d.kind == "float" else em.f32
    if name == "u8" and not isinstance(scalar, bool) and isinstance(scalar, int) and scalar < 0:
        scalar = -scalar
    assert dt.promote_scalar(d, scalar) is want
    if want is em.bool_:
        return  # bool + bool: add does not take bool tensors (see test_bool_tensors_do_not_add)
    av = _values(np.random.default_rng(seed), name, shape)
    t = em.tensor(av, dtype=name)
    out = t + scalar
    assert out.dtype is want and out.shape == shape
    # a weak scalar is converted to the result dtype before the op
    ref = av.astype(np.float64) + float(want.np.type(scalar))
    atol, rtol = _tol(want.short)
    np.testing.assert_allclose(out.numpy().astype(np.float64), ref, atol=atol, rtol=rtol)
    assert (scalar + t).dtype is want
