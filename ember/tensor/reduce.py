"""Reductions of the Tensor API."""
from __future__ import annotations

from ..ops import reduce as R
from ..ops.rules import canonical_dims
from .dispatch import unary


def sum(x, dim=None, keepdim: bool = False):
    """Sum over ``dim`` (an int, a sequence of ints, or None for all dims)."""
    return unary(R.SUM, x, {"dims": canonical_dims("sum", dim, len(x._shape)),
                            "keepdim": bool(keepdim)})


def sum_dim(x, dim: int, keepdim: bool = True):
    """Burn's ``sum_dim``: sum along one dim, keeping it as size 1."""
    return sum(x, dim, keepdim)


def mean(x, dim=None, keepdim: bool = False):
    dims = canonical_dims("mean", dim, len(x._shape))
    n = 1
    for d in dims:
        n *= x._shape[d]
    s = sum(x if x._dtype.is_float else x.float(), dims, keepdim)
    return s * (1.0 / n) if n else s * float("nan")


def sum_to_shape(x, shape):
    """Sum a broadcast result back to ``shape`` (the inverse of broadcasting)."""
    shape = tuple(shape)
    if x._shape == shape:
        return x
    lead = len(x._shape) - len(shape)
    dims = list(range(lead))
    for i, s in enumerate(shape):
        if s == 1 and x._shape[lead + i] != 1:
            dims.append(lead + i)
    return sum(x, dims, keepdim=True).reshape(shape) if dims else x.reshape(shape)


class ReduceMethods:
    __slots__ = ()
    sum = sum
    sum_dim = sum_dim
    mean = mean
