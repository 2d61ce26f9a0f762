"""Index and data-movement ops: cat, slice_assign, gather, scatter, index_select, one_hot.

Index tensors are int tensors (any int dtype); their values are checked against the indexed
dim on the host reference, so an out-of-range index raises `ember.errors.IndexError` instead
of reading garbage. Composite ops (stack, split, take, roll, repeat, tril, ...) live in
`ember/tensor/indexing.py` and `shape_ops.py`.
"""
from __future__ import annotations

import numpy as np

from ._api import api
from ._xp import add_at, check_indices
from .registry import declare
from .rules import require_kind
from .view import check_slices, np_slices
from ..errors import DTypeError, IndexError_, ShapeError


def _check_range(op, idx, n, dim, xp=np):
    """Raise IndexError_ if any value of ``idx`` is outside ``[0, n)`` (on Cuda at the next
    read: `_xp.check_indices`)."""
    check_indices(idx, n, lambda bad: f"{op}: index {bad} is out of range for dim {dim} of "
                                      f"size {n}; valid: 0..{n - 1}" if n else
                                      f"{op}: index {bad} is out of range for dim {dim} of "
                                      f"size 0", xp)


def _require_index(op, t, what="index"):
    if t._dtype.kind != "int":
        raise DTypeError(f"{op}: {what} must be an int tensor (i64, i32, ...), got "
                         f"{t._dtype.short}")


# -- cat ------------------------------------------------------------------------------------
def _cat_infer(*xs, dim):
    if not xs:
        raise ShapeError("cat: needs at least one tensor")
    first = xs[0]
    s0, d0 = first._shape, first._dtype
    size = 0
    for k, x in enumerate(xs):
        s = x._shape
        if x._dtype is not d0:
            raise DTypeError(f"cat: tensor {k} is {x._dtype.short} but tensor 0 is {d0.short}; "
                             f"em.cat promotes them to one dtype first")
        if len(s) != len(s0) or s[:dim] != s0[:dim] or s[dim + 1:] != s0[dim + 1:]:
            raise ShapeError(f"cat: tensor {k} has shape {s} but tensor 0 has {s0}; all dims "
                             f"but dim {dim} must match")
        size += s[dim]
    return (s0[:dim] + (size,) + s0[dim + 1:], d0)


def _cat_vjp(g, inputs, out, dim):
    grads, start = [], 0
    for x in inputs:
        n = x._shape[dim]
        grads.append(g.narrow(dim, start, n))
        start += n
    return tuple(grads)


CAT = declare(
    "cat", "index", nin=-1, attrs=("dim",), infer=_cat_infer,
    numpy=lambda *xs, dim, xp=np: xp.concatenate(xs, axis=dim), vjp=_cat_vjp,
    doc="concatenate any number of same-dtype tensors along dim (nin=-1: a variable count)")


# -- slice_assign ---------------------------------------------------------------------------
def _slice_assign_infer(x, values, slices):
    shape = check_slices("slice_assign", x._shape, slices)
    if values._shape != shape:
        raise ShapeError(f"slice_assign: values of shape {values._shape} do not fit the "
                         f"slice of shape {shape} of a tensor of shape {x._shape}")
    if values._dtype is not x._dtype:
        raise DTypeError(f"slice_assign: values are {values._dtype.short} but the tensor is "
                         f"{x._dtype.short}")
    return (x._shape, x._dtype)


def _slice_assign_numpy(x, values, slices, *, xp=np):
    out = xp.array(x, copy=True)
    out[np_slices(slices)] = values
    return out


def _slice_assign_vjp(g, inputs, out, slices):
    v = inputs[1]
    sl = np_slices(slices)
    zeros = api.zeros(v._shape, dtype=g._dtype, device=g._device)
    return (api.slice_assign(g, sl, zeros), g[sl])


SLICE_ASSIGN = declare(
    "slice_assign", "index", nin=2, attrs=("slices",), infer=_slice_assign_infer,
    numpy=_slice_assign_numpy, vjp=_slice_assign_vjp,
    doc="x with the region of canonical per-dim (start, stop, step) triples replaced by values")


# -- gather / scatter -----------------------------------------------------------------------
def _along(index, dim, xp=np):
    """A NumPy fancy index addressing ``index``'s positions with dim ``dim`` replaced by the
    values of ``index`` (the common core of gather and scatter)."""
    n = index.ndim
    out = []
    for d, s in enumerate(index.shape):
        if d == dim:
            out.append(index)
        else:
            shape = [1] * n
            shape[d] = s
            out.append(xp.arange(s).reshape(shape))
    return tuple(out)


def _gather_infer(x, index, dim):
    _require_index("gather", index)
    xs, is_ = x._shape, index._shape
    if len(is_) != len(xs) or any(a > b for d, (a, b) in enumerate(zip(is_, xs)) if d != dim):
        raise ShapeError(f"gather: index of shape {is_} does not fit input {xs} along dim "
                         f"{dim}; valid: the same number of dims and index sizes <= input "
                         f"sizes in every dim but {dim}")
    return (is_, x._dtype)


def _gather_numpy(x, index, dim, *, xp=np):
    if x.ndim == 0:
        _check_range("gather", index, 1, dim, xp)
        return xp.broadcast_to(x, index.shape).copy()
    _check_range("gather", index, x.shape[dim], dim, xp)
    return x[_along(index, dim, xp)]


