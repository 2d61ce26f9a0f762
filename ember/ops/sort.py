"""Sorting along one dim: sort (values and indices), argsort, topk; and
``take_along_dim_backward``, the adjoint of picking values along a dim by index, which the
derivatives of sort, topk, max/min with indices and cummax/cummin use.

Sorts are stable: equal values keep their order (in descending sorts too, as PyTorch's
``stable=True``). NaN sorts as the largest value. Indices are i64.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from .. import dtype as dt
from ..errors import DTypeError, ShapeError
from ._api import apply_op
from ._xp import weighted_bincount
from .registry import declare
from .rules import require_kind

_BF16 = np.dtype(ml_dtypes.bfloat16)


# -- take_along_dim_backward ----------------------------------------------------------------
def _take_back_infer(g, idx, dim, size):
    require_kind("take_along_dim_backward", g._dtype, "float", "gradient")
    require_kind("take_along_dim_backward", idx._dtype, "int", "indices")
    if g._shape != idx._shape:
        raise ShapeError(f"take_along_dim_backward: gradient shape {g._shape} and indices "
                         f"shape {idx._shape} must match")
    shape = list(idx._shape)
    if shape:
        shape[dim] = size
    elif size != 1:
        raise ShapeError(f"take_along_dim_backward: a 0-d input has size 1, got size {size}")
    return (tuple(shape), g._dtype)


def _take_back_numpy(g, idx, dim, size, *, xp=np):
    if idx.ndim == 0:
        return xp.array(g)
    shape = list(idx.shape)
    shape[dim] = size
    strides = [1] * len(shape)
    for a in range(len(shape) - 2, -1, -1):
        strides[a] = strides[a + 1] * shape[a + 1]
    lin = idx.astype(np.int64) * strides[dim]
    for a in range(idx.ndim):
        if a != dim and idx.shape[a] > 1:
            ar = xp.arange(idx.shape[a], dtype=np.int64) * strides[a]
            lin = lin + ar.reshape((-1,) + (1,) * (idx.ndim - a - 1))
    total = 1
    for s in shape:
        total *= s
    out = weighted_bincount(lin.reshape(-1), xp.asarray(g, np.float64).reshape(-1), total, xp)
    return out.reshape(shape).astype(g.dtype, copy=False)


TAKE_BACK = declare(
    "take_along_dim_backward", "index", nin=2, attrs=("dim", "size"),
    infer=_take_back_infer, numpy=_take_back_numpy,
    vjp=lambda g, i, o, dim, size: (g.gather(dim, i[1]), None),
    doc="zeros of the indices' shape with dim grown to size, and g added at indices along "
        "dim (repeated indices add up); indices must lie in [0, size)")


# -- sort -----------------------------------------------------------------------------------
def _sort_key(x):
    # bf16 -> f32 is exact; NumPy's bf16 sort does not order NaN.
    return x.astype(np.float32) if x.dtype == _BF16 else x


def _argsort_stable(key, dim, xp):
    if xp is np:
        return np.argsort(key, axis=dim, kind="stable")
    return xp.argsort(key, axis=dim)        # CuPy's sort is stable, with NaN last


def _stable_argsort(key, dim, descending, xp=np):
    if not descending:
        return _argsort_stable(key, dim, xp)
    # A stable ascending sort of the reversed input, reversed again, is a stable descending
    # sort: ties come out in their original order.
    n = key.shape[dim]
    idx = _argsort_stable(xp.flip(key, dim), dim, xp)
    return (n - 1) - xp.flip(idx, dim)


def _rows(key):
    """``key`` (sort dim last) as 2-d rows, and the leading shape to restore."""
    return key.reshape(-1, key.shape[-1]), key.shape[:-1]


def _argsort_rows(key, descending, xp=np):
    """Stable argsort of 2-d ``key`` along its rows."""
    if xp is not np:
        return _stable_argsort(key, 1, descending, xp)   # one device sort; no host branch
    if key.shape[1] < 2 or (key.dtype.kind in "iub" and key.dtype.itemsize <= 2):
        return _stable_argsort(key, 1, descending)        # NumPy's radix sort: fast
    # NumPy's default sort is several times faster than its stable one. Without ties (or
    # NaNs, which compare unequal) the two agree and a descending sort is the reverse; rows
    # with ties are sorted again with the stable sort.
    idx = np.argsort(key, axis=1)
    v = np.take_along_axis(key, idx, 1)
    bad = (v[:, 1:] == v[:, :-1]).any(1)
    if key.dtype.kind == "f":
        bad |= np.isnan(v[:, -1])
    if descending:
        idx = idx[:, ::-1]
    if bad.any():
        rows = np.nonzero(bad)[0]
        idx[rows] = _stable_argsort(key[rows], 1, descending)
    return idx


def _argsort(x, dim, descending, xp=np):
    """Stable argsort along dim, ascending or descending, NaN as the largest value."""
    key = xp.moveaxis(_sort_key(x), dim, -1)
    if key.size == 0:
        return xp.zeros(x.shape, np.int64)
    rows, lead = _rows(key)
    idx = _argsort_rows(rows, descending, xp).reshape(lead + (key.shape[-1],))
    return xp.moveaxis(idx, -1, dim)


def _sort_infer(x, dim, descending):
    return [(x._shape, x._dtype), (x._shape, dt.int64)]


def _sort_numpy(x, dim, descending, *, xp=np):
    if x.ndim == 0:
        return xp.array(x), xp.zeros((), np.int64)
    idx = _argsort(x, dim, descending, xp)
    return xp.take_along_axis(x, idx, dim), idx


def _gather_vjp(g, inputs, out, dim, **_):
    x = inputs[0]
    if not x._shape:
        return (g,)
    return (apply_op(TAKE_BACK, (g, out[1]), {"dim": dim, "size": x._shape[dim]}),)


SORT = declare(
    "sort", "sort", nin=1, nout=2, attrs=("dim", "descending"), infer=_sort_infer,
    numpy=_sort_numpy, vjp=_gather_vjp,
    doc="(values, i64 indices) sorted along dim; stable; NaN sorts as the largest value")


def _argsort_numpy(x, dim, descending, *, xp=np):
    if x.ndim == 0:
        return xp.zeros((), np.int64)
    return _argsort(x, dim, descending, xp)


ARGSORT = declare(
    "argsort", "sort", nin=1, attrs=("dim", "descending"),
    infer=lambda x, dim, descending: (x._shape, dt.int64), numpy=_argsort_numpy,
    doc="i64 indices that sort along dim (stable)")


def _topk_infer(x, k, dim, largest):
    if not isinstance(k, int) or isinstance(k, bool):
        raise DTypeError(f"topk: k must be an int, got {type(k).__name__} {k!r}")
    shape = x._shape
    n = shape[dim] if shape else 1
    if k < 0 or k > n or (not shape and k != 1):
        valid = "1 for a 0-d tensor" if not shape else f"0..{n}"
        raise ShapeError(f"topk: k={k} is out of range for dim {dim} of size {n} (input "
                         f"shape {shape}); valid: {valid}")
    out = tuple(k if i == dim else s for i, s in enumerate(shape))
    return [(out, x._dtype), (out, dt.int64)]


def _topk_rows(key, k, largest):
    """Indices of the top k of each row of 2-d ``key``, ordered, ties to the lower index."""
    n = key.shape[1]
    if 4 * k > n or n < 64:
        return _argsort_rows(key, largest)[:, :k]
    # Select k candidates per row by partitioning (linear time) and order only those. Rows
    # where entries equal to the boundary value fall both inside and outside the candidates
    # (the lower indices must win) or with NaNs take the sorting path.
    kth = n - k if largest else k - 1
    part = np.argpartition(key, kth, axis=1)
    cand = part[:, kth:] if largest else part[:, :k]
    bound = np.take_along_axis(key, part[:, kth:kth + 1], 1)
    bad = (key == bound).sum(1) != (np.take_along_axis(key, cand, 1) == bound).sum(1)
    if key.dtype.kind == "f":
        bad |= np.isnan(key).any(1)
    cand = np.sort(cand, axis=1)                  # index order, so that the stable sort
    cv = np.take_along_axis(key, cand, 1)         # below breaks ties by index
    out = np.take_along_axis(cand, _stable_argsort(cv, 1, largest), 1)
    if bad.any():
        rows = np.nonzero(bad)[0]
        out[rows] = _argsort_rows(key[rows], largest)[:, :k]
    return out


def _topk_indices(x, k, dim, largest, xp=np):
    key = xp.moveaxis(_sort_key(x), dim, -1)
    if k == 0 or key.size == 0:
        return xp.zeros(x.shape[:dim] + (k,) + x.shape[dim + 1:], np.int64)
    rows, lead = _rows(key)
    top = (_topk_rows(rows, k, largest) if xp is np else
           _argsort_rows(rows, largest, xp)[:, :k])   # a device sorts whole rows
    return xp.moveaxis(top.reshape(lead + (k,)), -1, dim)


def _topk_numpy(x, k, dim, largest, *, xp=np):
    if x.ndim == 0:
        return xp.array(x), xp.zeros((), np.int64)
    idx = _topk_indices(x, k, dim, largest, xp)
    return xp.take_along_axis(x, idx, dim), idx


TOPK = declare(
    "topk", "sort", nin=1, nout=2, attrs=("k", "dim", "largest"), infer=_topk_infer,
    numpy=_topk_numpy, vjp=_gather_vjp,
    doc="(values, i64 indices) of the k largest (or smallest) along dim, sorted; among "
        "equal values the lower index comes first")
