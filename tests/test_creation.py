"""Creation functions: default dtypes, argument errors, random sampling statistics in every
dtype a distribution supports, and seeded reproducibility across devices."""
import math

import numpy as np
import pytest

import ember as em
from ember.errors import DTypeError, ShapeError

FLOATS = (em.f64, em.f32, em.f16, em.bf16)
INTS = (em.i64, em.i32, em.i16, em.i8, em.u8)


# -- ranges ---------------------------------------------------------------------------------
def test_arange_default_dtypes():
    assert em.arange(5).dtype is em.int64
    assert em.arange(1, 5, 2).dtype is em.int64
    assert em.arange(5.0).dtype is em.float32
    assert em.arange(0, 1, 0.25).dtype is em.float32
    assert em.arange(np.int32(3)).dtype is em.int64
    assert em.arange(3, dtype=em.f64).dtype is em.float64
    np.testing.assert_array_equal(em.arange(5).numpy(), np.arange(5))


def test_arange_length_matches_numpy():
    for args in [(0, 1, 0.1), (0, 1, 0.3), (1.5, -2, -0.5), (-3, 4, 7), (0, 10, 3),
                 (10, 0, -3), (0.0, 0.9, 0.3)]:
        got = em.arange(*args, dtype=em.f64).numpy()
        exp = np.arange(*args, dtype=np.float64)
        assert got.shape == exp.shape, args
        np.testing.assert_allclose(got, exp, rtol=1e-12, atol=1e-12)


def test_arange_large_int_exact():
    x = em.arange(2**40, 2**40 + 5).numpy()
    np.testing.assert_array_equal(x, np.arange(2**40, 2**40 + 5))


@pytest.mark.parametrize("args,exc", [
    ((0, 5, 0), ShapeError), ((5, 0), ShapeError), ((0, 5, -1), ShapeError),
    ((0, float("inf")), ShapeError), ((0, float("nan")), ShapeError),
    (("a",), DTypeError), ((True,), DTypeError)])
def test_arange_errors(args, exc):
    with pytest.raises(exc, match="arange"):
        em.arange(*args)


def test_arange_dtype_errors():
    with pytest.raises(DTypeError, match="bool"):
        em.arange(3, dtype=em.bool)
    with pytest.raises(DTypeError, match="u8"):
        em.arange(300, dtype=em.u8)
    with pytest.raises(DTypeError, match="i8"):
        em.arange(-200, 0, dtype=em.i8)
    assert em.arange(256, dtype=em.u8).numpy()[-1] == 255


def test_linspace():
    x = em.linspace(0, 1, 5)
    assert x.dtype is em.float32 and x.shape == (5,)
    np.testing.assert_allclose(x.numpy(), [0, 0.25, 0.5, 0.75, 1])
    assert em.linspace(2, 3, 0).shape == (0,)
    assert em.linspace(2, 3, 1).numpy().tolist() == [2.0]
    # the endpoint is exact
    assert em.linspace(0.1, 0.7, 13, dtype=em.f64).numpy()[-1] == 0.7
    with pytest.raises(ShapeError, match="linspace"):
        em.linspace(0, 1, -1)
    with pytest.raises(DTypeError, match="linspace"):
        em.linspace(0, 1, 2.5)
    with pytest.raises(DTypeError, match="linspace"):
        em.linspace(0, 1, 3, dtype=em.bool)
    with pytest.raises(DTypeError, match="i8"):
        em.linspace(0, 1000, 3, dtype=em.i8)


def test_eye():
    assert em.eye(3).dtype is em.float32
    np.testing.assert_array_equal(em.eye(2, 3, dtype=em.i32).numpy(), np.eye(2, 3))
    assert em.eye(0).shape == (0, 0)
    assert em.eye(2, dtype=em.bool).numpy().tolist() == [[True, False], [False, True]]
    with pytest.raises(ShapeError, match="eye"):
        em.eye(-1)
    with pytest.raises(ShapeError, match="eye"):
        em.eye(2, -3)
    with pytest.raises(DTypeError, match="eye"):
        em.eye(2.5)


