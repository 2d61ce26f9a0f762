"""A linear layer as one primitive each way: ``linear`` and ``linear_backward``.

``linear(x, weight, [bias], has_bias)`` is ``x @ weight + bias`` over ``x [..., in]``,
``weight [in, out]`` and ``bias [out]`` of one float dtype (at least 2 dims of x; the Tensor
API's `ember.linear` runs the composite for anything else). Its ``decompose`` is that
composite, ``matmul`` then ``add``, which Fusion records -- the bias add fuses with what
follows, as before. What the primitive changes is the derivative: one
``linear_backward(g, x, weight, need_x, has_bias)`` op giving ``[dx] + [dweight] + [dbias]``
(as the flags say) where the composite's rules took five or six ops -- the input's product,
the rows of x and g flattened, the weight's product, the bias's sum, a reshape -- each a
trip through the Tensor API, Autodiff and Fusion on a host-bound training step (a GPT step
has 37 linear layers). Its ``decompose`` is those ops, for a backend below Fusion that does
not list it in ``Backend.fused_ops``; NdArray lists it (two NumPy products and a sum, one op)
and so does the Cuda backend (two cuBLAS products and one column-sum kernel).

The operations are the composite's: ``dx = g @ weight^T``, ``dweight = x^T g`` over all the
rows of x at once, ``dbias = sum(g)`` over the leading dims (``sum``'s rules: f16/bf16
accumulate in f32 and round once), each in the matmul primitive's precision (f16/bf16
products accumulate in f32).
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import AutodiffError, DTypeError, ShapeError
from ._api import run_op
from .linalg import _matmul_numpy, matmul_t
from .reduce import SUM
from .registry import declare
from .rules import numel, require_kind

_OP, _BWD = "linear", "linear_backward"


def misfit(op, x, weight, bias):
    """Why Tensors ``x``, ``weight``, ``bias`` (or None) are not what ``op`` takes -- one
    float dtype, x of at least 2 dims ending in ``in``, weight ``[in, out]``, bias ``[out]``
    -- as the error to raise, or None."""
    d = x._dtype
    for t, what in ((x, "input x"), (weight, "weight"), (bias, "bias")):
        if t is None:
            continue
        if t._dtype.kind != "float":
            try:
                require_kind(op, t._dtype, "float", f"the {what}")
            except DTypeError as e:
                return e
        if t._dtype is not d:
            return DTypeError(f"{op}: the {what} is {t._dtype.short}, the input x {d.short}; "
                              f"they must share one float dtype")
    xs, ws = x._shape, weight._shape
    if len(ws) != 2 or len(xs) < 2 or xs[-1] != ws[0]:
        return ShapeError(f"{op}: input x {xs} and weight {ws} must be [..., in] (at least 2 "
                          f"dims) and [in, out]")
    if bias is not None and bias._shape != (ws[1],):
        return ShapeError(f"{op}: bias has shape {bias._shape}; weight {ws} needs "
                          f"({ws[1]},)")
    return None


def fits(x, weight, bias) -> bool:
    """Whether the primitive takes these Tensors (`misfit`); `ember.linear` runs the
    composite otherwise, which promotes and broadcasts."""
    return misfit(_OP, x, weight, bias) is None


def _check(op, x, weight, bias, has_bias):
    if type(has_bias) is not bool:
        raise DTypeError(f"{op}: has_bias must be a bool, got {type(has_bias).__name__} "
                         f"{has_bias!r}")
    if (bias is not None) != has_bias:
        raise ShapeError(f"{op}: has_bias={has_bias} asks for {int(has_bias)} bias input"
                         f"{'' if has_bias else 's'}, got {int(bias is not None)}")
    for t, what in ((x, "input x"), (weight, "weight"), (bias, "bias")):
        if t is not None and not hasattr(t, "_shape"):
            raise DTypeError(f"{op}: expects a Tensor as the {what}, got {type(t).__name__}")
    err = misfit(op, x, weight, bias)
    if err is not None:
        raise err


def out_meta(x, weight):
    """The product's (shape, dtype) for inputs the primitive takes (`fits`)."""
    return (x._shape[:-1] + (weight._shape[1],), x._dtype)


def _infer(x, weight, *bias, has_bias):
    _check(_OP, x, weight, bias[0] if bias else None, has_bias)
    return out_meta(x, weight)


def _numpy(x, weight, *bias, has_bias, xp=np):
    out = _matmul_numpy(x, weight, xp=xp)
    return xp.add(out, bias[0]) if has_bias else out


