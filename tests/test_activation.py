"""Activations: argument errors, kinds, and stability at extreme inputs (finite values and
finite gradients where a naive formula overflows)."""
import math

import numpy as np
import pytest

import ember as em
from ember.errors import DTypeError, IndexError_, ShapeError

EXTREME = np.array([-1e4, -800.0, -89.0, -30.0, 0.0, 30.0, 89.0, 800.0, 1e4])


@pytest.mark.parametrize("name", ["sigmoid", "silu", "log_sigmoid", "softplus", "mish", "elu",
                                  "selu", "celu", "gelu", "leaky_relu", "hard_sigmoid"])
@pytest.mark.parametrize("dtype", [em.f64, em.f32, em.f16, em.bf16], ids=lambda d: d.short)
def test_extreme_inputs_finite_values_and_grads(name, dtype):
    x = EXTREME
    if dtype in (em.f16, em.bf16):
        x = np.clip(x, -6e4, 6e4)
    ad = em.device("cpu").autodiff()
    xt = em.tensor(x, dtype=dtype, device=ad).require_grad()
    out = getattr(em, name)(xt)
    assert np.isfinite(out.numpy().astype(np.float64)).all(), out
    g = xt.grad(out.sum().backward())
    assert np.isfinite(g.numpy().astype(np.float64)).all(), g


def test_sigmoid_limits():
    x = em.tensor([-1e4, -50.0, 0.0, 50.0, 1e4], dtype=em.f64)
    np.testing.assert_array_equal(em.sigmoid(x).numpy()[[0, 2, 4]], [0.0, 0.5, 1.0])
    assert em.sigmoid(x).numpy()[1] == pytest.approx(math.exp(-50), rel=1e-12)
    ls = em.log_sigmoid(x).numpy()
    assert ls[0] == -1e4 and ls[1] == pytest.approx(-50, rel=1e-12) and ls[4] == 0.0


def test_softmax_sums_to_one_and_grad_zero_sum():
    ad = em.device("cpu").autodiff()
    x = em.tensor(np.random.default_rng(0).normal(size=(3, 5)) * 300, dtype=em.f64,
                  device=ad).require_grad()
    p = em.softmax(x, 1)
    np.testing.assert_allclose(p.numpy().sum(1), 1.0)
    g = x.grad((p * em.tensor(np.arange(15.0).reshape(3, 5), device=ad)).sum().backward())
    np.testing.assert_allclose(g.numpy().sum(1), 0.0, atol=1e-9)


def test_softmax_half_dtypes_kept():
    for d in (em.f16, em.bf16):
        x = em.tensor([[1.0, 2.0, 3.0]], dtype=d)
        assert em.softmax(x, -1).dtype is d and em.log_softmax(x, -1).dtype is d


def test_relu_int_and_errors():
    x = em.tensor([-3, 0, 4], dtype=em.i8)
    r = em.relu(x)
    assert r.dtype is em.i8 and r.numpy().tolist() == [0, 0, 4]
    assert np.isnan(em.relu(em.tensor([float("nan")])).numpy()[0])
    with pytest.raises(DTypeError, match="relu"):
        em.relu(em.tensor([True]))
    for fn in (em.sigmoid, em.gelu, em.silu, em.softplus, lambda v: em.softmax(v, 0)):
        with pytest.raises(DTypeError):
            fn(em.tensor([1, 2]))


def test_argument_errors():
    x = em.tensor([[1.0, 2.0, 3.0]])
    with pytest.raises(ShapeError, match="gelu.*approximate"):
        em.gelu(x, approximate="fast")
    with pytest.raises(ShapeError, match="glu.*odd"):
        em.glu(x)
    with pytest.raises(ShapeError, match="glu"):
        em.glu(em.tensor(1.0))
    with pytest.raises(IndexError_, match="softmax"):
        em.softmax(x, 2)
    with pytest.raises(ShapeError, match="prelu"):
        em.prelu(x.reshape(3, 1), em.tensor([0.1, 0.2]))
    with pytest.raises(ShapeError, match="softplus"):
        em.softplus(x, beta=0)
    with pytest.raises(ShapeError, match="celu"):
        em.celu(x, alpha=0.0)


def test_methods_match_functions():
    x = em.tensor(np.linspace(-3, 3, 12).reshape(3, 4))
    for name in ("sigmoid", "relu", "gelu", "silu", "mish", "softplus", "log_sigmoid"):
        np.testing.assert_array_equal(getattr(x, name)().numpy(), getattr(em, name)(x).numpy())
    np.testing.assert_array_equal(x.softmax(0).numpy(), em.softmax(x, 0).numpy())
    np.testing.assert_array_equal(x.glu(1).numpy(), em.glu(x, 1).numpy())
