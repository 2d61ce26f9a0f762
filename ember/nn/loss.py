"""Losses, as functions (``nn.functional.cross_entropy``, ...) and as modules
(``nn.CrossEntropyLoss``, ...) with PyTorch's definitions and options. ``reduction`` is
"mean" (default), "sum" or "none"."""
from __future__ import annotations

import ember as em
from ember.errors import ConfigError, DTypeError, ShapeError
from ember.ops.nn import CROSS_ENTROPY_ROWS
from ember.tensor.dispatch import apply

from ._util import make_config

__all__ = [
    "cross_entropy", "nll_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits",
    "mse_loss", "l1_loss", "huber_loss", "smooth_l1_loss", "kl_div", "cosine_embedding_loss",
    "CrossEntropyLoss", "NllLoss", "BinaryCrossEntropyLoss", "MseLoss", "L1Loss", "HuberLoss",
    "SmoothL1Loss", "KlDivLoss", "CosineEmbeddingLoss",
    "CrossEntropyLossConfig", "BinaryCrossEntropyLossConfig", "MseLossConfig",
    "L1LossConfig", "HuberLossConfig", "SmoothL1LossConfig", "KlDivLossConfig",
    "CosineEmbeddingLossConfig",
]

_REDUCTIONS = ("mean", "sum", "none")


def _reduction(op, r, extra=()):
    if r in _REDUCTIONS:
        return r
    if r not in _REDUCTIONS + tuple(extra):
        raise ConfigError(f"{op}: reduction must be one of {_REDUCTIONS + tuple(extra)}, got "
                          f"{r!r}")
    return r


def _reduce(loss, reduction):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _as_tensor(v, like, what):
    """``v`` (a Tensor, a list of numbers, or None) on ``like``'s device and dtype."""
    if v is None:
        return None
    if not isinstance(v, em.Tensor):
        v = em.tensor(list(v) if isinstance(v, tuple) else v, dtype=like.dtype,
                      device=like.device)
    elif v.device is not like.device:
        v = v.to_device(like.device)
    return v.cast(like.dtype) if v.dtype != like.dtype else v


def _same_shape(op, a, b, an="input", bn="target"):
    if tuple(a.shape) != tuple(b.shape):
        raise ShapeError(f"{op}: {an} {tuple(a.shape)} and {bn} {tuple(b.shape)} must have "
                         f"the same shape")


def _float_input(op, x):
    if not isinstance(x, em.Tensor) or x.dtype.kind != "float":
        got = x.dtype.short if isinstance(x, em.Tensor) else type(x).__name__
        raise DTypeError(f"{op}: expects a float tensor as input, got {got}")


def _classes_last(op, x):
    """``x`` [N, C, *] (or [C]) as [M, C] with the class dim last."""
    if x.ndim == 1:
        return x.reshape(1, x.shape[0])
    if x.ndim > 2:
        x = x.movedim(1, -1)
    return x.reshape(-1, x.shape[-1])


def nll_loss(log_probs, target, weight=None, ignore_index: int = -100,
             reduction: str = "mean"):
    """Negative log likelihood of int class ``target`` under ``log_probs`` ``[N, C, *]`` (or
    ``[C]``): ``-weight[t] * log_probs[t]``; the mean divides by the summed weights of the
    targets that are not ``ignore_index``."""
    return _cross_entropy("nll_loss", log_probs, target, weight, ignore_index, reduction,
                          0.0, log_probs=True)


def cross_entropy(input, target, weight=None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0):
    """Cross entropy between logits ``input`` ``[N, C, *]`` (or ``[C]``; the class dim is
    dim 1) and ``target``: int class indices ``[N, *]``, or class probabilities of the
    input's shape (float). ``weight`` ``[C]`` rescales each class; targets equal to
    ``ignore_index`` contribute nothing; ``label_smoothing`` mixes the target with the
    uniform distribution. The mean over int targets divides by the summed weights of the
    counted targets. Matches ``torch.nn.functional.cross_entropy``."""
    return _cross_entropy("cross_entropy", input, target, weight, ignore_index, reduction,
                          label_smoothing, log_probs=False)


