"""Losses against torch.nn.functional, for every option, and their gradients."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.errors import ConfigError, ShapeError

from ._ref import AD, close, et, randn, torch, tt

F = torch.nn.functional
f = nn.functional
REDUCTIONS = ("mean", "sum", "none")


def _targets(shape, c, ignore=None, seed=0):
    t = np.random.default_rng(seed).integers(0, c, size=shape)
    if ignore is not None:
        t.reshape(-1)[::3] = ignore
    return t


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [None, 2, -100])
def test_cross_entropy_int_targets(reduction, smoothing, weighted, ignore):
    x = randn(6, 5) * 2
    t = _targets((6,), 5, ignore)
    w = np.array([0.5, 1.0, 2.0, 0.3, 1.5], np.float32) if weighted else None
    kw = dict(reduction=reduction, label_smoothing=smoothing,
              ignore_index=-100 if ignore is None else ignore)
    got = f.cross_entropy(et(x), em.tensor(t), None if w is None else et(w), **kw)
    want = F.cross_entropy(tt(x), torch.from_numpy(t), None if w is None else tt(w), **kw)
    close(got, want)
    mod = nn.CrossEntropyLoss(weight=None if w is None else list(w), **kw)
    close(mod(et(x), em.tensor(t)), want)


def test_cross_entropy_spatial_and_unbatched():
    x = randn(2, 4, 3, 5)
    t = _targets((2, 3, 5), 4, ignore=1)
    w = np.array([1.0, 2.0, 0.5, 1.0], np.float32)
    for red in REDUCTIONS:
        close(f.cross_entropy(et(x), em.tensor(t), et(w), ignore_index=1, reduction=red,
                              label_smoothing=0.1),
              F.cross_entropy(tt(x), torch.from_numpy(t), tt(w), ignore_index=1,
                              reduction=red, label_smoothing=0.1))
    x1 = randn(4)
    close(f.cross_entropy(et(x1), em.tensor(np.array(2))),
          F.cross_entropy(tt(x1), torch.tensor(2)))
    with pytest.raises(ShapeError, match="target"):
        f.cross_entropy(et(x), em.tensor(t[:, :2]))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.3])
def test_cross_entropy_probability_targets(reduction, smoothing):
    x = randn(5, 4)
    p = np.random.default_rng(1).dirichlet(np.ones(4), 5).astype(np.float32)
    w = np.array([1.0, 0.5, 2.0, 1.0], np.float32)
    for weight in (None, w):
        close(f.cross_entropy(et(x), et(p), None if weight is None else et(weight),
                              reduction=reduction, label_smoothing=smoothing),
              F.cross_entropy(tt(x), tt(p), None if weight is None else tt(weight),
                              reduction=reduction, label_smoothing=smoothing))


def test_cross_entropy_and_nll_gradients():
    x = randn(6, 5)
    t = _targets((6,), 5, ignore=3)
    w = np.array([0.5, 1.0, 2.0, 0.3, 1.5], np.float32)
    xe = em.tensor(x, device=AD).require_grad()
    loss = f.cross_entropy(xe, em.tensor(t, device=AD), et(w, AD), ignore_index=3,
                           label_smoothing=0.1)
    g = xe.grad(loss.backward())
    xt = tt(x, grad=True)
    F.cross_entropy(xt, torch.from_numpy(t), tt(w), ignore_index=3,
                    label_smoothing=0.1).backward()
    close(g, xt.grad)
    lp = randn(6, 5)
    for red in REDUCTIONS:
        close(f.nll_loss(et(lp), em.tensor(t), et(w), ignore_index=3, reduction=red),
              F.nll_loss(tt(lp), torch.from_numpy(t), tt(w), ignore_index=3, reduction=red))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_cross_entropy(reduction):
    p = np.random.default_rng(2).random((4, 3)).astype(np.float32)
    p[0, 0], p[0, 1] = 0.0, 1.0  # log clamped at -100, as torch
    y = (np.random.default_rng(3).random((4, 3)) < 0.5).astype(np.float32)
    w = randn(4, 3) ** 2
    for weight in (None, w):
        close(f.binary_cross_entropy(et(p), et(y), None if weight is None else et(weight),
                                     reduction=reduction),
              F.binary_cross_entropy(tt(p), tt(y), None if weight is None else tt(weight),
                                     reduction=reduction))
    close(nn.BinaryCrossEntropyLoss(reduction=reduction)(et(p), et(y)),
          F.binary_cross_entropy(tt(p), tt(y), reduction=reduction))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_cross_entropy_with_logits_is_stable(reduction):
    x = randn(4, 3) * 5
    x[0, 0], x[1, 1] = 200.0, -200.0  # no overflow
    y = np.random.default_rng(4).random((4, 3)).astype(np.float32)
    pw = np.array([1.0, 3.0, 0.5], np.float32)
    w = randn(4, 3) ** 2
    for weight in (None, w):
        for pos in (None, pw):
            got = f.binary_cross_entropy_with_logits(
                et(x), et(y), None if weight is None else et(weight), reduction,
                None if pos is None else et(pos))
            want = F.binary_cross_entropy_with_logits(
                tt(x), tt(y), None if weight is None else tt(weight), reduction=reduction,
                pos_weight=None if pos is None else tt(pos))
            close(got, want)
            assert np.isfinite(got.numpy()).all()
    mod = nn.BinaryCrossEntropyLoss(with_logits=True, pos_weight=pw, reduction=reduction)
    close(mod(et(x), et(y)), F.binary_cross_entropy_with_logits(
        tt(x), tt(y), reduction=reduction, pos_weight=tt(pw)))
    xe = em.tensor(x, device=AD).require_grad()
    g = xe.grad(f.binary_cross_entropy_with_logits(xe, et(y, AD)).backward())
    xt = tt(x, grad=True)
    F.binary_cross_entropy_with_logits(xt, tt(y)).backward()
    close(g, xt.grad)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_regression_losses(reduction):
    a, b = randn(4, 5) * 2, randn(4, 5) * 2
    close(f.mse_loss(et(a), et(b), reduction), F.mse_loss(tt(a), tt(b), reduction=reduction))
    close(f.l1_loss(et(a), et(b), reduction), F.l1_loss(tt(a), tt(b), reduction=reduction))
    for delta in (0.5, 1.0, 2.5):
        close(f.huber_loss(et(a), et(b), reduction, delta),
              F.huber_loss(tt(a), tt(b), reduction=reduction, delta=delta))
        close(nn.HuberLoss(delta, reduction)(et(a), et(b)),
              F.huber_loss(tt(a), tt(b), reduction=reduction, delta=delta))
    for beta in (0.0, 0.5, 1.0, 3.0):
        close(f.smooth_l1_loss(et(a), et(b), reduction, beta),
              F.smooth_l1_loss(tt(a), tt(b), reduction=reduction, beta=beta))
        close(nn.SmoothL1Loss(beta, reduction)(et(a), et(b)),
              F.smooth_l1_loss(tt(a), tt(b), reduction=reduction, beta=beta))
    close(nn.MseLoss(reduction)(et(a), et(b)), F.mse_loss(tt(a), tt(b), reduction=reduction))
    close(nn.L1Loss(reduction)(et(a), et(b)), F.l1_loss(tt(a), tt(b), reduction=reduction))


@pytest.mark.filterwarnings("ignore:reduction. .mean. divides")
@pytest.mark.parametrize("reduction", REDUCTIONS + ("batchmean",))
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div(reduction, log_target):
    rng = np.random.default_rng(5)
    inp = np.log(rng.dirichlet(np.ones(4), 3)).astype(np.float32)
    tgt = rng.dirichlet(np.ones(4), 3).astype(np.float32)
    tgt[0, 1] = 0.0  # 0 * log 0 = 0
    if log_target:
        tgt = np.log(tgt + 1e-3).astype(np.float32)
    close(f.kl_div(et(inp), et(tgt), reduction, log_target),
          F.kl_div(tt(inp), tt(tgt), reduction=reduction, log_target=log_target))
    close(nn.KlDivLoss(reduction, log_target)(et(inp), et(tgt)),
          F.kl_div(tt(inp), tt(tgt), reduction=reduction, log_target=log_target))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("margin", [0.0, 0.3, -0.2])
def test_cosine_embedding_loss(reduction, margin):
    a, b = randn(6, 4), randn(6, 4)
    y = np.array([1, -1, 1, -1, -1, 1])
    close(f.cosine_embedding_loss(et(a), et(b), em.tensor(y), margin, reduction),
          F.cosine_embedding_loss(tt(a), tt(b), torch.from_numpy(y), margin=margin,
                                  reduction=reduction))
    close(nn.CosineEmbeddingLoss(margin, reduction)(et(a), et(b), em.tensor(y)),
          F.cosine_embedding_loss(tt(a), tt(b), torch.from_numpy(y), margin=margin,
                                  reduction=reduction))


def test_loss_errors_and_configs(tmp_path):
    with pytest.raises(ConfigError, match="reduction"):
        nn.MseLoss("avg")
    with pytest.raises(ShapeError, match="same shape"):
        f.mse_loss(em.zeros(2, 3), em.zeros(3, 2))
    with pytest.raises(ShapeError, match="weight"):
        f.cross_entropy(em.zeros(2, 3), em.tensor([0, 1]), em.ones(2))
    cfg = nn.CrossEntropyLossConfig(weight=(1.0, 2.0, 3.0), label_smoothing=0.1)
    cfg.save(tmp_path / "ce.json")
    back = nn.CrossEntropyLossConfig.load(tmp_path / "ce.json")
    assert back == cfg
    loss = back.init()
    x, t = randn(4, 3), np.array([0, 1, 2, 1])
    close(loss(et(x), em.tensor(t)),
          F.cross_entropy(tt(x), torch.from_numpy(t), torch.tensor([1.0, 2.0, 3.0]),
                          label_smoothing=0.1))


def test_cross_entropy_accepts_int32_targets_on_autodiff_device():
    x = randn(4, 3)
    t = np.array([0, 2, 1, 2], np.int32)
    got = f.cross_entropy(et(x, AD), em.tensor(t, device=AD))
    close(got, F.cross_entropy(tt(x), torch.from_numpy(t).long()))
