"""Autodiff(Fusion(NdArray)): forward and backward passes fuse, and training matches
Autodiff(NdArray)."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn, optim
from ember.backend import Autodiff, NdArray
from tests.fusion._util import RUNTIMES, assert_close, fusion_device


class Mlp(em.Module):
    def __init__(self, arrays, device):
        self.w1 = em.Param(em.tensor(arrays["w1"], device=device))
        self.b1 = em.Param(em.tensor(arrays["b1"], device=device))
        self.w2 = em.Param(em.tensor(arrays["w2"], device=device))
        self.b2 = em.Param(em.tensor(arrays["b2"], device=device))
        self.g = em.Param(em.tensor(arrays["g"], device=device))

    def forward(self, x):
        h = nn.functional.gelu(x @ self.w1 + self.b1)
        h = em.layer_norm(h, h.shape[-1], self.g)
        return h @ self.w2 + self.b2


def _train(device, steps=8, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {"w1": rng.normal(size=(12, 32)) * 0.3, "b1": rng.normal(size=(32,)) * 0.1,
              "w2": rng.normal(size=(32, 5)) * 0.3, "b2": np.zeros(5),
              "g": np.ones(32)}
    arrays = {k: v.astype(np.float32) for k, v in arrays.items()}
    model = Mlp(arrays, device)
    opt = optim.Adam(lr=1e-2)
    data = [(rng.normal(size=(16, 12)).astype(np.float32), rng.integers(0, 5, size=16))
            for _ in range(steps)]
    losses = []
    for xa, ya in data:
        x = em.tensor(xa, device=device)
        y = em.tensor(ya, device=device)
        loss = nn.functional.cross_entropy(model(x), y)
        grads = em.GradientsParams.from_grads(loss.backward(), model)
        model = opt.step(1e-2, model, grads)
        losses.append(loss.item())
    return np.array(losses), model


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_mlp_training_matches_unfused(runtime):
    ad = Autodiff(fusion_device(runtime).backend).device(0)
    em.fusion.reset_stats()
    got, m1 = _train(ad)
    st = em.fusion.stats()
    want, m2 = _train(Autodiff(NdArray()).device(0))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert_close(m1.w1.numpy(), m2.w1.numpy(), rtol=1e-4, atol=1e-5)
    # the steps really ran fused, and the repeated steps replayed cached plans
    assert st["kernels"] > 0 and st["plan_cache_hits"] > st["plan_cache_misses"], st


def test_backward_passes_fuse():
    dev = fusion_device("interpret")
    ad = Autodiff(dev.backend).device(0)
    a = np.random.default_rng(1).normal(size=(6, 7)).astype(np.float32)
    x = em.tensor(a, device=ad).require_grad()
    y = (x.tanh() * 2.0 + x.sigmoid()).exp().sum()
    em.fusion.reset_stats()
    grads = y.backward()
    st = em.fusion.stats()
    em.fusion.reset_stats()
    g = x.grad(grads).numpy()
    t = np.tanh(a.astype(np.float64))
    s = 1 / (1 + np.exp(-a.astype(np.float64)))
    e = np.exp(2 * t + s)
    assert_close(g, e * (2 * (1 - t * t) + s * (1 - s)), rtol=1e-5)
    # the gradient chain is recorded and flushed once, as backward ends: a couple of
    # kernels, one inner op (the seed gradient, a `full`); reading the gradient then runs
    # nothing
    assert st["inner_ops"] <= 1 and st["kernels"] <= 3 and st["flushes"] == 1, st
    assert em.fusion.stats()["kernels"] == 0 and em.fusion.stats()["flushes"] == 0


def test_backward_flushes_all_gradients_at_once():
    """An optimizer reads gradients one parameter at a time; on a lazy backend each read
    of a pending gradient would flush its own part of the stream. Backward ends with one
    flush of all of them (Backend.flush), so the reads run nothing."""
    dev = fusion_device("interpret")
    ad = Autodiff(dev.backend).device(0)
    rng = np.random.default_rng(2)
    ws = [em.tensor(rng.normal(size=(5, 5)).astype(np.float32), device=ad).require_grad()
          for _ in range(4)]
    x = em.tensor(rng.normal(size=(3, 5)).astype(np.float32), device=ad)
    h = x
    for w in ws:
        h = (h @ w).tanh() * 0.5 + h
    em.fusion.reset_stats()
    grads = (h * h).sum().backward()
    at_backward = em.fusion.stats()["flushes"]
    em.fusion.reset_stats()
    got = [w.grad(grads).numpy() for w in ws]
    assert em.fusion.stats()["flushes"] == 0, em.fusion.stats()
    ref_dev = Autodiff(NdArray()).device(0)
    rws = [em.tensor(w.numpy(), device=ref_dev).require_grad() for w in ws]
    h = em.tensor(x.numpy(), device=ref_dev)
    for w in rws:
        h = (h @ w).tanh() * 0.5 + h
    rg = (h * h).sum().backward()
    for a, w in zip(got, rws):
        assert_close(a, w.grad(rg).numpy(), rtol=1e-5, atol=1e-6)
    # matmuls read pending values (one flush each) and the end of backward flushes the rest
    assert at_backward >= 1


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_gradients_of_reduce_then_broadcast(runtime):
    dev = fusion_device(runtime)
    ad = Autodiff(dev.backend).device(0)
    rng = np.random.default_rng(2)
    a = rng.normal(size=(3, 5, 4))
    for fn in (lambda t: em.softmax(t, 1), lambda t: em.layer_norm(t.swap_dims(1, 2), 5),
               lambda t: t.swap_dims(0, 2).var(1)):
        outs = []
        for d in (ad, Autodiff(NdArray()).device(0)):
            x = em.tensor(a, device=d).require_grad()
            out = fn(x)
            wt = em.tensor(np.random.default_rng(3).normal(size=out.shape), device=d)
            outs.append(x.grad((out * wt).sum().backward()).numpy())
        assert_close(outs[0], outs[1], rtol=1e-9, atol=1e-10)
