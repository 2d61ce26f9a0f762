"""Activation functions of the Tensor API.

``sigmoid`` and ``relu`` are registry primitives, and so are ``softmax`` and ``log_softmax``
(ember/ops/nn.py, with backward primitives of their own); the rest are composites of
primitives, so autodiff (and later fusion) flows through them without rules of their own.
Composites are written so that no intermediate overflows, in the forward pass or in the
derivative (a ``where`` whose unused branch is ``inf`` would still give ``0 * inf = nan``
gradients).
"""
from __future__ import annotations

import math

from .. import dtype as dt
from ..errors import DTypeError, ShapeError
from ..ops import activation as A
from ..ops.nn import LOG_SOFTMAX as _LOG_SOFTMAX, SOFTMAX as _SOFTMAX
from ..ops.rules import canonical_dim, require_kind
from . import dispatch
from . import elementwise as _E  # where, from the elementwise family
from .dispatch import unary

__all__ = ["sigmoid", "relu", "leaky_relu", "prelu", "gelu", "silu", "log_sigmoid",
           "hard_sigmoid", "softplus", "mish", "elu", "selu", "celu", "softmax",
           "log_softmax", "softmin", "glu"]

_SIGMOID = A.SIGMOID
_RELU = A.RELU
_SQRT_2_PI = math.sqrt(2.0 / math.pi)
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946
_HALF = (dt.float16, dt.bfloat16)


def _cast_to(x, dtype):
    return x if x._dtype is dtype else x.cast(dtype)


def _float(op, x):
    if not isinstance(x, dispatch.Tensor):
        raise DTypeError(f"{op}: expects a Tensor, got {type(x).__name__}")
    d = x._dtype
    if d.kind != "float":
        require_kind(op, d, "float")


# -- primitives -----------------------------------------------------------------------------
def sigmoid(x):
    """The logistic function ``1 / (1 + exp(-x))``."""
    return unary(_SIGMOID, x)


def relu(x):
    """``max(x, 0)`` (float or int)."""
    return unary(_RELU, x)


# -- piecewise-linear family ----------------------------------------------------------------
def leaky_relu(x, negative_slope: float = 0.01):
    """``x`` for ``x > 0``, else ``negative_slope * x``."""
    _float("leaky_relu", x)
    return _E.where(x > 0, x, x * float(negative_slope))


def prelu(x, weight):
    """Leaky ReLU with a learned slope per channel: ``weight`` has one value, or one per
    channel (dim 1 of ``x``; inputs of fewer than 2 dims have one channel)."""
    _float("prelu", x)
    if not isinstance(weight, dispatch.Tensor):
        raise DTypeError(f"prelu: weight must be a Tensor, got {type(weight).__name__}")
    ws, xs = weight._shape, x._shape
    n = 1
    for s in ws:
        n *= s
    channels = xs[1] if len(xs) >= 2 else 1
    if len(ws) > 1 or (n != 1 and n != channels):
        raise ShapeError(f"prelu: weight of shape {ws} does not fit input {xs}: it must be 1-d "
                         f"with 1 or {channels} (the channels, dim 1) elements")
    if n == 1:
        w = weight.reshape(())
    else:
        w = weight.reshape((channels,) + (1,) * (len(xs) - 2))
    return _E.where(x > 0, x, x * w)


def hard_sigmoid(x, alpha: float = 0.2, beta: float = 0.5):
    """``clamp(alpha * x + beta, 0, 1)`` (Burn's definition)."""
    _float("hard_sigmoid", x)
    return (x * float(alpha) + float(beta)).clamp(0.0, 1.0)


# -- smooth family --------------------------------------------------------------------------
# Multi-step composites compute f16/bf16 inputs in f32 and round once at the end (as PyTorch's
# "opmath" does): intermediate roundings and overflows of the narrow types would otherwise
# add up. Fusion removes the casts' cost.
def _up(x):
    return x.cast(dt.float32) if x._dtype in _HALF else x


def gelu(x, approximate: str = "none"):
    """``x * Phi(x)`` with the normal CDF exact (``"none"``, via erf) or by the tanh
    approximation (``"tanh"``)."""
    _float("gelu", x)
    if approximate == "none":
        # one primitive (ember/ops/activation.py): its derivative keeps x only, where the
        # composite's kept three intermediates
        return unary(A.GELU, x)
    src = x._dtype
    x = _up(x)
    if approximate == "tanh":
        # tanh is exactly +-1 beyond |x| = 10, so clamping there changes no value and keeps
        # x**3 (and its derivative) finite for huge x
        xc = x.clamp(-10.0, 10.0)
        cdf = ((xc + xc * xc * xc * 0.044715) * _SQRT_2_PI).tanh()
    else:
        raise ShapeError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _cast_to((x * 0.5) * (cdf + 1.0), src)


def silu(x):
    """``x * sigmoid(x)`` (also called swish)."""
    _float("silu", x)
    return x * unary(_SIGMOID, x)