def _decompose(x, weight, *bias, has_bias):
    out = matmul_t(x, weight)
    return out + bias[0] if has_bias else out


def _vjp(g, inputs, out, has_bias, needs):
    x, w = inputs[0], inputs[1]
    need_b = has_bias and needs[2]
    if not needs[1]:                  # no weight gradient: dx and dbias as Tensor ops
        dx = matmul_t(g, w, tb=True) if needs[0] else None
        db = _bias_grad(g) if need_b else None
        return (dx, None) + ((db,) if has_bias else ())
    res = run_op(LINEAR_BACKWARD, (g, x, w), need_x=bool(needs[0]), has_bias=need_b)
    dx = res[0] if needs[0] else None
    dw = res[1 if needs[0] else 0]
    db = res[-1] if need_b else None
    return (dx, dw) + ((db,) if has_bias else ())


LINEAR = declare(
    _OP, "matmul", nin=3, attrs=("has_bias",), infer=_infer, numpy=_numpy, vjp=_vjp,
    vjp_needs=True, decompose=_decompose,
    doc="x @ weight + bias over x [..., in] (at least 2 dims), weight [in, out], bias [out] "
        "(as has_bias says) of one float dtype; its derivative is linear_backward")


# -- linear_backward -------------------------------------------------------------------------
def _bias_grad(g):
    """``g`` summed over its leading dims (the bias's gradient)."""
    return run_op(SUM, (g,), dims=tuple(range(len(g._shape) - 1)), keepdim=False)


def _flat_rows(t):
    s = t._shape
    return t.reshape((numel(s[:-1]), s[-1]))


def _bwd_infer(g, x, weight, need_x, has_bias):
    for name, v in (("need_x", need_x), ("has_bias", has_bias)):
        if type(v) is not bool:
            raise DTypeError(f"{_BWD}: {name} must be a bool, got {type(v).__name__} {v!r}")
    _check(_BWD, x, weight, None, False)
    if not hasattr(g, "_shape"):
        raise DTypeError(f"{_BWD}: expects a Tensor as the output gradient g, got "
                         f"{type(g).__name__}")
    want = x._shape[:-1] + (weight._shape[1],)
    if g._shape != want:
        raise ShapeError(f"{_BWD}: the output gradient g has shape {g._shape}; input x "
                         f"{x._shape} and weight {weight._shape} give outputs of {want}")
    if g._dtype is not x._dtype:
        raise DTypeError(f"{_BWD}: the output gradient g is {g._dtype.short}, the input x "
                         f"{x._dtype.short}; they must share one float dtype")
    d = x._dtype
    metas = [(x._shape, d)] if need_x else []
    metas.append((weight._shape, d))
    if has_bias:
        metas.append(((weight._shape[1],), d))
    return metas


def _bwd_numpy(g, x, weight, *, need_x, has_bias, xp=np):
    out = []
    if need_x:
        out.append(_matmul_numpy(g, weight, tb=True, xp=xp))
    rows = math.prod(x.shape[:-1])
    g2 = g.reshape(rows, g.shape[-1])
    out.append(_matmul_numpy(x.reshape(rows, x.shape[-1]), g2, ta=True, xp=xp))
    if has_bias:
        out.append(SUM.numpy(g2, dims=(0,), keepdim=False, xp=xp))
    return tuple(out)


def _bwd_decompose(g, x, weight, *, need_x, has_bias):
    out = [matmul_t(g, weight, tb=True)] if need_x else []
    out.append(matmul_t(_flat_rows(x), _flat_rows(g), ta=True))
    if has_bias:
        out.append(_bias_grad(g))
    return tuple(out)


def _bwd_vjp(g, inputs, out, **attrs):
    raise AutodiffError(f"{_BWD} has no derivative: a linear layer is differentiated once "
                        f"(this op is its derivative); second derivatives are not supported")


LINEAR_BACKWARD = declare(
    _BWD, "matmul", nin=3, attrs=("need_x", "has_bias"), infer=_bwd_infer, numpy=_bwd_numpy,
    vjp=_bwd_vjp, nout=3, decompose=_bwd_decompose,
    doc="a linear layer's gradients from g (the output's): [dx = g @ weight^T if need_x], "
        "dweight = x^T g over all rows, [dbias = sum(g) over the leading dims if has_bias]")

__all__ = ["LINEAR", "LINEAR_BACKWARD", "fits", "misfit", "out_meta"]