def _gather_vjp(g, inputs, out, dim):
    x, index = inputs
    zeros = api.zeros(x._shape, dtype=g._dtype, device=g._device)
    return (zeros.scatter(dim, index, g, reduce="add"), None)


GATHER = declare(
    "gather", "index", nin=2, attrs=("dim",), infer=_gather_infer, numpy=_gather_numpy,
    vjp=_gather_vjp, doc="out[i][j] = x[index[i][j]][j] (dim 0), like torch.gather")


def _scatter_infer(x, index, src, dim, reduce):
    _require_index("scatter", index)
    xs, is_, ss = x._shape, index._shape, src._shape
    if reduce not in ("assign", "add"):
        raise ShapeError(f"scatter: reduce must be 'assign' or 'add', got {reduce!r}")
    if (len(is_) != len(xs) or len(ss) != len(xs)
            or any(a > b for a, b in zip(is_, ss))
            or any(a > b for d, (a, b) in enumerate(zip(is_, xs)) if d != dim)):
        raise ShapeError(f"scatter: index {is_}, src {ss} and input {xs} do not fit along "
                         f"dim {dim}; valid: the same number of dims, index sizes <= src "
                         f"sizes, and <= input sizes in every dim but {dim}")
    if src._dtype is not x._dtype:
        raise DTypeError(f"scatter: src is {src._dtype.short} but the input is "
                         f"{x._dtype.short}")
    return (xs, x._dtype)


def _scatter_numpy(x, index, src, dim, reduce, *, xp=np):
    out = xp.array(x, copy=True)
    if out.ndim == 0:
        _check_range("scatter", index, 1, dim, xp)
        if index.size:
            out[...] = (out + src) if reduce == "add" else src
        return out
    _check_range("scatter", index, out.shape[dim], dim, xp)
    if src.shape != index.shape:
        src = src[tuple(slice(0, s) for s in index.shape)]
    where = _along(index, dim, xp)
    if reduce == "assign":
        out[where] = src
    else:
        out = add_at(out, where, src, xp)
    return out


def _fit(t, shape):
    """``t`` zero-padded at the end of each dim to ``shape``."""
    if t._shape == shape:
        return t
    zeros = api.zeros(shape, dtype=t._dtype, device=t._device)
    return api.slice_assign(zeros, tuple(slice(0, s) for s in t._shape), t)


def _scatter_vjp(g, inputs, out, dim, reduce):
    x, index, src = inputs
    gsrc = _fit(g.gather(dim, index), src._shape)
    if reduce == "add":
        return (g, None, gsrc)
    zeros = api.zeros(src._shape, dtype=g._dtype, device=g._device)
    return (g.scatter(dim, index, zeros, reduce="assign"), None, gsrc)


SCATTER = declare(
    "scatter", "index", nin=3, attrs=("dim", "reduce"), infer=_scatter_infer,
    numpy=_scatter_numpy, vjp=_scatter_vjp,
    doc="x with out[index[i][j]][j] = src[i][j] (dim 0), or += for reduce='add' "
        "(duplicates accumulate); with 'assign', duplicate targets keep one of the values")


# -- index_select ---------------------------------------------------------------------------
def _index_select_infer(x, indices, dim):
    _require_index("index_select", indices, "indices")
    if len(indices._shape) != 1:
        raise ShapeError(f"index_select: indices must be 1-d, got shape {indices._shape}")
    s = x._shape
    if not s:
        raise ShapeError("index_select: needs a tensor of at least 1 dim, got a 0-d tensor; "
                         "reshape it to (1,) first")
    return (s[:dim] + indices._shape + s[dim + 1:], x._dtype)


def _index_select_numpy(x, indices, dim, *, xp=np):
    _check_range("index_select", indices, x.shape[dim], dim, xp)
    return xp.take(x, indices, axis=dim)


def _index_select_vjp(g, inputs, out, dim):
    x, indices = inputs
    zeros = api.zeros(x._shape, dtype=g._dtype, device=g._device)
    return (zeros.index_add(dim, indices, g), None)


INDEX_SELECT = declare(
    "index_select", "index", nin=2, attrs=("dim",), infer=_index_select_infer,
    numpy=_index_select_numpy, vjp=_index_select_vjp,
    doc="the slices of x at the 1-d int indices along dim")


# -- one_hot --------------------------------------------------------------------------------
def _one_hot_infer(x, num_classes, dtype):
    require_kind("one_hot", x._dtype, "int")
    return (x._shape + (num_classes,), dtype)


def _one_hot_numpy(x, num_classes, dtype, *, xp=np):
    check_indices(x, num_classes, lambda bad: f"one_hot: class {bad} is out of range for "
                                              f"num_classes={num_classes}; valid: "
                                              f"0..{num_classes - 1}", xp)
    return xp.asarray(x)[..., None] == xp.arange(num_classes)


ONE_HOT = declare(
    "one_hot", "index", nin=1, attrs=("num_classes", "dtype"), infer=_one_hot_infer,
    numpy=_one_hot_numpy, doc="out[..., c] = (x[...] == c), as dtype; a new last dim")
