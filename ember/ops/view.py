"""View ops: reshape, expand, permute, slicing, flips. They move no values, only index maps,
which is why fusion folds them into index arithmetic."""
from __future__ import annotations

import numpy as np

from ._api import api
from .registry import declare
from .rules import numel
from ..errors import ShapeError


def _reshape_infer(x, shape):
    if numel(shape) != numel(x._shape):
        raise ShapeError(f"reshape: cannot reshape {x._shape} ({numel(x._shape)} elements) to "
                         f"{shape} ({numel(shape)} elements); the element counts must match")
    return (shape, x._dtype)


RESHAPE = declare(
    "reshape", "view", nin=1, attrs=("shape",), infer=_reshape_infer,
    numpy=lambda x, shape, *, xp=np: x.reshape(shape),
    vjp=lambda g, i, o, shape: (g.reshape(i[0]._shape),))


def _expand_infer(x, shape):
    xs = x._shape
    if len(shape) < len(xs):
        raise ShapeError(f"expand: cannot expand {xs} to fewer dims {shape}")
    lead = len(shape) - len(xs)
    for i, s in enumerate(xs):
        if s != 1 and s != shape[lead + i]:
            raise ShapeError(f"expand: cannot expand {xs} to {shape}: dim {lead + i} is "
                             f"{s} vs {shape[lead + i]}; only size-1 dims can grow")
    return (shape, x._dtype)


EXPAND = declare(
    "expand", "view", nin=1, attrs=("shape",), infer=_expand_infer,
    numpy=lambda x, shape, *, xp=np: xp.broadcast_to(x, shape),
    # the engine sums a broadcast gradient back to the input's shape
    vjp=lambda g, i, o, shape: (g,))


# -- permute --------------------------------------------------------------------------------
def _permute_infer(x, dims):
    n = len(x._shape)
    if len(dims) != n or sorted(dims) != list(range(n)):
        raise ShapeError(f"permute: dims {dims} are not a permutation of the {n} dims of a "
                         f"tensor of shape {x._shape}; valid: each of 0..{n - 1} exactly once")
    return (tuple(x._shape[d] for d in dims), x._dtype)


def _inverse_perm(dims):
    inv = [0] * len(dims)
    for i, d in enumerate(dims):
        inv[d] = i
    return tuple(inv)


PERMUTE = declare(
    "permute", "view", nin=1, attrs=("dims",), infer=_permute_infer,
    numpy=lambda x, dims, *, xp=np: x.transpose(dims),
    vjp=lambda g, i, o, dims: (g.permute(_inverse_perm(dims)),),
    doc="out[i_0..i_n] = x[i_{inv(0)}..]; output dim k is input dim dims[k]")


# -- slice ----------------------------------------------------------------------------------
def slice_len(start: int, stop: int, step: int) -> int:
    """The number of indices of a canonical (start, stop, step) triple (Python's rule)."""
    if step > 0:
        return max(0, (stop - start + step - 1) // step)
    return max(0, (start - stop - step - 1) // -step)


def np_slices(slices) -> tuple:
    """Canonical triples as NumPy slices (a negative-step stop of -1 means 'past index 0',
    which NumPy would read as the last element)."""
    out = []
    for start, stop, step in slices:
        n = slice_len(start, stop, step)
        if n == 0:
            out.append(slice(0, 0, 1))
        elif step > 0:
            out.append(slice(start, stop, step))
        else:
            end = start + (n - 1) * step - 1
            out.append(slice(start, end if end >= 0 else None, step))
    return tuple(out)


def check_slices(op, shape, slices) -> tuple:
    """Validate canonical per-dim (start, stop, step) triples; returns the sliced shape."""
    if len(slices) != len(shape):
        raise ShapeError(f"{op}: needs one (start, stop, step) per dim of shape {shape}, "
                         f"got {len(slices)}")
    out = []
    for d, (tri, n) in enumerate(zip(slices, shape)):
        start, stop, step = tri
        if step == 0 or not (-1 <= start <= n and -1 <= stop <= n):
            raise ShapeError(f"{op}: slice {tri} of dim {d} (size {n}) is not canonical; "
                             f"use slice(...).indices({n})")
        out.append(slice_len(start, stop, step))
    return tuple(out)


def _slice_infer(x, slices):
    return (check_slices("slice", x._shape, slices), x._dtype)


def _slice_numpy(x, slices, *, xp=np):
    return x[np_slices(slices)]


def _slice_vjp(g, i, o, slices):
    x = i[0]
    zeros = api.zeros(x._shape, dtype=g._dtype, device=g._device)
    return (api.slice_assign(zeros, np_slices(slices), g),)


SLICE = declare(
    "slice", "view", nin=1, attrs=("slices",), infer=_slice_infer, numpy=_slice_numpy,
    vjp=_slice_vjp,
    doc="per dim d: out[.., i, ..] = x[.., start_d + i * step_d, ..]; steps may be negative "
        "(flip is a slice with step -1)")


# -- unfold ---------------------------------------------------------------------------------
def unfold_count(n: int, size: int, step: int) -> int:
    return (n - size) // step + 1


def _unfold_infer(x, dim, size, step):
    s = x._shape
    if size > s[dim] or size < 1 or step < 1:
        raise ShapeError(f"unfold: window size {size} and step {step} do not fit dim {dim} "
                         f"of size {s[dim]} in shape {s}; valid: 1 <= size <= {s[dim]}, "
                         f"step >= 1")
    return (s[:dim] + (unfold_count(s[dim], size, step),) + s[dim + 1:] + (size,), x._dtype)


def _unfold_numpy(x, dim, size, step, *, xp=np):
    w = xp.lib.stride_tricks.sliding_window_view(x, size, axis=dim)
    if step != 1:
        w = w[(slice(None),) * dim + (slice(None, None, step),)]
    return w


def _unfold_vjp(g, i, o, dim, size, step):
    x = i[0]
    n = x._shape[dim]
    nw = unfold_count(n, size, step)
    # window w, offset k reads x[w * step + k]: scatter-add the gradient back there
    idx = (np.arange(nw)[:, None] * step + np.arange(size)[None, :]).reshape(-1)
    g = g.movedim(-1, dim + 1)
    shape = g._shape[:dim] + (nw * size,) + g._shape[dim + 2:]
    g = g.reshape(shape)
    index = api.tensor(idx, dtype="i64", device=g._device)
    zeros = api.zeros(x._shape, dtype=g._dtype, device=g._device)
    return (zeros.index_add(dim, index, g),)


UNFOLD = declare(
    "unfold", "view", nin=1, attrs=("dim", "size", "step"), infer=_unfold_infer,
    numpy=_unfold_numpy, vjp=_unfold_vjp,
    doc="sliding windows along dim: out[.., w, .., k] = x[.., w * step + k, ..] (new last dim)")
