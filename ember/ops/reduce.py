"""Reductions over dims: sum, mean, prod, max, min, arg-reductions, any/all, scans.

Attributes are canonical: ``dims`` is a sorted tuple of non-negative dims (the Tensor API
normalizes them), ``keepdim`` a bool.
"""
from __future__ import annotations

import numpy as np

from .. import dtype as dt
from .registry import declare
from .rules import require_kind


def reduced_shape(shape, dims, keepdim):
    if keepdim:
        return tuple(1 if i in dims else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in dims)


def reduce_infer(name, kinds="float int bool", out=None):
    def infer(x, dims, keepdim):
        if x._dtype.kind not in kinds:
            require_kind(name, x._dtype, kinds)
        d = out(x._dtype) if callable(out) else (out or x._dtype)
        return (reduced_shape(x._shape, dims, keepdim), d)
    return infer


def grad_to_input(g, x_shape, dims, keepdim):
    """A gradient of a reduced shape, broadcast back over the reduced dims."""
    if not keepdim:
        g = g.reshape(reduced_shape(x_shape, dims, True))
    return g.expand(x_shape)


def _sum_dtype(d):
    return dt.int64 if d.kind == "bool" else d


SUM = declare(
    "sum", "reduce", nin=1, attrs=("dims", "keepdim"),
    infer=reduce_infer("sum", out=_sum_dtype),
    numpy=lambda x, dims, keepdim: np.sum(x, axis=dims, keepdims=keepdim),
    vjp=lambda g, i, o, dims, keepdim: (grad_to_input(g, i[0]._shape, dims, keepdim),),
    doc="sum over dims (bool sums count as i64)")
