"""Activation modules: each one calls the Tensor API's function of the same name (see
`ember.nn.functional`). Only `Prelu` has a param (its learned slope)."""
from __future__ import annotations

import ember as em

from ._util import as_device, make_config, positive_int

__all__ = ["Relu", "Gelu", "Silu", "Sigmoid", "Tanh", "LeakyRelu", "Prelu", "Elu", "Selu",
           "Celu", "Softplus", "Mish", "HardSigmoid", "HardSwish", "LogSigmoid", "Softmax",
           "LogSoftmax", "Softmin", "Glu", "SwiGlu", "PreluConfig", "SwiGluConfig", "GeluConfig",
           "LeakyReluConfig", "EluConfig", "CeluConfig", "SoftplusConfig", "HardSigmoidConfig",
           "SoftmaxConfig", "LogSoftmaxConfig", "GluConfig"]


class Relu(em.Module):
    """``max(x, 0)``."""

    def forward(self, x):
        return em.relu(x)


class Gelu(em.Module):
    """``x * Phi(x)``; ``approximate="tanh"`` for the tanh approximation."""

    def __init__(self, approximate: str = "none"):
        self.approximate = approximate

    def forward(self, x):
        return em.gelu(x, self.approximate)


class Silu(em.Module):
    """``x * sigmoid(x)`` (swish)."""

    def forward(self, x):
        return em.silu(x)


class Sigmoid(em.Module):
    def forward(self, x):
        return em.sigmoid(x)


class Tanh(em.Module):
    def forward(self, x):
        return em.tanh(x)


class LeakyRelu(em.Module):
    """``x`` for ``x > 0``, else ``negative_slope * x``."""

    def __init__(self, negative_slope: float = 0.01):
        self.negative_slope = float(negative_slope)

    def forward(self, x):
        return em.leaky_relu(x, self.negative_slope)


class Prelu(em.Module):
    """Leaky ReLU with a learned slope ``weight``: one shared value (``num_parameters=1``)
    or one per channel (dim 1 of the input), starting at ``alpha`` (Burn's name; PyTorch's
    ``init``)."""

    def __init__(self, num_parameters: int = 1, alpha: float = 0.25, *, device=None):
        self.num_parameters = positive_int("Prelu", "num_parameters", num_parameters)
        self.weight = em.Param(em.full((num_parameters,), float(alpha),
                                       device=as_device(device)))

    def forward(self, x):
        return em.prelu(x, self.weight)


class Elu(em.Module):
    def __init__(self, alpha: float = 1.0):
        self.alpha = float(alpha)

    def forward(self, x):
        return em.elu(x, self.alpha)


class Selu(em.Module):
    def forward(self, x):
        return em.selu(x)


class Celu(em.Module):
    def __init__(self, alpha: float = 1.0):
        self.alpha = float(alpha)

    def forward(self, x):
        return em.celu(x, self.alpha)


class Softplus(em.Module):
    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        self.beta = float(beta)
        self.threshold = float(threshold)

    def forward(self, x):
        return em.softplus(x, self.beta, self.threshold)


class Mish(em.Module):
    def forward(self, x):
        return em.mish(x)


class HardSigmoid(em.Module):
    """``clamp(alpha * x + beta, 0, 1)``; Burn's defaults (0.2, 0.5). PyTorch's
    ``Hardsigmoid`` is ``alpha=1/6``."""

    def __init__(self, alpha: float = 0.2, beta: float = 0.5):
        self.alpha = float(alpha)
        self.beta = float(beta)

    def forward(self, x):
        return em.hard_sigmoid(x, self.alpha, self.beta)


class HardSwish(em.Module):
    """``x * clamp(x / 6 + 1/2, 0, 1)`` (PyTorch's Hardswish)."""

    def forward(self, x):
        return x * em.hard_sigmoid(x, 1.0 / 6.0, 0.5)


class LogSigmoid(em.Module):
    def forward(self, x):
        return em.log_sigmoid(x)


class Softmax(em.Module):
    def __init__(self, dim: int = -1):
        self.dim = int(dim)

    def forward(self, x):
        return em.softmax(x, self.dim)


class LogSoftmax(em.Module):
    def __init__(self, dim: int = -1):
        self.dim = int(dim)

    def forward(self, x):
        return em.log_softmax(x, self.dim)


class Softmin(em.Module):
    def __init__(self, dim: int = -1):
        self.dim = int(dim)

    def forward(self, x):
        return em.softmin(x, self.dim)


class Glu(em.Module):
    """Gated linear unit: halves ``a, b`` of ``dim`` give ``a * sigmoid(b)``."""

    def __init__(self, dim: int = -1):
        self.dim = int(dim)

    def forward(self, x):
        return em.glu(x, self.dim)


class SwiGlu(em.Module):
    """``silu(x @ W_gate + b) * (x @ W + b)`` (two Linear layers, Burn's SwiGlu)."""

    def __init__(self, d_input: int, d_output: int, bias: bool = False, *, device=None,
                 initializer=None):
        from .linear import Linear
        self.linear_inner = Linear(d_input, d_output, bias, device=device,
                                   initializer=initializer)
        self.linear_outer = Linear(d_input, d_output, bias, device=device,
                                   initializer=initializer)

    def forward(self, x):
        return em.silu(self.linear_inner(x)) * self.linear_outer(x)


PreluConfig = make_config(Prelu)
SwiGluConfig = make_config(SwiGlu)
GeluConfig = make_config(Gelu)
LeakyReluConfig = make_config(LeakyRelu)
EluConfig = make_config(Elu)
CeluConfig = make_config(Celu)
SoftplusConfig = make_config(Softplus)
HardSigmoidConfig = make_config(HardSigmoid)
SoftmaxConfig = make_config(Softmax)
LogSoftmaxConfig = make_config(LogSoftmax)
GluConfig = make_config(Glu)
