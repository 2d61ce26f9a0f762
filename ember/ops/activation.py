"""Activation primitives: the ones a composite cannot do as well.

``sigmoid`` is a primitive for stability (no overflow of ``exp`` for large ``|x|``) and a
cheap derivative from its output; ``relu`` for speed. Every other activation is a composite
in ``ember/tensor/activation.py``.
"""
from __future__ import annotations

import numpy as np

from .. import dtype as dt
from ..kernel import lower_ops as L
from ._api import api, run_op
from .registry import declare
from .elementwise import binary, unary_infer

_F32 = np.dtype(np.float32)
_HALF = (np.dtype(np.float16), dt.bfloat16.np)


def _sigmoid_numpy(x, *, xp=np):
    """``exp(min(x, 0)) / (1 + exp(-|x|))``: equal to 1 / (1 + exp(-x)), but no ``exp``
    overflows and tiny results keep their relative accuracy (down to subnormals). f16/bf16
    are computed in f32 and rounded once."""
    x = xp.asarray(x)
    src = x.dtype
    if src in _HALF:
        x = x.astype(_F32)
    num = xp.empty(x.shape, x.dtype)
    den = xp.empty(x.shape, x.dtype)
    xp.minimum(x, 0, out=num)
    xp.exp(num, out=num)
    xp.abs(x, out=den)
    xp.negative(den, out=den)
    xp.exp(den, out=den)
    xp.add(den, 1, out=den)
    xp.divide(num, den, out=num)
    return num.astype(src, copy=False)


SIGMOID = declare(
    "sigmoid", "unary", nin=1, infer=unary_infer("sigmoid", "float"), numpy=_sigmoid_numpy,
    vjp=lambda g, i, o: (g * o * (1.0 - o),), expr=L.sigmoid,
    doc="logistic function 1 / (1 + exp(-x)), stable for large |x|")


def _relu_numpy(x, *, xp=np):
    # NaN propagates (as in PyTorch); ints keep their dtype (the 0 is a weak scalar)
    return xp.maximum(x, x.dtype.type(0))


def _relu_vjp(g, i, o):
    return (run_op(RELU_BACKWARD, (g, i[0])),)


RELU = declare(
    "relu", "unary", nin=1, infer=unary_infer("relu", "float int"), numpy=_relu_numpy,
    vjp=_relu_vjp, expr=L.relu, doc="max(x, 0); its derivative is taken as 0 at x = 0")


def _relu_backward_numpy(g, x, *, xp=np):
    # a multiply by the mask, not a where: NumPy's where is ~10x slower than a multiply (and
    # g * 0 keeps the sign of zero and NaN, as the chain rule's product does)
    return g * (x > 0)


def _relu_backward_vjp(gg, i, o):
    # linear in g with the same mask; piecewise constant in x: a zero gradient, as for the
    # other piecewise-constant ops (and PyTorch's threshold_backward)
    x = i[1]
    return (run_op(RELU_BACKWARD, (gg, x)), api.zeros_like(x) if hasattr(x, "_shape") else None)


def _relu_backward_expr(g, x):
    return L.mul(g, L.sel(L.cmp("gt", x, L.k(0, x)), L.k(1, g), L.k(0, g)))


RELU_BACKWARD = binary(
    "relu_backward", _relu_backward_numpy, _relu_backward_vjp, kinds="float",
    expr=_relu_backward_expr,
    doc="relu's input gradient: g * (x > 0), one pass (the mask's compare, cast and multiply "
        "as three ops were three passes and dispatches)")
