"""matmul / dot / outer / linear: result dtypes, errors naming the op and the shapes, and the
accuracy of half-precision products (accumulated in f32, rounded once)."""
import numpy as np
import pytest

import ember as em
from ember.errors import DTypeError, ShapeError


def t(shape, dtype=em.f32, seed=0):
    return em.tensor(np.random.default_rng(seed).normal(size=shape), dtype=dtype)


def test_matmul_inner_mismatch_names_shapes():
    with pytest.raises(ShapeError, match=r"matmul.*\(2, 3\).*\(4, 5\).*3 with 4"):
        t((2, 3)) @ t((4, 5))
    with pytest.raises(ShapeError, match=r"matmul.*\(3,\).*\(4, 5\)"):
        t((3,)) @ t((4, 5))
    with pytest.raises(ShapeError, match=r"matmul.*\(2, 3\).*\(4,\)"):
        em.matmul(t((2, 3)), t((4,)))
    with pytest.raises(ShapeError, match=r"matmul.*\(3,\).*\(4,\)"):
        t((3,)) @ t((4,))


def test_matmul_transpose_flags_errors_and_promotion():
    with pytest.raises(ShapeError, match=r"matmul: inner dims do not match: \(3, 2\)\^T @ "
                                         r"\(2, 3\) contracts 3 with 2"):
        em.matmul(t((3, 2)), t((2, 3)), transpose_a=True)
    with pytest.raises(ShapeError, match=r"matmul: a transposed operand needs at least 2 dims, "
                                         r"got \(3,\) \(transpose_a\)"):
        em.matmul(t((3,)), t((3, 2)), transpose_a=True)
    with pytest.raises(DTypeError, match=r"matmul: tb .* must be a bool, got int 1"):
        em.matmul(t((2, 3)), t((4, 3)), transpose_b=1)
    # mixed dtypes promote as @ does; a 1-d operand with the other transposed
    out = em.matmul(t((3, 2), em.f16), t((3, 4), em.f32), transpose_a=True)
    assert out.dtype == em.f32 and out.shape == (2, 4)
    v = em.matmul(t((3,)), t((2, 3), seed=1), transpose_b=True)
    np.testing.assert_allclose(v.numpy(), t((3,)).numpy() @ t((2, 3), seed=1).numpy().T,
                               rtol=1e-6)


def test_matmul_batch_mismatch():
    with pytest.raises(ShapeError, match="matmul.*broadcast"):
        t((2, 3, 4)) @ t((3, 4, 5))


def test_matmul_rank_and_kind_errors():
    with pytest.raises(ShapeError, match="matmul.*at least 1 dim"):
        t(()) @ t((3,))
    with pytest.raises(DTypeError, match="matmul.*bool"):
        em.tensor([[True]]) @ em.tensor([[False]])
    with pytest.raises(DTypeError, match="matmul"):
        t((2, 2)) @ 2.0
    with pytest.raises(DTypeError, match="matmul"):
        [[1.0]] @ t((1, 1))


def test_matmul_promotes_and_keeps_dtypes():
    assert (t((2, 3), em.f16) @ t((3, 2), em.f16)).dtype is em.f16
    assert (t((2, 3), em.bf16) @ t((3, 2), em.bf16)).dtype is em.bf16
    assert (t((2, 3), em.f16) @ t((3, 2), em.f32)).dtype is em.f32
    a = em.tensor([[1, 2]], dtype=em.i32)
    assert (a @ em.tensor([[3], [4]], dtype=em.i32)).dtype is em.i32
    assert (a @ em.tensor([[3], [4]], dtype=em.i64)).numpy().tolist() == [[11]]
    assert (a @ t((2, 1), em.f64)).dtype is em.f64


def test_matmul_zero_inner_dim_gives_zeros():
    for d in (em.f32, em.f16, em.i64):
        out = em.zeros(3, 0, dtype=d) @ em.zeros(0, 4, dtype=d)
        assert out.shape == (3, 4) and out.dtype is d
        assert not out.numpy().any()


@pytest.mark.parametrize("dtype,ulp", [(em.f16, 2.0 ** -11), (em.bf16, 2.0 ** -8)],
                         ids=["f16", "bf16"])
def test_half_matmul_accumulates_in_f32(dtype, ulp):
    # k = 2048 terms: rounding each partial sum to the half dtype would be off by many ulps;
    # accumulating in f32 and rounding once is within about one ulp of the result.
    rng = np.random.default_rng(1)
    a = rng.uniform(0.5, 1.0, size=(4, 2048))
    b = rng.uniform(0.5, 1.0, size=(2048, 3))
    ta, tb = em.tensor(a, dtype=dtype), em.tensor(b, dtype=dtype)
    exact = ta.numpy().astype(np.float64) @ tb.numpy().astype(np.float64)
    got = (ta @ tb).numpy().astype(np.float64)
    assert np.all(np.abs(got - exact) <= 1.01 * ulp * np.abs(exact))


def test_matmul_gradient_through_broadcast_batch():
    ad = em.device("cpu").autodiff()
    rng = np.random.default_rng(2)
    a_np, b_np = rng.normal(size=(2, 1, 3, 4)), rng.normal(size=(5, 4, 2))
    a = em.tensor(a_np, device=ad).require_grad()
    b = em.tensor(b_np, device=ad).require_grad()
    grads = (a @ b).sum().backward()
    ga, gb = a.grad(grads).numpy(), b.grad(grads).numpy()
    ones = np.ones((2, 5, 3, 2))
    np.testing.assert_allclose(ga, (ones @ np.swapaxes(b_np, -1, -2)).sum(1, keepdims=True))
    np.testing.assert_allclose(gb, (np.swapaxes(a_np, -1, -2) @ ones).sum(0))


def test_dot_outer_linear_errors():
    with pytest.raises(ShapeError, match="dot"):
        em.dot(t((2, 2)), t((2,)))
    with pytest.raises(ShapeError, match="dot.*lengths"):
        em.dot(t((2,)), t((3,)))
    with pytest.raises(ShapeError, match="outer"):
        em.outer(t((2, 1)), t((3,)))
    with pytest.raises(ShapeError, match="linear.*weight"):
        em.linear(t((2, 3)), t((3,)))
    with pytest.raises(ShapeError, match=r"linear.*\(2, 3\).*\(4, 5\).*in_features = 4"):
        em.linear(t((2, 3)), t((4, 5)))
    with pytest.raises(ShapeError, match="linear: bias"):
        em.linear(t((2, 3)), t((3, 4)), t((3,)))


def test_linear_matches_burn_convention():
    x, w, b = t((2, 3)), t((3, 4), seed=1), t((4,), seed=2)
    np.testing.assert_allclose(em.linear(x, w, b).numpy(),
                               x.numpy() @ w.numpy() + b.numpy(), rtol=1e-6)
    assert em.linear(t((3,)), w).shape == (4,)


def test_methods():
    a, b = t((3,)), t((3,), seed=1)
    assert a.dot(b).shape == () and a.outer(b).shape == (3, 3)
    assert t((2, 3)).matmul(t((3, 1))).shape == (2, 1)
