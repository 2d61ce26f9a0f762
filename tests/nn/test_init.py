"""Initializers: sample statistics against their definitions, orthogonality, fans,
reproducibility and their JSON form."""
from __future__ import annotations

import math

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.errors import ConfigError, ShapeError

init = nn.init
CPU = em.device("cpu")
N_IN, N_OUT = 400, 300  # 120k samples: the sample std is within ~0.5% of the truth


def _sample(initializer, shape=(N_IN, N_OUT), **kw):
    em.seed(7)
    p = initializer.init(shape, **kw)
    assert isinstance(p, em.Param) and p.require_grad_flag
    return p.numpy().astype(np.float64)


def _uniform_ok(w, bound):
    assert w.min() >= -bound and w.max() <= bound
    assert w.min() < -0.99 * bound and w.max() > 0.99 * bound
    assert abs(w.mean()) < 0.01 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.01 * bound


def _normal_ok(w, mean, std):
    assert abs(w.mean() - mean) < 0.01 * max(std, 1e-3) + 1e-6
    assert abs(w.std() - std) < 0.01 * std
    # about 4.55% of normal samples lie beyond 2 std
    assert abs(np.mean(np.abs(w - mean) > 2 * std) - 0.0455) < 0.004


def test_constant_ones_zeros():
    assert np.all(_sample(init.constant(0.3), (3, 4)) == np.float32(0.3))
    assert np.all(_sample(init.ones(), (5,)) == 1)
    assert np.all(_sample(init.zeros(), (2, 2)) == 0)


def test_uniform_and_normal():
    w = _sample(init.uniform(-0.5, 1.5))
    assert w.min() >= -0.5 and w.max() < 1.5
    assert abs(w.mean() - 0.5) < 0.01 and abs(w.std() - 2 / math.sqrt(12)) < 0.01
    _normal_ok(_sample(init.normal(0.2, 0.7)), 0.2, 0.7)


@pytest.mark.parametrize("mode", ["fan_in", "fan_out"])
def test_kaiming(mode):
    fan = N_IN if mode == "fan_in" else N_OUT
    gain = math.sqrt(2.0)
    _uniform_ok(_sample(init.kaiming_uniform(gain, mode)), gain * math.sqrt(3.0 / fan))
    _normal_ok(_sample(init.kaiming_normal(gain, mode)), 0.0, gain / math.sqrt(fan))


def test_xavier():
    gain = 1.7
    std = gain * math.sqrt(2.0 / (N_IN + N_OUT))
    _uniform_ok(_sample(init.xavier_uniform(gain)), std * math.sqrt(3.0))
    _normal_ok(_sample(init.xavier_normal(gain)), 0.0, std)


def test_fans_from_shapes_and_explicit_fans():
    # a 2-d shape is [in, out]; a conv shape is [out, in, *kernel]
    w = _sample(init.KaimingUniform(1.0), (16, 8, 5, 5))
    assert w.max() <= math.sqrt(3.0 / (8 * 25)) and w.max() > 0.95 * math.sqrt(3.0 / 200)
    w = _sample(init.KaimingUniform(1.0), (1000,), fan_in=4)
    assert w.max() <= math.sqrt(3.0 / 4) and w.max() > 0.95 * math.sqrt(3.0 / 4)


@pytest.mark.parametrize("shape", [(50, 50), (30, 80), (80, 30), (12, 3, 2, 2)])
def test_orthogonal(shape):
    w = _sample(init.orthogonal(2.0), shape).reshape(shape[0], -1)
    rows, cols = w.shape
    gram = w @ w.T if rows <= cols else w.T @ w
    np.testing.assert_allclose(gram, 4.0 * np.eye(min(rows, cols)), atol=1e-4)
    with pytest.raises(ShapeError):
        init.orthogonal().init((5,))


def test_reproducible_with_seed_and_on_the_given_device():
    ad = CPU.autodiff()
    a = _sample(init.xavier_normal(), (4, 4))
    b = _sample(init.xavier_normal(), (4, 4))
    np.testing.assert_array_equal(a, b)
    p = init.normal().init((2, 3), device=ad)
    assert p.device is ad and p.is_require_grad()
    buf = init.zeros().init((3,), device=ad, require_grad=False)
    assert not buf.is_require_grad() and not buf.require_grad_flag
    assert init.ones().tensor((2,), dtype=em.float64).dtype == em.float64


def test_json_form_and_layers():
    for v in (init.Constant(2.0), init.KaimingNormal(1.0, True), init.Orthogonal(0.5),
              init.Uniform(-1.0, 2.0)):
        assert nn.Initializer.from_dict(v.to_dict()) == v
    with pytest.raises(ConfigError, match="unknown initializer"):
        nn.Initializer.from_dict({"type": "Nope"})
    with pytest.raises(ConfigError, match="unknown keys"):
        nn.Initializer.from_dict({"type": "Normal", "sd": 1.0})
    with pytest.raises(ConfigError):
        init.kaiming_uniform(mode="fan_avg")
    assert math.isclose(init.calculate_gain("leaky_relu", 0.2), math.sqrt(2 / 1.04))
    lin = nn.Linear(30, 20, initializer=init.Constant(0.5))
    assert np.all(lin.weight.numpy() == 0.5) and np.all(lin.bias.numpy() == 0.5)
    lstm = nn.Lstm(6, 8, initializer=init.Orthogonal())
    w = lstm.cells[0].weight_hh.numpy()  # [8, 32]: orthonormal rows
    np.testing.assert_allclose(w @ w.T, np.eye(8), atol=1e-5)