def _cross_entropy(op, input, target, weight, ignore_index, reduction, label_smoothing,
                   log_probs):
    _float_input(op, input)
    _reduction(op, reduction)
    eps = float(label_smoothing)
    if not 0.0 <= eps <= 1.0:
        raise ConfigError(f"{op}: label_smoothing must be in [0, 1], got {eps}")
    ndim = len(input._shape)
    if ndim == 0:
        raise ShapeError(f"{op}: input must be [N, C, *] or [C], got a 0-d tensor")
    cdim = 0 if ndim == 1 else 1
    c = input._shape[cdim]
    w = _as_tensor(weight, input, "weight")
    if not log_probs and w is None and not eps and target.dtype.kind == "int":
        return _class_cross_entropy(op, input, target, cdim, ignore_index, reduction)
    logp = input if log_probs else em.log_softmax(input, cdim)
    lp = _classes_last(op, logp)
    if w is not None and tuple(w.shape) != (c,):
        raise ShapeError(f"{op}: weight {tuple(w.shape)} must have shape ({c},), one per class")
    if target.dtype.kind == "float":  # class probabilities
        _same_shape(op, input, target)
        t = _classes_last(op, target.cast(lp.dtype))
        if eps:
            t = t * (1.0 - eps) + eps / c
        prod = lp * t
        if w is not None:
            prod = prod * w.reshape(1, c)
        loss = -prod.sum(1)
        if reduction == "none":
            return loss.reshape(tuple(target.shape[:cdim]) + tuple(target.shape[cdim + 1:]))
        return loss.sum() if reduction == "sum" else loss.mean()
    if target.dtype.kind != "int":
        raise DTypeError(f"{op}: target must be int class indices or float probabilities, "
                         f"got {target.dtype.short}")
    want = tuple(input.shape[:cdim]) + tuple(input.shape[cdim + 1:])
    if tuple(target.shape) != want:
        raise ShapeError(f"{op}: target {tuple(target.shape)} must have shape {want} for "
                         f"input {tuple(input.shape)} (the input without its class dim)")
    t = target.reshape(-1)
    valid = t != ignore_index
    safe = em.where(valid, t, 0)
    picked = -lp.gather(1, safe.reshape(-1, 1)).reshape(-1)
    validf = valid.cast(lp.dtype)
    wt = validf if w is None else w.index_select(0, safe) * validf
    loss = picked * wt
    if eps:
        smooth = -(lp if w is None else lp * w.reshape(1, c)).sum(1) * validf
        loss = loss * (1.0 - eps) + smooth * (eps / c)
    if reduction == "none":
        return loss.reshape(want)
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / wt.sum()


def _class_cross_entropy(op, input, target, cdim, ignore_index, reduction):
    """Cross entropy of logits and int classes, unweighted and unsmoothed (the common case):
    one `cross_entropy_rows` primitive, forward and backward, instead of the composite."""
    shape = input._shape
    want = shape[:cdim] + shape[cdim + 1:]
    if tuple(target.shape) != want:
        raise ShapeError(f"{op}: target {tuple(target.shape)} must have shape {want} for "
                         f"input {tuple(input.shape)} (the input without its class dim)")
    # (a [N, C] input and an [N] target are already the rows: no reshapes to look at)
    x = input if cdim == 1 and len(shape) == 2 and shape[1] else _classes_last(op, input)
    t = target if len(want) == 1 else target.reshape(-1)
    rows, valid = apply(CROSS_ENTROPY_ROWS, (x, t), {"ignore_index": int(ignore_index)})
    if reduction == "none":
        return rows.reshape(want)
    if reduction == "sum":
        return rows.sum()
    return rows.sum() / valid.sum()


def binary_cross_entropy(input, target, weight=None, reduction: str = "mean"):
    """``-(t * log(p) + (1 - t) * log(1 - p))`` for probabilities ``input``; the logs are
    clamped at -100 (as PyTorch), so ``p`` of exactly 0 or 1 gives finite losses.
    ``weight`` (broadcast to the input) rescales each element."""
    op = "binary_cross_entropy"
    _float_input(op, input)
    _reduction(op, reduction)
    _same_shape(op, input, target)
    t = target.cast(input.dtype)
    logp = input.log().clamp(min=-100.0)
    log1mp = (-input).log1p().clamp(min=-100.0)
    loss = -(t * logp + (1.0 - t) * log1mp)
    if weight is not None:
        loss = loss * _as_tensor(weight, input, "weight")
    return _reduce(loss, reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, reduction: str = "mean",
                                     pos_weight=None):
    """Binary cross entropy of ``sigmoid(input)``, computed stably from the logits:
    ``(1 - t) * x + (1 + (pos_weight - 1) * t) * softplus(-x)``. ``pos_weight`` (broadcast
    along the last dim) weighs the positive class, ``weight`` each element."""
    op = "binary_cross_entropy_with_logits"
    _float_input(op, input)
    _reduction(op, reduction)
    _same_shape(op, input, target)
    t = target.cast(input.dtype)
    sp = (-input).relu() + (-input.abs()).exp().log1p()  # softplus(-x), stable
    if pos_weight is not None:
        pw = _as_tensor(pos_weight, input, "pos_weight")
        loss = (1.0 - t) * input + (1.0 + (pw - 1.0) * t) * sp
    else:
        loss = (1.0 - t) * input + sp
    if weight is not None:
        loss = loss * _as_tensor(weight, input, "weight")
    return _reduce(loss, reduction)