def test_creation_on_autodiff_device():
    ad = em.device("cpu").autodiff()
    for t in (em.arange(3, device=ad), em.linspace(0, 1, 3, device=ad), em.eye(2, device=ad),
              em.random((2,), device=ad)):
        assert t.device is ad
        assert not t.is_require_grad()


# -- full / zeros / ones ----------------------------------------------------------------------
def test_full_and_friends():
    assert em.zeros(2, 3).shape == (2, 3) and em.zeros((2, 3)).dtype is em.float32
    assert em.ones(()).numpy().tolist() == 1.0
    assert em.full((2,), 3).dtype is em.int64
    assert em.full((2,), True).dtype is em.bool
    assert em.full((2,), 1.5, dtype=em.f16).numpy().tolist() == [1.5, 1.5]
    x = em.tensor([[1, 2]], dtype=em.i16)
    assert em.zeros_like(x).dtype is em.i16 and em.ones_like(x, dtype=em.f64).dtype is em.f64
    assert em.full_like(x, 7).numpy().tolist() == [[7, 7]]
    assert em.empty_like(x).shape == (1, 2) and em.empty(0, 4).shape == (0, 4)
    with pytest.raises(ShapeError, match="full"):
        em.full((2, -1), 0)
    with pytest.raises(DTypeError, match="full"):
        em.full((2,), 1.5, dtype=em.i32)
    with pytest.raises(DTypeError, match="u8"):
        em.full((2,), 256, dtype=em.u8)
    with pytest.raises(DTypeError, match="full"):
        em.full((2,), "x")


# -- random -----------------------------------------------------------------------------------
N = 20000


def _sample(dist, dtype, n=N):
    return em.random((n,), dist, dtype=dtype).numpy().astype(np.float64)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.short)
def test_default_uniform_unit(dtype):
    x = _sample(None, dtype)
    assert x.min() >= 0.0 and x.max() < 1.0
    assert abs(x.mean() - 0.5) < 0.02
    assert abs(x.std() - math.sqrt(1 / 12)) < 0.02
    assert em.random((3, 4), dtype=dtype).dtype is dtype


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.short)
def test_uniform_float(dtype):
    x = _sample(em.Uniform(-3.0, 5.0), dtype)
    assert x.min() >= -3.0 and x.max() < 5.0
    assert abs(x.mean() - 1.0) < 0.1
    assert abs(x.std() - 8 / math.sqrt(12)) < 0.1


def test_uniform_half_open_after_rounding():
    # an interval whose upper end is where rounding to bf16/f16 would land most samples
    for dtype in (em.bf16, em.f16):
        x = _sample(em.Uniform(255.0, 256.0), dtype, 2000)
        assert x.max() < 256.0 and x.min() >= 255.0


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: d.short)
def test_uniform_int(dtype):
    lo, hi = (0, 10) if dtype is em.u8 else (-5, 5)
    t = em.random((N,), em.Uniform(lo, hi), dtype=dtype)
    assert t.dtype is dtype
    x = t.numpy().astype(np.int64)
    assert set(np.unique(x).tolist()) == set(range(lo, hi))  # every value, none outside
    counts = np.bincount(x - lo)
    assert counts.min() > N / (hi - lo) * 0.85


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.short)
def test_normal(dtype):
    x = _sample(em.Normal(2.0, 3.0), dtype)
    assert abs(x.mean() - 2.0) < 0.1
    assert abs(x.std() - 3.0) < 0.1
    # tails roughly normal: about 4.55% beyond 2 sigma
    assert 0.035 < np.mean(np.abs(x - 2.0) > 6.0) < 0.056


@pytest.mark.parametrize("dtype", FLOATS + INTS + (em.bool,), ids=lambda d: d.short)
def test_bernoulli(dtype):
    t = em.random((N,), em.Bernoulli(0.3), dtype=dtype)
    assert t.dtype is dtype
    x = t.numpy().astype(np.float64)
    assert set(np.unique(x).tolist()) <= {0.0, 1.0}
    assert abs(x.mean() - 0.3) < 0.02


