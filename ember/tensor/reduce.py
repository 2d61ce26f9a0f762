"""Reductions, scans and sorts of the Tensor API.

``dim`` arguments take an int, a sequence of ints or None (every dim) where several dims make
sense, and one int otherwise; negative dims count from the end. A 0-d tensor accepts dim 0 or
-1 and reduces over nothing.

Result dtypes: ``sum``/``prod``/``cumsum``/``cumprod`` keep the dtype (bool gives i64; ints
wrap around); ``mean``/``var``/``std``/``logsumexp`` give floats (int and bool inputs give
f32); ``max``/``min``/``cummax``/``cummin``/``sort``/``topk`` keep the dtype; indices are
i64; ``any``/``all`` give bool.
"""
from __future__ import annotations

from .. import dtype as dt
from ..ops import reduce as R
from ..ops import sort as S
from ..ops import view as V
from ..ops.rules import canonical_dim, canonical_dims
from .dispatch import apply, unary

__all__ = ["sum", "sum_dim", "mean", "mean_dim", "prod", "prod_dim", "max", "min",
           "max_dim", "min_dim", "max_dim_with_indices", "min_dim_with_indices", "argmax",
           "argmin", "any", "all", "max_abs", "var", "std", "var_mean", "std_mean",
           "logsumexp", "cumsum", "cumprod", "cummax", "cummin", "sort", "sort_with_indices",
           "argsort", "topk"]

_LOW = (dt.float16, dt.bfloat16)
_INF = float("inf")


def _dims(op, x, dim):
    """Canonical dims of ``x`` (a sorted tuple; empty for a 0-d tensor)."""
    n = len(x._shape)
    if n == 0:
        if dim is not None:
            canonical_dims(op, dim, 0)          # still validates the dims
        return ()
    return canonical_dims(op, dim, n)


def _dim(op, x, dim):
    return canonical_dim(op, dim, len(x._shape))


def _count(x, dims):
    n = 1
    for d in dims:
        n *= x._shape[d]
    return n


def _reduce(op, x, dim, keepdim):
    return unary(op, x, {"dims": _dims(op.name, x, dim), "keepdim": bool(keepdim)})


# -- sums and products ----------------------------------------------------------------------
def sum(x, dim=None, keepdim: bool = False):
    """Sum over ``dim``; keeps the dtype (bool gives i64); 0 over no elements."""
    return _reduce(R.SUM, x, dim, keepdim)


def sum_dim(x, dim: int, keepdim: bool = True):
    """Burn's ``sum_dim``: sum along one dim, keeping it as size 1."""
    return sum(x, dim, keepdim)


def prod(x, dim=None, keepdim: bool = False):
    """Product over ``dim``; keeps the dtype (bool gives i64); 1 over no elements. The
    gradient is exact with zeros in the input."""
    return _reduce(R.PROD, x, dim, keepdim)


def prod_dim(x, dim: int, keepdim: bool = True):
    """Burn's ``prod_dim``: product along one dim, keeping it as size 1."""
    return prod(x, dim, keepdim)


def _float_of(x):
    """``x`` as the float dtype statistics are computed in (f16/bf16 in f32), and the
    result dtype."""
    d = x._dtype
    if d.kind != "float":
        return x.cast(dt.DEFAULT_FLOAT), dt.DEFAULT_FLOAT
    if d in _LOW:
        return x.cast(dt.float32), d
    return x, d


def _mean(xf, dims, keepdim):
    n = _count(xf, dims)
    s = sum(xf, dims, keepdim)
    return s * (1.0 / n) if n else s * float("nan")


def mean(x, dim=None, keepdim: bool = False):
    """Mean over ``dim``: a float (int and bool inputs give f32; f16/bf16 accumulate in f32);
    NaN over no elements, as NumPy."""
    dims = _dims("mean", x, dim)
    xf, out = _float_of(x)
    return _mean(xf, dims, keepdim).cast(out)


def mean_dim(x, dim: int, keepdim: bool = True):
    """Burn's ``mean_dim``: mean along one dim, keeping it as size 1."""
    return mean(x, dim, keepdim)


# -- extremes -------------------------------------------------------------------------------
def max(x, dim=None, keepdim: bool = False):
    """Maximum over ``dim``; keeps the dtype; NaN propagates. Reducing a size-0 dim raises
    ShapeError. Tied maxima share the gradient evenly."""
    return _reduce(R.MAX, x, dim, keepdim)


def min(x, dim=None, keepdim: bool = False):
    """Minimum over ``dim``; keeps the dtype; NaN propagates. Reducing a size-0 dim raises
    ShapeError. Tied minima share the gradient evenly."""
    return _reduce(R.MIN, x, dim, keepdim)


