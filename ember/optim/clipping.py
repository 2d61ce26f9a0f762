"""Gradient clipping on GradientsParams: by value, and by norm (the global norm over all
parameters, as ``torch.nn.utils.clip_grad_norm_``, or each parameter's own, as Burn's
``GradientClipping::Norm``). Each returns NEW GradientsParams; the norm stays on the device
(no host sync) unless ``error_if_nonfinite`` asks for a check."""
from __future__ import annotations

import math

import ember as em
from ember.errors import ConfigError

__all__ = ["ClipByValue", "ClipByNorm", "clip_grad_value", "clip_grad_norm", "grad_norm"]


def _new_grads(like, mapping: dict):
    """GradientsParams holding ``mapping`` (param id -> gradient)."""
    return em.GradientsParams(mapping)


def clip_grad_value(grads, value: float):
    """Each gradient clamped to ``[-value, value]``."""
    value = _positive("clip_grad_value", "value", value)
    return _new_grads(grads, {pid: g.clamp(-value, value) for pid, g in grads.items()})


def grad_norm(grads, norm_type: float = 2.0):
    """The norm of all gradients taken together, a 0-d tensor (on the first gradient's
    device); ``norm_type`` 2, 1, any p > 0, or ``inf``."""
    norm_type = _norm_type(norm_type)
    parts, dev = [], None
    for _, g in grads.items():
        if dev is None:
            dev = g.device
        parts.append(_part(g, norm_type) if g.device is dev
                     else _part(g, norm_type).to_device(dev))
    if not parts:
        return None
    return _combine(parts, norm_type)


def _part(g, p):
    if p == 2.0:
        flat = g.reshape(-1)
        return em.dot(flat, flat)
    if p == math.inf:
        return g.max_abs()
    if p == 1.0:
        return g.abs().sum()
    return (g.abs() ** p).sum()


def _combine(parts, p):
    total = parts[0] if len(parts) == 1 else em.stack(parts)
    if p == math.inf:
        return total if len(parts) == 1 else total.max()
    if len(parts) > 1:
        total = total.sum()
    if p == 2.0:
        return total.sqrt()
    return total if p == 1.0 else total ** (1.0 / p)


def clip_grad_norm(grads, max_norm: float, norm_type: float = 2.0,
                   error_if_nonfinite: bool = False):
    """-> (clipped GradientsParams, total norm as a 0-d tensor). Every gradient is scaled by
    ``min(1, max_norm / (total + 1e-6))`` (PyTorch's rule)."""
    max_norm = _positive("clip_grad_norm", "max_norm", max_norm)
    total = grad_norm(grads, norm_type)
    if total is None:
        return grads, None
    if error_if_nonfinite and not math.isfinite(float(total)):
        raise ConfigError(f"clip_grad_norm: the total norm of order {norm_type} of the "
                          f"gradients is {float(total)}; set error_if_nonfinite=False to "
                          f"clip anyway")
    coef = (max_norm / (total + 1e-6)).clamp_max(1.0)
    by_dev = {total.device: coef}
    out = {}
    for pid, g in grads.items():
        c = by_dev.get(g.device)
        if c is None:
            c = by_dev[g.device] = coef.to_device(g.device)
        out[pid] = g * c if c.dtype is g.dtype else g * c.cast(g.dtype)
    return _new_grads(grads, out), total


class ClipByValue:
    """Clamp every gradient to ``[-value, value]``: ``ClipByValue(1.0)(grads)``."""

    __slots__ = ("value",)

    def __init__(self, value: float):
        self.value = _positive("ClipByValue", "value", value)

    def __call__(self, grads):
        return clip_grad_value(grads, self.value)

    def __repr__(self):
        return f"ClipByValue({self.value})"


class ClipByNorm:
    """Scale the gradients so that their norm is at most ``max_norm``: the global norm over
    all parameters (``torch.nn.utils.clip_grad_norm_``), or with ``per_param=True`` each
    gradient by its own norm (Burn's ``GradientClipping::Norm``)."""

    __slots__ = ("max_norm", "norm_type", "error_if_nonfinite", "per_param")

    def __init__(self, max_norm: float, norm_type: float = 2.0, *,
                 error_if_nonfinite: bool = False, per_param: bool = False):
        self.max_norm = _positive("ClipByNorm", "max_norm", max_norm)
        self.norm_type = _norm_type(norm_type)
        self.error_if_nonfinite = bool(error_if_nonfinite)
        self.per_param = bool(per_param)

    def __call__(self, grads):
        if not self.per_param:
            return clip_grad_norm(grads, self.max_norm, self.norm_type,
                                  self.error_if_nonfinite)[0]
        out = {}
        for pid, g in grads.items():
            n = _combine([_part(g, self.norm_type)], self.norm_type)
            coef = (self.max_norm / (n + 1e-6)).clamp_max(1.0)
            out[pid] = g * coef if coef.dtype is g.dtype else g * coef.cast(g.dtype)
        return _new_grads(grads, out)

    def __repr__(self):
        extra = "" if self.norm_type == 2.0 else f", norm_type={self.norm_type}"
        extra += ", per_param=True" if self.per_param else ""
        return f"ClipByNorm({self.max_norm}{extra})"


def _positive(who, name, v):
    try:
        v = float(v)
    except (TypeError, ValueError):
        raise ConfigError(f"{who}: {name} must be a number, got {type(v).__name__}") from None
    if not (v >= 0.0 and not math.isnan(v)):
        raise ConfigError(f"{who}: {name} must be >= 0, got {v}")
    return v


def _norm_type(p):
    try:
        p = float(p)
    except (TypeError, ValueError):
        raise ConfigError(f"clip: norm_type must be a number or inf, got {p!r}") from None
    if not p > 0.0:
        raise ConfigError(f"clip: norm_type must be > 0 (2, 1, any p, or inf), got {p}")
    return p
