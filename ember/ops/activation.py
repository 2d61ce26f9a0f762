"""Activation primitives: the ones a composite cannot do as well.

``sigmoid`` is a primitive for stability (no overflow of ``exp`` for large ``|x|``) and a
cheap derivative from its output; ``relu`` for speed; the exact ``gelu`` for what its
derivative keeps: as a composite (five ops) autodiff saved three intermediates of the size
of its input for the backward pass -- written by the forward kernel, read by the backward
one, on a transformer's widest activations --, as a primitive it keeps only the input, and
``gelu_backward`` recomputes the rest in one pass. Every other activation is a composite in
``ember/tensor/activation.py``.
"""
from __future__ import annotations

import numpy as np

import math

from .. import dtype as dt
from ..kernel import lower_ops as L
from ._api import api, run_op
from .registry import declare
from .elementwise import binary, erf_f64, unary_infer

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


# -- gelu (exact) ---------------------------------------------------------------------------
#: 1/sqrt(2) and 1/sqrt(2 pi), as Python floats (weak scalars: the tensor's dtype)
SQRT1_2 = 1.0 / math.sqrt(2.0)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _compute(x):
    """``x`` in its compute dtype (f16/bf16 in f32, rounded once at the end, as PyTorch's
    opmath) and that dtype."""
    ct = _F32 if x.dtype in _HALF else x.dtype
    return x.astype(ct, copy=False), ct.type


def _erf(t, ct):
    return erf_f64(t).astype(ct, copy=False)


def _gelu_numpy(x, *, xp=np):
    """``(x * 0.5) * (erf(x * (1/sqrt 2)) + 1)``, each operation rounded to the compute dtype
    (the composite's order: the same bits)."""
    src = x.dtype
    xc, ct = _compute(x)
    y = (xc * ct(0.5)) * (_erf(xc * ct(SQRT1_2), ct) + ct(1.0))
    return y.astype(src, copy=False)


def _gelu_backward_numpy(g, x, *, xp=np):
    """``g * (cdf + x * pdf)``: ``cdf = 0.5 * (erf(x / sqrt 2) + 1)``, ``pdf = exp(-x^2 / 2)
    / sqrt(2 pi)``. A Python scalar operand takes the other's dtype (NumPy's weak scalar)."""
    src = (x if isinstance(x, np.ndarray) else g).dtype
    xc, ct = _compute(np.asarray(x, src))
    gc = np.asarray(g, src).astype(xc.dtype, copy=False)
    cdf = ct(0.5) * (_erf(xc * ct(SQRT1_2), ct) + ct(1.0))
    pdf = np.exp((xc * xc) * ct(-0.5)) * ct(INV_SQRT_2PI)
    return (gc * (cdf + xc * pdf)).astype(src, copy=False)


def _f32(e):
    """An expression in its compute dtype without an f16 hint (the references compute f16
    and bf16 in f32 and round once, as the composite's cast to f32 did)."""
    return L.w(e) if L.w(e).dtype is dt.float64 else L.cast(e, dt.float32)


def _gelu_expr(x):
    x = _f32(x)
    erf = L.mathfn("erf")(L.mul(x, L.k(SQRT1_2, x)))
    return L.mul(L.mul(x, L.k(0.5, x)), L.add(erf, L.k(1.0, x)))


def _gelu_backward_expr(g, x):
    g, x = _f32(g), _f32(x)
    erf = L.mathfn("erf")(L.mul(x, L.k(SQRT1_2, x)))
    cdf = L.mul(L.k(0.5, x), L.add(erf, L.k(1.0, x)))
    pdf = L.mul(L.mathfn("exp")(L.mul(L.mul(x, x), L.k(-0.5, x))), L.k(INV_SQRT_2PI, x))
    return L.mul(g, L.add(cdf, L.mul(x, pdf)))


def _gelu_backward_vjp(gg, i, o):
    # d/dg: gelu's derivative again; d/dx: g * gelu''(x) = g * pdf * (2 - x^2)
    g, x = i
    up = x._dtype in (dt.float16, dt.bfloat16)
    xc = x.cast(dt.float32) if up else x
    pdf = ((xc * xc) * -0.5).exp() * INV_SQRT_2PI
    dx = gg.cast(xc._dtype) * g.cast(xc._dtype) * pdf * (2.0 - xc * xc)
    return (run_op(GELU_BACKWARD, (gg, x)), dx.cast(x._dtype) if up else dx)


GELU = declare(
    "gelu", "unary", nin=1, infer=unary_infer("gelu", "float"), numpy=_gelu_numpy,
    vjp=lambda g, i, o: (run_op(GELU_BACKWARD, (g, i[0])),), expr=_gelu_expr,
    doc="x * Phi(x) with the normal CDF exact: (x * 0.5) * (erf(x / sqrt 2) + 1); its "
        "derivative keeps only x (gelu_backward)")

GELU_BACKWARD = binary(
    "gelu_backward", _gelu_backward_numpy, _gelu_backward_vjp, kinds="float",
    expr=_gelu_backward_expr,
    doc="gelu's input gradient: g * (cdf(x) + x * pdf(x)), one pass from g and x")