def test_default_bool_is_fair_coin():
    x = em.random((N,), dtype=em.bool).numpy()
    assert abs(x.mean() - 0.5) < 0.02


def test_distribution_dtype_errors():
    with pytest.raises(DTypeError, match="Uniform"):
        em.random((2,), dtype=em.i32)
    with pytest.raises(DTypeError, match="i32"):
        em.random((2,), em.Normal(), dtype=em.i32)
    with pytest.raises(DTypeError, match="bool"):
        em.random((2,), em.Uniform(0, 2), dtype=em.bool)
    with pytest.raises(DTypeError, match="integer"):
        em.random((2,), em.Uniform(0.5, 2), dtype=em.i64)
    with pytest.raises(ShapeError, match="empty"):
        em.random((2,), em.Uniform(3, 3), dtype=em.i64)
    with pytest.raises(DTypeError, match="u8"):
        em.random((2,), em.Uniform(-1, 3), dtype=em.u8)
    with pytest.raises(DTypeError, match="i8"):
        em.random((2,), em.Uniform(0, 1000), dtype=em.i8)
    with pytest.raises(ShapeError):
        em.Uniform(2.0, 1.0)
    with pytest.raises(ShapeError):
        em.Normal(0.0, -1.0)
    with pytest.raises(ShapeError):
        em.Bernoulli(1.5)
    with pytest.raises(DTypeError, match="Distribution"):
        em.random((2,), "normal")
    with pytest.raises(ShapeError, match="random"):
        em.random((-1,))


def test_distribution_constructors():
    D = em.Distribution
    assert D.default() == em.Default()
    assert D.uniform(0, 1) == em.Uniform(0, 1)
    assert D.normal() == em.Normal(0.0, 1.0)
    assert D.bernoulli(0.5) == em.Bernoulli(0.5)
    assert hash(em.Uniform(0, 1)) == hash(em.Uniform(0.0, 1.0))


# -- seeding ----------------------------------------------------------------------------------
def _draws(device=None):
    return [em.random((5,), device=device).numpy(),
            em.random((3,), em.Normal(), dtype=em.f64, device=device).numpy(),
            em.random((4,), em.Uniform(0, 100), dtype=em.i32, device=device).numpy(),
            em.random((6,), em.Bernoulli(0.5), dtype=em.bool, device=device).numpy()]


def _same(a, b):
    return all(np.array_equal(x, y) for x, y in zip(a, b))


def test_seed_reproducible():
    em.seed(1234)
    a = _draws()
    em.seed(1234)
    b = _draws()
    em.seed(4321)
    c = _draws()
    assert _same(a, b)
    assert not _same(a, c)


def test_seed_stream_advances():
    em.seed(7)
    a = em.random((8,)).numpy()
    b = em.random((8,)).numpy()
    assert not np.array_equal(a, b)


def test_seed_one_device():
    dev = em.device("cpu")
    dev.seed(99)
    a = _draws(dev)
    em.seed(99, device=dev)
    b = _draws(dev)
    assert _same(a, b)


def test_seed_covers_autodiff_and_all_devices():
    cpu = em.device("cpu")
    ad = cpu.autodiff()
    em.seed(5)
    a = _draws(ad)
    em.seed(5)
    b = _draws(cpu)  # the autodiff device samples from its inner device's stream
    assert _same(a, b)
    other = em.device("cpu:3")
    em.seed(11)
    x = _draws(other)
    y = _draws(cpu)
    em.seed(11)
    assert _same(x, _draws(other)) and _same(y, _draws(cpu))


def test_seed_covers_devices_made_later():
    em.seed(21)
    late = em.device("cpu", index=17)  # first use of this device after the seed
    a = _draws(late)
    em.seed(21)
    b = _draws(em.device("cpu:18"))
    assert _same(a, b)


def test_seed_values():
    em.seed(-1)  # negative seeds are accepted, as in torch
    a = _draws()
    em.seed(-1)
    assert _same(a, _draws())
    em.seed(np.int64(3))
    with pytest.raises(DTypeError, match="seed"):
        em.seed(1.5)