def _softplus_stable(y):
    # log(1 + exp(y)) = max(y, 0) + log1p(exp(-|y|)): exp never overflows
    return unary(_RELU, y) + (-y.abs()).exp().log1p()


def softplus(x, beta: float = 1.0, threshold: float = 20.0):
    """``log(1 + exp(beta * x)) / beta``, and ``x`` itself where ``beta * x > threshold``
    (as in PyTorch)."""
    _float("softplus", x)
    beta = float(beta)
    if beta == 0.0:
        raise ShapeError("softplus: beta must be nonzero")
    src = x._dtype
    x = _up(x)
    bx = x if beta == 1.0 else x * beta
    sp = _softplus_stable(bx)
    if beta != 1.0:
        sp = sp * (1.0 / beta)
    return _cast_to(_E.where(bx > float(threshold), x, sp), src)


def log_sigmoid(x):
    """``log(sigmoid(x)) = -softplus(-x)``, finite for large ``|x|``."""
    _float("log_sigmoid", x)
    return _cast_to(-_softplus_stable(-_up(x)), x._dtype)


def mish(x):
    """``x * tanh(softplus(x))``."""
    _float("mish", x)
    u = _up(x)
    return _cast_to(u * _softplus_stable(u).tanh(), x._dtype)


def _expm1_neg(x):
    # expm1 of the non-positive part only: the unused branch of a where stays finite
    return x.clamp(max=0.0).expm1()


def elu(x, alpha: float = 1.0):
    """``x`` for ``x > 0``, else ``alpha * (exp(x) - 1)``."""
    _float("elu", x)
    return _E.where(x > 0, x, _expm1_neg(x) * float(alpha))


def selu(x):
    """``scale * elu(x, alpha)`` with the self-normalizing constants."""
    _float("selu", x)
    u = _up(x)
    out = _E.where(u > 0, u * _SELU_SCALE, _expm1_neg(u) * (_SELU_ALPHA * _SELU_SCALE))
    return _cast_to(out, x._dtype)


def celu(x, alpha: float = 1.0):
    """``x`` for ``x > 0``, else ``alpha * (exp(x / alpha) - 1)``."""
    _float("celu", x)
    alpha = float(alpha)
    if alpha == 0.0:
        raise ShapeError("celu: alpha must be nonzero")
    u = _up(x)
    out = _E.where(u > 0, u, (u.clamp(max=0.0) * (1.0 / alpha)).expm1() * alpha)
    return _cast_to(out, x._dtype)


# -- normalized over a dim ------------------------------------------------------------------
# softmax and log_softmax are registry primitives (ember/ops/nn.py), forward and backward:
# one op each way instead of a composite of about seven forward and a dozen backward. They
# compute f16/bf16 in f32 and round once, as the composite did.


def _along(op, x, dim):
    """The canonical dim of ``x`` (0-d inputs are viewed as 1-d) and ``x`` as the primitive
    takes it."""
    _float(op, x)
    dim = canonical_dim(op, dim, len(x._shape))
    if not x._shape:
        x = x.reshape(1)
    return x, dim


def _normalized(prim, op, x, dim):
    shape = x._shape
    x, dim = _along(op, x, dim)
    if x.numel() == 0:
        return x.reshape(shape)
    out = unary(prim, x, {"dim": dim})
    return out if shape else out.reshape(shape)


def softmax(x, dim: int):
    """``exp(x) / sum(exp(x))`` along ``dim``, computed stably."""
    return _normalized(_SOFTMAX, "softmax", x, dim)


def log_softmax(x, dim: int):
    """``x - log(sum(exp(x)))`` along ``dim``, computed stably."""
    return _normalized(_LOG_SOFTMAX, "log_softmax", x, dim)


def softmin(x, dim: int):
    """``softmax(-x)`` along ``dim``."""
    _float("softmin", x)
    return softmax(-x, dim)


def glu(x, dim: int = -1):
    """Gated linear unit: ``x`` split in halves ``a, b`` along ``dim`` gives
    ``a * sigmoid(b)``."""
    _float("glu", x)
    if not x._shape:
        raise ShapeError("glu: needs at least 1 dim, got a 0-d tensor")
    dim = canonical_dim("glu", dim, len(x._shape))
    n = x._shape[dim]
    if n % 2:
        raise ShapeError(f"glu: dim {dim} of shape {x._shape} has odd size {n}; it must be "
                         f"even to split in halves")
    h = n // 2
    return x.narrow(dim, 0, h) * unary(_SIGMOID, x.narrow(dim, h, h))


class ActivationMethods:
    __slots__ = ()
    sigmoid = sigmoid
    relu = relu
    leaky_relu = leaky_relu
    prelu = prelu
    gelu = gelu
    silu = silu
    log_sigmoid = log_sigmoid
    hard_sigmoid = hard_sigmoid
    softplus = softplus
    mish = mish
    elu = elu
    selu = selu
    celu = celu
    softmax = softmax
    log_softmax = log_softmax
    softmin = softmin
    glu = glu