def max_dim(x, dim: int, keepdim: bool = True):
    """Burn's ``max_dim``: maximum along one dim, keeping it as size 1."""
    return max(x, dim, keepdim)


def min_dim(x, dim: int, keepdim: bool = True):
    """Burn's ``min_dim``: minimum along one dim, keeping it as size 1."""
    return min(x, dim, keepdim)


def max_dim_with_indices(x, dim: int, keepdim: bool = False):
    """(values, i64 indices) of the maximum along ``dim``; the first index on ties, which
    gets the whole gradient."""
    return apply(R.MAX_DIM_WITH_INDICES, (x,),
                 {"dim": _dim("max_dim_with_indices", x, dim), "keepdim": bool(keepdim)})


def min_dim_with_indices(x, dim: int, keepdim: bool = False):
    """(values, i64 indices) of the minimum along ``dim``; the first index on ties, which
    gets the whole gradient."""
    return apply(R.MIN_DIM_WITH_INDICES, (x,),
                 {"dim": _dim("min_dim_with_indices", x, dim), "keepdim": bool(keepdim)})


def argmax(x, dim=None, keepdim: bool = False):
    """i64 index of the maximum along ``dim`` (into the flattened tensor for None); the
    first on ties, as NumPy and PyTorch; NaN counts as the maximum."""
    d = None if dim is None else _dim("argmax", x, dim)
    return unary(R.ARGMAX, x, {"dim": d, "keepdim": bool(keepdim)})


def argmin(x, dim=None, keepdim: bool = False):
    """i64 index of the minimum along ``dim`` (into the flattened tensor for None); the
    first on ties; NaN counts as the minimum."""
    d = None if dim is None else _dim("argmin", x, dim)
    return unary(R.ARGMIN, x, {"dim": d, "keepdim": bool(keepdim)})


def max_abs(x, dim=None, keepdim: bool = False):
    """Maximum of ``|x|`` over ``dim``; keeps the dtype."""
    if x._dtype.kind == "bool":
        return max(x, dim, keepdim)
    return max(x.abs(), dim, keepdim)


# -- logic ----------------------------------------------------------------------------------
def any(x, dim=None, keepdim: bool = False):
    """Whether any element over ``dim`` is non-zero (NaN counts); False over no elements."""
    return _reduce(R.ANY, x, dim, keepdim)


def all(x, dim=None, keepdim: bool = False):
    """Whether every element over ``dim`` is non-zero; True over no elements."""
    return _reduce(R.ALL, x, dim, keepdim)


# -- statistics (composite) -----------------------------------------------------------------
def _var_parts(op, x, dim, correction, keepdim):
    """(variance, mean) in the compute dtype, and the result dtype."""
    dims = _dims(op, x, dim)
    xf, out = _float_of(x)
    m = _mean(xf, dims, True)
    d = xf - m
    ss = sum(d * d, dims, keepdim)
    dof = _count(x, dims) - correction
    # NumPy and PyTorch divide by max(n - correction, 0): 0/0 gives NaN, x/0 gives inf
    v = ss * (1.0 / dof) if dof > 0 else ss * _INF
    if not keepdim:
        m = m.reshape(R.reduced_shape(x._shape, dims, False))
    return v, m, out


def var(x, dim=None, correction=1, keepdim: bool = False):
    """Variance over ``dim``, dividing by ``n - correction`` (1: the unbiased estimate);
    NaN when that is not positive. A float (int and bool inputs give f32)."""
    v, _, out = _var_parts("var", x, dim, correction, keepdim)
    return v.cast(out)


def std(x, dim=None, correction=1, keepdim: bool = False):
    """Standard deviation: the square root of ``var``."""
    v, _, out = _var_parts("std", x, dim, correction, keepdim)
    return v.sqrt().cast(out)


def var_mean(x, dim=None, correction=1, keepdim: bool = False):
    """(var, mean) over ``dim``, sharing the mean."""
    v, m, out = _var_parts("var_mean", x, dim, correction, keepdim)
    return v.cast(out), m.cast(out)


def std_mean(x, dim=None, correction=1, keepdim: bool = False):
    """(std, mean) over ``dim``, sharing the mean."""
    v, m, out = _var_parts("std_mean", x, dim, correction, keepdim)
    return v.sqrt().cast(out), m.cast(out)


