"""Dropout: the fraction dropped, the scaling, reproducibility with a seed, and identity in
evaluation."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.errors import ConfigError

CPU = em.device("cpu")
AD = CPU.autodiff()


def test_drops_the_right_fraction_and_rescales():
    d = nn.Dropout(0.3)
    assert d.training
    x = em.ones(200, 500)
    em.seed(1)
    y = d(x).numpy()
    kept = y != 0
    assert abs(1 - kept.mean() - 0.3) < 0.005
    np.testing.assert_allclose(y[kept], 1 / 0.7, rtol=1e-6)


def test_reproducible_with_the_seed():
    d = nn.Dropout(0.5)
    x = em.tensor(np.arange(1, 101, dtype=np.float32))
    em.seed(42)
    a = d(x).numpy()
    b = d(x).numpy()
    em.seed(42)
    c = d(x).numpy()
    np.testing.assert_array_equal(a, c)
    assert not np.array_equal(a, b)  # the stream moves on
    CPU.seed(42)  # one device's stream
    np.testing.assert_array_equal(d(x).numpy(), a)


def test_identity_in_eval_and_for_zero_prob():
    x = em.tensor(np.random.default_rng(0).normal(size=(4, 5)).astype(np.float32))
    d = nn.Dropout(0.9)
    assert d.eval()(x) is x
    assert d.valid()(x) is x
    assert nn.Dropout(0.0)(x) is x
    assert nn.functional.dropout(x, 0.5, training=False) is x
    seq = nn.Sequential(nn.Linear(5, 5), nn.Dropout(0.5)).eval()
    np.testing.assert_array_equal(seq(x).numpy(), seq(x).numpy())


def test_gradient_flows_through_kept_elements_only():
    x = em.ones(10, 10, device=AD).require_grad()
    em.seed(3)
    y = nn.Dropout(0.4)(x)
    g = x.grad(y.sum().backward()).numpy()
    np.testing.assert_allclose(g, (y.numpy() != 0) / 0.6, rtol=1e-6)


def test_bad_prob():
    for p in (-0.1, 1.0, "x"):
        with pytest.raises(ConfigError, match="prob"):
            nn.Dropout(p)