def mse_loss(input, target, reduction: str = "mean"):
    """``(input - target)^2``."""
    _reduction("mse_loss", reduction)
    _same_shape("mse_loss", input, target)
    d = input - target
    return _reduce(d * d, reduction)


def l1_loss(input, target, reduction: str = "mean"):
    """``|input - target|``."""
    _reduction("l1_loss", reduction)
    _same_shape("l1_loss", input, target)
    return _reduce((input - target).abs(), reduction)


def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0):
    """``0.5 d^2`` where ``|d| < delta``, else ``delta * (|d| - 0.5 delta)``."""
    _reduction("huber_loss", reduction)
    _same_shape("huber_loss", input, target)
    delta = float(delta)
    if not delta > 0:
        raise ConfigError(f"huber_loss: delta must be positive, got {delta}")
    d = (input - target).abs()
    loss = em.where(d < delta, d * d * 0.5, (d - 0.5 * delta) * delta)
    return _reduce(loss, reduction)


def smooth_l1_loss(input, target, reduction: str = "mean", beta: float = 1.0):
    """``0.5 d^2 / beta`` where ``|d| < beta``, else ``|d| - 0.5 beta`` (L1 when
    ``beta == 0``)."""
    _reduction("smooth_l1_loss", reduction)
    _same_shape("smooth_l1_loss", input, target)
    beta = float(beta)
    if beta < 0:
        raise ConfigError(f"smooth_l1_loss: beta must be >= 0, got {beta}")
    d = (input - target).abs()
    if beta == 0.0:
        return _reduce(d, reduction)
    loss = em.where(d < beta, d * d * (0.5 / beta), d - 0.5 * beta)
    return _reduce(loss, reduction)


def kl_div(input, target, reduction: str = "mean", log_target: bool = False):
    """Kullback-Leibler divergence of ``target`` from log-probabilities ``input``:
    ``target * (log(target) - input)`` (0 where ``target == 0``), or with ``log_target``
    ``exp(target) * (target - input)``. "batchmean" divides the sum by the batch size
    (the mathematically correct KL); "mean" by the element count (PyTorch's default)."""
    op = "kl_div"
    _float_input(op, input)
    _reduction(op, reduction, ("batchmean",))
    _same_shape(op, input, target)
    t = target.cast(input.dtype)
    if log_target:
        loss = t.exp() * (t - input)
    else:
        pos = t > 0
        loss = t * em.where(pos, t, 1.0).log() - t * input
    if reduction == "batchmean":
        return loss.sum() / (input.shape[0] if input.ndim else 1)
    return _reduce(loss, reduction)


def cosine_embedding_loss(input1, input2, target, margin: float = 0.0,
                          reduction: str = "mean"):
    """``1 - cos(x1, x2)`` where ``target == 1``, ``max(0, cos(x1, x2) - margin)`` where
    ``target == -1``; the cosine is over the last dim (PyTorch's, with 1e-12 added to each
    squared norm)."""
    op = "cosine_embedding_loss"
    _reduction(op, reduction)
    _same_shape(op, input1, input2, "input1", "input2")
    if tuple(target.shape) != tuple(input1.shape[:-1]):
        raise ShapeError(f"{op}: target {tuple(target.shape)} must have shape "
                         f"{tuple(input1.shape[:-1])} (the inputs without their last dim)")
    eps = 1e-12
    prod = (input1 * input2).sum(-1)
    m1 = (input1 * input1).sum(-1) + eps
    m2 = (input2 * input2).sum(-1) + eps
    cos = prod / (m1 * m2).sqrt()
    pos = em.where(target == 1, 1.0 - cos, 0.0)
    neg = em.where(target == -1, (cos - float(margin)).clamp(min=0.0), 0.0)
    return _reduce(pos + neg, reduction)