def logsumexp(x, dim=None, keepdim: bool = False):
    """``log(sum(exp(x)))`` over ``dim``, computed stably by subtracting the maximum (rows of
    -inf give -inf, rows with +inf give +inf); -inf over no elements. Int inputs give f32."""
    dims = _dims("logsumexp", x, dim)
    if x._dtype.kind != "float":
        x = x.cast(dt.DEFAULT_FLOAT)
    shape = R.reduced_shape(x._shape, dims, keepdim)
    if _count(x, dims) == 0:
        from .creation import full
        return full(shape, -_INF, dtype=x._dtype, device=x._device)
    m = max(x, dims, True).detach()
    m = m.mask_fill(m.is_inf(), 0.0)            # an infinite max would give inf - inf
    out = sum((x - m).exp(), dims, True).log() + m
    return out if keepdim else out.reshape(shape)


# -- scans ----------------------------------------------------------------------------------
def cumsum(x, dim: int):
    """Running sum along ``dim``; keeps the dtype (bool gives i64; f16/bf16 accumulate in
    f32)."""
    return unary(R.CUMSUM, x, {"dim": _dim("cumsum", x, dim), "reverse": False})


def cumprod(x, dim: int):
    """Running product along ``dim``; keeps the dtype (bool gives i64). The gradient is
    exact when ``x`` has no zeros along ``dim`` (it divides by ``x``)."""
    return unary(R.CUMPROD, x, {"dim": _dim("cumprod", x, dim)})


def cummax(x, dim: int):
    """(running maximum, i64 index of it) along ``dim``, as PyTorch: the latest index on
    ties; NaN propagates."""
    return apply(R.CUMMAX, (x,), {"dim": _dim("cummax", x, dim)})


def cummin(x, dim: int):
    """(running minimum, i64 index of it) along ``dim``, as PyTorch: the latest index on
    ties; NaN propagates."""
    return apply(R.CUMMIN, (x,), {"dim": _dim("cummin", x, dim)})


# -- sorting --------------------------------------------------------------------------------
def sort_with_indices(x, dim: int = -1, descending: bool = False):
    """(values, i64 indices) sorted along ``dim``; stable (ties keep their order, also when
    descending); NaN sorts as the largest value."""
    return apply(S.SORT, (x,), {"dim": _dim("sort", x, dim), "descending": bool(descending)})


def sort(x, dim: int = -1, descending: bool = False):
    """The values of ``x`` sorted along ``dim`` (stable; NaN as the largest value)."""
    return sort_with_indices(x, dim, descending)[0]


def argsort(x, dim: int = -1, descending: bool = False):
    """i64 indices that sort ``x`` along ``dim`` (stable)."""
    return unary(S.ARGSORT, x, {"dim": _dim("argsort", x, dim),
                                "descending": bool(descending)})


def topk(x, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
    """(values, i64 indices) of the ``k`` largest (smallest if not ``largest``) entries along
    ``dim``, ordered from the most extreme; among equal values the lower index comes first.
    Results are always sorted (``sorted=False`` is accepted for compatibility)."""
    if not isinstance(k, int) and hasattr(k, "__index__"):
        k = k.__index__()                       # a NumPy int or an int tensor
    return apply(S.TOPK, (x,), {"k": k, "dim": _dim("topk", x, dim),
                                "largest": bool(largest)})


def sum_to_shape(x, shape):
    """Sum a broadcast result back to ``shape`` (the inverse of broadcasting). Runs once per
    broadcast input in every backward pass, so it goes straight to the primitives."""
    shape = tuple(shape)
    xs = x._shape
    if xs == shape:
        return x
    lead = len(xs) - len(shape)
    kept = tuple([lead + i for i, s in enumerate(shape) if s == 1 and xs[lead + i] != 1])
    if kept or lead:
        # keeping the summed dims gives ``shape`` at once when no leading dim is dropped
        x = unary(R.SUM, x, {"dims": tuple(range(lead)) + kept, "keepdim": not lead})
    return x if x._shape == shape else unary(V.RESHAPE, x, {"shape": shape})


class ReduceMethods:
    __slots__ = ()
    sum = sum
    sum_dim = sum_dim
    mean = mean
    mean_dim = mean_dim
    prod = prod
    prod_dim = prod_dim
    max = max
    min = min
    max_dim = max_dim
    min_dim = min_dim
    max_dim_with_indices = max_dim_with_indices
    min_dim_with_indices = min_dim_with_indices
    argmax = argmax
    argmin = argmin
    max_abs = max_abs
    any = any
    all = all
    var = var
    std = std
    var_mean = var_mean
    std_mean = std_mean
    logsumexp = logsumexp
    cumsum = cumsum
    cumprod = cumprod
    cummax = cummax
    cummin = cummin
    sort = sort
    sort_with_indices = sort_with_indices
    argsort = argsort
    topk = topk
