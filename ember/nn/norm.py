"""Normalization layers: `BatchNorm`, `LayerNorm`, `GroupNorm`, `InstanceNorm`, `RmsNorm`.

BatchNorm keeps running statistics as buffers (Params with ``require_grad=False``). Modules
are values, but like Burn's ``RunningState`` the statistics must change during training: a
forward pass in training mode computes the new statistics and rebinds the module's
``running_mean``/``running_var`` attributes to new Params (same ids) holding them. Only
that module object changes — copies made earlier (``train()``, ``map``, ``deepcopy``) keep
their own statistics — and the statistics are detached, so gradients never flow into them.
"""
from __future__ import annotations

import ember as em
from ember.errors import ShapeError

from ._util import as_device, make_config, positive_int

__all__ = ["BatchNorm", "LayerNorm", "GroupNorm", "InstanceNorm", "RmsNorm",
           "BatchNormConfig", "LayerNormConfig", "GroupNormConfig", "InstanceNormConfig",
           "RmsNormConfig", "rms_norm", "instance_norm"]


def _ones(shape, device):
    return em.Param(em.ones(*shape, device=device))


def _zeros(shape, device, require_grad=True):
    return em.Param(em.zeros(*shape, device=device), require_grad=require_grad)


def rms_norm(x, normalized_shape, weight=None, eps: float = 1e-5):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the trailing dims ``normalized_shape``
    (f16/bf16 inputs are computed in f32)."""
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    ns = tuple(normalized_shape)
    k = len(ns)
    xs = tuple(x.shape)
    if k == 0 or k > len(xs) or xs[len(xs) - k:] != ns:
        raise ShapeError(f"rms_norm: normalized_shape {ns} must match the trailing dims of "
                         f"input {xs}")
    if weight is not None and tuple(weight.shape) != ns:
        raise ShapeError(f"rms_norm: weight {tuple(weight.shape)} must have the normalized "
                         f"shape {ns}")
    src = x.dtype
    xf = x.float() if src in (em.float16, em.bfloat16) else x
    dims = tuple(range(len(xs) - k, len(xs)))
    y = xf * ((xf * xf).mean(dims, keepdim=True) + float(eps)).rsqrt()
    if weight is not None:
        y = y * weight.cast(y.dtype)
    return y.cast(src)


def instance_norm(x, weight=None, bias=None, eps: float = 1e-5):
    """Normalize ``[N, C, *]`` over the spatial positions of each sample and channel, then
    scale and shift per channel."""
    if x.ndim < 3:
        raise ShapeError(f"instance_norm: expects an input [N, C, *spatial], got shape "
                         f"{tuple(x.shape)}")
    return em.group_norm(x, x.shape[1], weight, bias, eps)


class BatchNorm(em.Module):
    """Batch normalization of ``[N, C, *]`` (``[N, C]``, ``[N, C, L]``, ``[N, C, H, W]``: one
    class for 1-d and 2-d). In training the batch statistics normalize and the running ones
    move by ``momentum`` (rebinding this module's buffers, see the module docstring); in
    evaluation the running statistics normalize."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 affine: bool = True, *, device=None):
        self.num_features = positive_int("BatchNorm", "num_features", num_features)
        self.eps = float(eps)
        self.momentum = float(momentum)
        device = as_device(device)
        c = (num_features,)
        self.weight = _ones(c, device) if affine else None
        self.bias = _zeros(c, device) if affine else None
        self.running_mean = _zeros(c, device, require_grad=False)
        self.running_var = em.Param(em.ones(*c, device=device), require_grad=False)

    def forward(self, x):
        if x.ndim < 2 or x.shape[1] != self.num_features:
            raise ShapeError(f"BatchNorm: expects an input [N, {self.num_features}, *], got "
                             f"shape {tuple(x.shape)}")
        if not self.training:
            out, _, _ = em.batch_norm(x, self.running_mean, self.running_var, self.weight,
                                      self.bias, training=False, eps=self.eps)
            return out
        out, mean, var = em.batch_norm(x, self.running_mean, self.running_var, self.weight,
                                       self.bias, training=True, momentum=self.momentum,
                                       eps=self.eps)
        self.running_mean = self.running_mean.with_tensor(mean)
        self.running_var = self.running_var.with_tensor(var)
        return out

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.weight is not None}")


class LayerNorm(em.Module):
    """Normalizes over the trailing dims ``normalized_shape`` (an int for the last dim),
    then scales by ``weight`` (ones) and shifts by ``bias`` (zeros)."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, *, device=None):
        ns = (normalized_shape,) if isinstance(normalized_shape, int) \
            else tuple(normalized_shape)
        for n in ns:
            positive_int("LayerNorm", "normalized_shape", n)
        self.normalized_shape = ns
        self.eps = float(eps)
        device = as_device(device)
        self.weight = _ones(ns, device) if elementwise_affine else None
        self.bias = _zeros(ns, device) if elementwise_affine and bias else None

    def forward(self, x):
        return em.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, affine={self.weight is not None}"


class GroupNorm(em.Module):
    """Normalizes ``[N, C, *]`` over groups of ``num_channels / num_groups`` channels, then
    scales and shifts per channel."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True, *, device=None):
        self.num_groups = positive_int("GroupNorm", "num_groups", num_groups)
        self.num_channels = positive_int("GroupNorm", "num_channels", num_channels)
        if num_channels % num_groups:
            from ember.errors import ConfigError
            raise ConfigError(f"GroupNorm: num_groups {num_groups} must divide num_channels "
                              f"{num_channels}")
        self.eps = float(eps)
        device = as_device(device)
        self.weight = _ones((num_channels,), device) if affine else None
        self.bias = _zeros((num_channels,), device) if affine else None

    def forward(self, x):
        return em.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)


class InstanceNorm(em.Module):
    """Normalizes ``[N, C, *spatial]`` over the spatial positions of each sample and channel
    (no running statistics), then scales and shifts per channel when ``affine`` (the
    default, as Burn; PyTorch's default is ``affine=False``)."""

    def __init__(self, num_channels: int, eps: float = 1e-5, affine: bool = True, *,
                 device=None):
        self.num_channels = positive_int("InstanceNorm", "num_channels", num_channels)
        self.eps = float(eps)
        device = as_device(device)
        self.weight = _ones((num_channels,), device) if affine else None
        self.bias = _zeros((num_channels,), device) if affine else None

    def forward(self, x):
        return instance_norm(x, self.weight, self.bias, self.eps)


class RmsNorm(em.Module):
    """Root-mean-square normalization of the last dim (``d_model``):
    ``x / sqrt(mean(x^2) + eps) * weight``, ``weight`` starting at ones."""

    def __init__(self, d_model: int, eps: float = 1e-5, *, device=None):
        self.d_model = positive_int("RmsNorm", "d_model", d_model)
        self.eps = float(eps)
        self.weight = _ones((d_model,), as_device(device))

    def forward(self, x):
        return rms_norm(x, self.d_model, self.weight, self.eps)


BatchNormConfig = make_config(BatchNorm)
LayerNormConfig = make_config(LayerNorm)
GroupNormConfig = make_config(GroupNorm)
InstanceNormConfig = make_config(InstanceNorm)
RmsNormConfig = make_config(RmsNorm)