# -- modules ----------------------------------------------------------------------------------
def _weights(v):
    if v is None:
        return None
    if isinstance(v, em.Tensor):
        return tuple(float(x) for x in v.numpy().reshape(-1))
    return tuple(float(x) for x in v)


class CrossEntropyLoss(em.Module):
    """`cross_entropy` as a module: ``loss(logits, targets)``. ``weight`` is a sequence of
    per-class weights (kept as plain floats, so the config saves it)."""

    def __init__(self, weight=None, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0):
        self.weight = _weights(weight)
        self.ignore_index = int(ignore_index)
        self.reduction = _reduction("CrossEntropyLoss", reduction)
        self.label_smoothing = float(label_smoothing)

    def forward(self, input, target):
        return cross_entropy(input, target, self.weight, self.ignore_index, self.reduction,
                             self.label_smoothing)


class NllLoss(em.Module):
    """`nll_loss` as a module: ``loss(log_probs, targets)``."""

    def __init__(self, weight=None, ignore_index: int = -100, reduction: str = "mean"):
        self.weight = _weights(weight)
        self.ignore_index = int(ignore_index)
        self.reduction = _reduction("NllLoss", reduction)

    def forward(self, input, target):
        return nll_loss(input, target, self.weight, self.ignore_index, self.reduction)


class BinaryCrossEntropyLoss(em.Module):
    """Binary cross entropy of probabilities, or of logits with ``with_logits=True`` (the
    stable form; prefer it). ``weight`` and ``pos_weight`` are per-class sequences over the
    last dim."""

    def __init__(self, with_logits: bool = False, weight=None, pos_weight=None,
                 reduction: str = "mean"):
        self.with_logits = bool(with_logits)
        self.weight = _weights(weight)
        self.pos_weight = _weights(pos_weight)
        if self.pos_weight is not None and not self.with_logits:
            raise ConfigError("BinaryCrossEntropyLoss: pos_weight needs with_logits=True")
        self.reduction = _reduction("BinaryCrossEntropyLoss", reduction)

    def forward(self, input, target):
        if self.with_logits:
            return binary_cross_entropy_with_logits(input, target, self.weight,
                                                    self.reduction, self.pos_weight)
        return binary_cross_entropy(input, target, self.weight, self.reduction)


class MseLoss(em.Module):
    def __init__(self, reduction: str = "mean"):
        self.reduction = _reduction("MseLoss", reduction)

    def forward(self, input, target):
        return mse_loss(input, target, self.reduction)


class L1Loss(em.Module):
    def __init__(self, reduction: str = "mean"):
        self.reduction = _reduction("L1Loss", reduction)

    def forward(self, input, target):
        return l1_loss(input, target, self.reduction)


class HuberLoss(em.Module):
    def __init__(self, delta: float = 1.0, reduction: str = "mean"):
        self.delta = float(delta)
        self.reduction = _reduction("HuberLoss", reduction)

    def forward(self, input, target):
        return huber_loss(input, target, self.reduction, self.delta)


class SmoothL1Loss(em.Module):
    def __init__(self, beta: float = 1.0, reduction: str = "mean"):
        self.beta = float(beta)
        self.reduction = _reduction("SmoothL1Loss", reduction)

    def forward(self, input, target):
        return smooth_l1_loss(input, target, self.reduction, self.beta)


class KlDivLoss(em.Module):
    def __init__(self, reduction: str = "mean", log_target: bool = False):
        self.reduction = _reduction("KlDivLoss", reduction, ("batchmean",))
        self.log_target = bool(log_target)

    def forward(self, input, target):
        return kl_div(input, target, self.reduction, self.log_target)


class CosineEmbeddingLoss(em.Module):
    def __init__(self, margin: float = 0.0, reduction: str = "mean"):
        self.margin = float(margin)
        self.reduction = _reduction("CosineEmbeddingLoss", reduction)

    def forward(self, input1, input2, target):
        return cosine_embedding_loss(input1, input2, target, self.margin, self.reduction)


CrossEntropyLossConfig = make_config(CrossEntropyLoss)
BinaryCrossEntropyLossConfig = make_config(BinaryCrossEntropyLoss)
MseLossConfig = make_config(MseLoss)
L1LossConfig = make_config(L1Loss)
HuberLossConfig = make_config(HuberLoss)
SmoothL1LossConfig = make_config(SmoothL1Loss)
KlDivLossConfig = make_config(KlDivLoss)
CosineEmbeddingLossConfig = make_config(CosineEmbeddingLoss)
