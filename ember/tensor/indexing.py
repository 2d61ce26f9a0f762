"""Indexing and data movement in the Tensor API: Python ``x[...]`` reads and writes, cat,
stack, split, narrow, select, gather, scatter, index_select, take, one_hot, tril/triu,
nonzero, roll.

``x[key]`` follows NumPy's rules. Basic indexing (ints, slices with any step, None,
Ellipsis) is one ``slice`` and one ``reshape`` (both views). Integer-array and bool-mask
indices ("advanced" indices) are read on the host, range-checked and become one
``index_select``: several of them are combined into one linear index over their dims.
``x[key] = v`` computes ``slice_assign`` (or a ``scatter`` for advanced keys) and rebinds
this Tensor object to the result; tensors are values, so no other tensor changes.
"""
from __future__ import annotations

import builtins
import operator

import numpy as np

from .. import dtype as dt
from ..errors import DTypeError, IndexError_, ShapeError
from ..ops import index as I
from ..ops import view as V
from ..ops.rules import canonical_dim, numel
from . import dispatch as _dispatch
from .dispatch import apply, unary

__all__ = ["cat", "stack", "split", "chunk", "narrow", "select", "select_assign",
           "slice_assign", "gather", "scatter", "index_select", "index_add", "take",
           "one_hot", "tril", "triu", "nonzero", "roll", "clone"]

_slice = builtins.slice
_I64 = dt.int64


# -- helpers --------------------------------------------------------------------------------
def _tensor_type():
    return _dispatch.Tensor


def _index_tensor(arr, device):
    from .creation import from_numpy
    return from_numpy(np.ascontiguousarray(arr, dtype=np.int64), device)


def _as_index(op, idx, device, what="index"):
    """An int index tensor from a Tensor, list, tuple or NumPy array."""
    Tensor = _tensor_type()
    if isinstance(idx, Tensor):
        if idx._dtype.kind != "int":
            raise DTypeError(f"{op}: {what} must be an int tensor (i64, i32, ...), got "
                             f"{idx._dtype.short}")
        return idx
    arr = np.asarray(idx)
    if arr.size == 0:
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise DTypeError(f"{op}: {what} must be ints, got {arr.dtype} values")
    return _index_tensor(arr, device)


def _check_int(op, i, n, dim):
    if type(i) is not int:
        if isinstance(i, (bool, np.bool_)) or not hasattr(type(i), "__index__"):
            raise DTypeError(f"{op}: index must be an int, got {type(i).__name__} {i!r}")
        i = operator.index(i)
    if i < -n or i >= n:
        raise IndexError_(f"{op}: index {i} is out of range for dim {dim} of size {n}; "
                          f"valid: {-n}..{n - 1}" if n else
                          f"{op}: index {i} is out of range for dim {dim} of size 0")
    return i + n if i < 0 else i


def _triple(op, spec, n, dim):
    """One per-dim slice spec (slice, range, (start, stop[, step]), None) as a canonical
    (start, stop, step) triple."""
    if spec is None:
        return (0, n, 1)
    if isinstance(spec, range):
        spec = _slice(spec.start, spec.stop, spec.step)
    elif isinstance(spec, (tuple, list)):
        spec = _slice(*spec)
    elif not isinstance(spec, _slice):
        raise DTypeError(f"{op}: dim {dim}: expected a slice, range or (start, stop[, step]), "
                         f"got {type(spec).__name__} {spec!r}")
    if spec.step == 0:
        raise ShapeError(f"{op}: dim {dim}: slice step cannot be zero")
    try:
        return spec.indices(n)
    except TypeError:
        raise DTypeError(f"{op}: dim {dim}: slice bounds must be ints, got {spec!r}") from None


def _canon_slices(op, shape, slices):
    """Per-dim specs for the leading dims as canonical triples for every dim."""
    if isinstance(slices, (_slice, range)):
        slices = (slices,)
    slices = tuple(slices)
    if len(slices) > len(shape):
        raise IndexError_(f"{op}: {len(slices)} slices for a tensor of {len(shape)} dims "
                          f"(shape {shape})")
    out = [_triple(op, s, n, d) for d, (n, s) in enumerate(zip(shape, slices))]
    out += [(0, n, 1) for n in shape[len(slices):]]
    return tuple(out)


def _is_full(triples, shape):
    for (a, b, c), n in zip(triples, shape):
        if a != 0 or c != 1 or b != n:
            return False
    return True


def _apply_slice(x, triples):
    if _is_full(triples, x._shape):
        return x
    return unary(V.SLICE, x, {"slices": triples})


def _values(op, x, value, shape):
    """``value`` (a Tensor or a scalar) as a tensor of ``x``'s dtype broadcast to ``shape``."""
    Tensor = _tensor_type()
    from .creation import full
    if not isinstance(value, Tensor):
        if isinstance(value, (bool, int, float, np.generic)):
            return full(shape, value, x._dtype, x._device)
        from .creation import tensor
        value = tensor(np.asarray(value), dtype=x._dtype, device=x._device)
    if value._device is not x._device:
        from ..errors import DeviceError
        raise DeviceError(f"{op}: values are on {value._device} but the tensor is on "
                          f"{x._device}")
    if value._dtype is not x._dtype:
        value = value.cast(x._dtype)
    vs = value._shape
    while len(vs) > len(shape) and vs[0] == 1:
        vs = vs[1:]
    if len(vs) > len(shape) or any(a != 1 and a != b for a, b in
                                   zip(vs, shape[len(shape) - len(vs):])):
        raise ShapeError(f"{op}: values of shape {value._shape} cannot be broadcast to the "
                         f"indexed region of shape {shape}")
    if vs != value._shape:
        value = value.reshape(vs)
    return value.expand(shape) if vs != shape else value


# -- Python indexing ------------------------------------------------------------------------
_INT, _SLICE, _NONE, _ADV = 0, 1, 2, 3


def _parse(x, key):
    """``key`` as a list of (kind, value, input dim) entries covering every dim of ``x``,
    with bool masks turned into int index arrays and negative indices still in place."""
    Tensor = _tensor_type()
    if type(key) is not tuple:
        key = (key,)
    shape = x._shape
    items = []
    consumed = 0
    ellipsis = None
    for k in key:
        if k is None:
            items.append((_NONE, None))
        elif k is Ellipsis:
            if ellipsis is not None:
                raise IndexError_("getitem: an index can only have one ellipsis (...)")
            ellipsis = len(items)
            items.append((Ellipsis, None))
        elif isinstance(k, _slice):
            items.append((_SLICE, k))
            consumed += 1
        elif isinstance(k, bool) or isinstance(k, np.bool_):
            raise DTypeError("getitem: a bool scalar is not a valid index; use None for a "
                             "new axis or a bool tensor as a mask")
        elif isinstance(k, (int, np.integer)):
            items.append((_INT, int(k)))
            consumed += 1
        else:
            if isinstance(k, Tensor):
                if k._dtype.kind == "float":
                    raise DTypeError(f"getitem: index tensors must be int or bool, got "
                                     f"{k._dtype.short}")
                arr = k.numpy()
            elif isinstance(k, (list, tuple, np.ndarray)):
                arr = np.asarray(k)
                if arr.size == 0 and arr.dtype.kind == "f":
                    arr = arr.astype(np.int64)
            else:
                raise DTypeError(f"getitem: invalid index {type(k).__name__} {k!r}; valid: "
                                 f"int, slice, None, ..., int or bool tensors and lists")
            if arr.dtype.kind == "b":
                if arr.ndim == 0:
                    raise DTypeError("getitem: a 0-d bool mask is not supported")
                items.append((_ADV, arr))  # a mask; expanded below
                consumed += arr.ndim
            elif arr.dtype.kind in "iu":
                items.append((_ADV, arr.astype(np.int64, copy=False)))
                consumed += 1
            else:
                raise DTypeError(f"getitem: index arrays must be int or bool, got {arr.dtype}")
    if consumed > len(shape):
        raise IndexError_(f"getitem: too many indices ({consumed}) for a tensor of "
                          f"{len(shape)} dims (shape {shape})")
    if ellipsis is None:
        items.append((Ellipsis, None))
        ellipsis = len(items) - 1
    fill = [(_SLICE, _slice(None))] * (len(shape) - consumed)
    items[ellipsis:ellipsis + 1] = fill
    # assign input dims, expand masks into one index array per covered dim
    entries = []
    dim = 0
    for kind, v in items:
        if kind == _NONE:
            entries.append((_NONE, None, None))
        elif kind == _ADV and v.dtype.kind == "b":
            covered = shape[dim:dim + v.ndim]
            if v.shape != covered:
                raise ShapeError(f"getitem: bool mask of shape {v.shape} does not match the "
                                 f"indexed dims {covered} of shape {shape}, from dim {dim}")
            for arr in np.nonzero(v):
                entries.append((_ADV, arr, dim))
                dim += 1
        else:
            entries.append((kind, v, dim))
            dim += 1
    return entries


def _plan(x, entries):
    """Canonical slice triples, the intermediate shape (after the slice and reshape of basic
    indexing) and, for advanced indices, their positions there and their wrapped arrays."""
    shape = x._shape
    has_adv = any(e[0] == _ADV for e in entries)
    triples = []
    inter = []
    adv_pos, adv_arrays = [], []
    for kind, v, d in entries:
        if kind == _NONE:
            inter.append(1)
            continue
        n = shape[d]
        if kind == _INT:
            i = _check_int("getitem", v, n, d)
            triples.append((i, i + 1, 1))
            if has_adv:
                adv_pos.append(len(inter))
                adv_arrays.append(np.zeros((), np.int64))
                inter.append(1)
        elif kind == _SLICE:
            t = _triple("getitem", v, n, d)
            triples.append(t)
            inter.append(V.slice_len(*t))
        else:
            if v.size:
                lo, hi = int(v.min()), int(v.max())
                if lo < -n or hi >= n:
                    bad = lo if lo < -n else hi
                    raise IndexError_(f"getitem: index {bad} is out of range for dim {d} of "
                                      f"size {n}; valid: {-n}..{n - 1}" if n else
                                      f"getitem: index {bad} is out of range for dim {d} of "
                                      f"size 0")
                if lo < 0:
                    v = np.where(v < 0, v + n, v)
            triples.append((0, n, 1))
            adv_pos.append(len(inter))
            adv_arrays.append(v)
            inter.append(n)
    return tuple(triples), tuple(inter), adv_pos, adv_arrays


def _broadcast(arrays):
    try:
        return np.broadcast_arrays(*arrays)
    except ValueError:
        raise ShapeError(f"getitem: index arrays of shapes "
                         f"{[a.shape for a in arrays]} do not broadcast together") from None


def getitem(x, key):
    """``x[key]`` with NumPy's semantics (see the module docstring)."""
    if type(key) is int:
        return select(x, 0, key) if x._shape else _bad_0d(key)
    entries = _parse(x, key)
    triples, inter, adv_pos, adv_arrays = _plan(x, entries)
    y = _apply_slice(x, triples)
    if y._shape != inter:
        y = unary(V.RESHAPE, y, {"shape": inter})
    if not adv_pos:
        return y
    dev = x._device
    if len(adv_pos) == 1:
        p, idx = adv_pos[0], adv_arrays[0]
        y = apply(I.INDEX_SELECT, (y, _index_tensor(idx.reshape(-1), dev)), {"dim": p})
        if idx.ndim != 1:
            y = y.reshape(inter[:p] + idx.shape + inter[p + 1:])
        return y
    arrays = _broadcast(adv_arrays)
    bshape = arrays[0].shape
    sizes = [inter[p] for p in adv_pos]
    lin = np.zeros(bshape, np.int64)
    for a, n in zip(arrays, sizes):
        lin = lin * n + a
    rest = [d for d in range(len(inter)) if d not in adv_pos]
    order = tuple(adv_pos) + tuple(rest)
    if order != tuple(range(len(inter))):
        y = y.permute(order)
    rest_shape = tuple(inter[d] for d in rest)
    y = y.reshape((numel(sizes),) + rest_shape)
    y = apply(I.INDEX_SELECT, (y, _index_tensor(lin.reshape(-1), dev)), {"dim": 0})
    y = y.reshape(bshape + rest_shape)
    first = adv_pos[0]
    adjacent = list(adv_pos) == list(range(first, first + len(adv_pos)))
    if adjacent and first:
        nb = len(bshape)
        total = nb + len(rest_shape)
        y = y.permute(tuple(range(nb, nb + first)) + tuple(range(nb))
                      + tuple(range(nb + first, total)))
    return y


def _bad_0d(key):
    raise IndexError_(f"getitem: cannot index a 0-d tensor with {key!r}; valid: x[()], "
                      f"x[...], x[None]")


def _key_numpy(entries):
    """The parsed key as a NumPy key (masks already turned into index arrays)."""
    return tuple(v if kind != _NONE else None for kind, v, _ in entries)


def setitem(x, key, value):
    """``x[key] = value``: rebinds ``x`` to ``slice_assign(x, ...)`` (a ``scatter`` for
    advanced keys); other tensors holding the old value are unaffected."""
    b = x._device.backend
    if b.is_autodiff and b.leaf_id(x._prim) is not None:
        from ..errors import AutodiffError
        raise AutodiffError("setitem: cannot assign into a tensor that requires grad (a "
                            "leaf); assign into y = x.clone() instead")
    entries = _parse(x, key)
    triples, inter, adv_pos, _ = _plan(x, entries)
    if not adv_pos:
        region = tuple(V.slice_len(*t) for t in triples)
        v = _values("setitem", x, value, inter)
        if v._shape != region:
            v = v.reshape(region)
        new = apply(I.SLICE_ASSIGN, (x, v), {"slices": triples})
    else:
        shape = x._shape
        pos = np.arange(numel(shape), dtype=np.int64).reshape(shape)[_key_numpy(entries)]
        v = _values("setitem", x, value, pos.shape).reshape(-1)
        flat = x.reshape(-1)
        idx = _index_tensor(pos.reshape(-1), x._device)
        new = apply(I.SCATTER, (flat, idx, v), {"dim": 0, "reduce": "assign"})
        new = new.reshape(shape)
    x._prim = new._prim


# -- data movement --------------------------------------------------------------------------
def _promote_all(op, tensors):
    Tensor = _tensor_type()
    for k, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise DTypeError(f"{op}: element {k} is a {type(t).__name__}, not a Tensor")
    d = tensors[0]._dtype
    for t in tensors[1:]:
        if t._dtype is not d:
            d = dt.promote(d, t._dtype)
    return tuple(t if t._dtype is d else t.cast(d) for t in tensors)


def cat(tensors, dim: int = 0):
    """The tensors joined along an existing ``dim``; dtypes are promoted to a common one."""
    tensors = tuple(tensors)
    if not tensors:
        raise ShapeError("cat: needs a non-empty sequence of tensors")
    tensors = _promote_all("cat", tensors)
    nd = len(tensors[0]._shape)
    if nd == 0:
        raise ShapeError("cat: 0-d tensors cannot be concatenated; use em.stack")
    d = canonical_dim("cat", dim, nd)
    if len(tensors) == 1:
        return tensors[0]
    return apply(I.CAT, tensors, {"dim": d})


def stack(tensors, dim: int = 0):
    """The tensors (all of one shape) joined along a new ``dim``."""
    tensors = tuple(tensors)
    if not tensors:
        raise ShapeError("stack: needs a non-empty sequence of tensors")
    tensors = _promote_all("stack", tensors)
    s0 = tensors[0]._shape
    for k, t in enumerate(tensors):
        if t._shape != s0:
            raise ShapeError(f"stack: tensor {k} has shape {t._shape} but tensor 0 has {s0}; "
                             f"all must match")
    d = canonical_dim("stack", dim, len(s0), extra=1)
    shape = s0[:d] + (1,) + s0[d:]
    parts = tuple(unary(V.RESHAPE, t, {"shape": shape}) for t in tensors)
    if len(parts) == 1:
        return parts[0]
    return apply(I.CAT, parts, {"dim": d})


def narrow(x, dim: int, start: int, length: int):
    """``length`` entries of ``dim`` from ``start`` (which may be negative)."""
    s = x._shape
    d = canonical_dim("narrow", dim, len(s))
    n = s[d]
    if start < -n or start > n:
        raise IndexError_(f"narrow: start {start} is out of range for dim {d} of size {n}; "
                          f"valid: {-n}..{n}")
    if start < 0:
        start += n
    if length < 0 or start + length > n:
        raise ShapeError(f"narrow: start {start} + length {length} exceeds dim {d} of size "
                         f"{n}")
    if start == 0 and length == n:
        return x
    triples = tuple((start, start + length, 1) if i == d else (0, m, 1)
                    for i, m in enumerate(s))
    return unary(V.SLICE, x, {"slices": triples})


def split(x, split_size_or_sections, dim: int = 0):
    """Pieces of ``split_size`` along ``dim`` (the last may be smaller), or pieces of the
    listed sizes, which must sum to the dim's size (torch.split)."""
    s = x._shape
    d = canonical_dim("split", dim, len(s))
    n = s[d]
    if isinstance(split_size_or_sections, int):
        size = split_size_or_sections
        if size <= 0 and n:
            raise ShapeError(f"split: split size must be > 0, got {size}")
        sizes = [min(size, n - i) for i in range(0, n, size)] if n else [0]
    else:
        sizes = [int(v) for v in split_size_or_sections]
        if builtins.sum(sizes) != n or any(v < 0 for v in sizes):
            raise ShapeError(f"split: sizes {sizes} must be >= 0 and sum to {n}, the size of "
                             f"dim {d} of shape {s}")
    out, start = [], 0
    for v in sizes:
        out.append(narrow(x, d, start, v))
        start += v
    return tuple(out)


def chunk(x, chunks: int, dim: int = 0):
    """At most ``chunks`` pieces of equal size ``ceil(n / chunks)`` along ``dim``; the last
    may be smaller (torch.chunk)."""
    if not isinstance(chunks, int) or chunks <= 0:
        raise ShapeError(f"chunk: chunks must be a positive int, got {chunks!r}")
    s = x._shape
    d = canonical_dim("chunk", dim, len(s))
    n = s[d]
    size = -(-n // chunks) if n else 0
    if n == 0:
        return tuple(x for _ in range(chunks))
    return split(x, size, d)


def select(x, dim: int, index: int):
    """The slice at ``index`` of ``dim``, with that dim removed."""
    s = x._shape
    d = canonical_dim("select", dim, len(s))
    i = _check_int("select", index, s[d], d)
    triples = tuple((i, i + 1, 1) if k == d else (0, m, 1) for k, m in enumerate(s))
    y = unary(V.SLICE, x, {"slices": triples})
    return unary(V.RESHAPE, y, {"shape": s[:d] + s[d + 1:]})


def slice_assign(x, slices, values):
    """``x`` with the region ``slices`` (per leading dim: a slice, range, (start, stop[,
    step]) or None) replaced by ``values`` (a tensor broadcast to the region, or a scalar)."""
    triples = _canon_slices("slice_assign", x._shape, slices)
    region = tuple(V.slice_len(*t) for t in triples)
    v = _values("slice_assign", x, values, region)
    return apply(I.SLICE_ASSIGN, (x, v), {"slices": triples})


def select_assign(x, dim: int, index, values):
    """With an int ``index``: ``x`` with the slice at ``index`` of ``dim`` replaced by
    ``values`` (torch.select_scatter). With an index tensor: Burn's select_assign, which
    adds ``values`` at those indices (an ``index_add``)."""
    if isinstance(index, _dispatch.Tensor) or isinstance(index, (list, tuple, np.ndarray)):
        return index_add(x, dim, index, values)
    s = x._shape
    d = canonical_dim("select_assign", dim, len(s))
    i = _check_int("select_assign", index, s[d], d)
    triples = tuple((i, i + 1, 1) if k == d else (0, m, 1) for k, m in enumerate(s))
    v = _values("select_assign", x, values, s[:d] + s[d + 1:])
    v = unary(V.RESHAPE, v, {"shape": s[:d] + (1,) + s[d + 1:]})
    return apply(I.SLICE_ASSIGN, (x, v), {"slices": triples})


def gather(x, dim: int, index):
    """``out[i][j] = x[index[i][j]][j]`` for dim 0 (torch.gather); out has index's shape."""
    d = canonical_dim("gather", dim, len(x._shape))
    index = _as_index("gather", index, x._device)
    return apply(I.GATHER, (x, index), {"dim": d})


def scatter(x, dim: int, index, src, reduce: str = "assign"):
    """``x`` with ``out[index[i][j]][j] = src[i][j]`` for dim 0 (``reduce="add"``: ``+=``,
    duplicates accumulate). ``src`` may be a scalar."""
    d = canonical_dim("scatter", dim, len(x._shape))
    index = _as_index("scatter", index, x._device)
    if reduce not in ("assign", "add"):
        raise ShapeError(f"scatter: reduce must be 'assign' or 'add', got {reduce!r}")
    if type(src) is not _tensor_type():
        src = _values("scatter", x, src, index._shape)
    elif src._dtype is not x._dtype:
        src = src.cast(x._dtype)
    return apply(I.SCATTER, (x, index, src), {"dim": d, "reduce": reduce})


def index_select(x, dim: int, indices):
    """The slices of ``x`` at the 1-d ``indices`` along ``dim``."""
    d = canonical_dim("index_select", dim, len(x._shape))
    indices = _as_index("index_select", indices, x._device, "indices")
    return apply(I.INDEX_SELECT, (x, indices), {"dim": d})


def index_add(x, dim: int, indices, src):
    """``x`` with ``src``'s slices added at the 1-d ``indices`` along ``dim`` (repeated
    indices accumulate): a scatter-add with the index broadcast over ``src``."""
    s = x._shape
    d = canonical_dim("index_add", dim, len(s))
    indices = _as_index("index_add", indices, x._device, "indices")
    if len(indices._shape) != 1:
        raise ShapeError(f"index_add: indices must be 1-d, got shape {indices._shape}")
    k = indices._shape[0]
    want = s[:d] + (k,) + s[d + 1:]
    src = _values("index_add", x, src, want)
    if not s:
        return index_add(x.reshape(1), 0, indices, src).reshape(())
    idx = indices.reshape(tuple(k if i == d else 1 for i in range(len(s)))).expand(want)
    return apply(I.SCATTER, (x, idx, src), {"dim": d, "reduce": "add"})


def take(x, indices):
    """The elements of ``x`` read as 1-d at ``indices`` (any shape; the output has it)."""
    indices = _as_index("take", indices, x._device, "indices")
    flat = x.reshape(-1)
    out = apply(I.INDEX_SELECT, (flat, indices.reshape(-1)), {"dim": 0})
    return out.reshape(indices._shape)


def one_hot(x, num_classes: int = -1, dtype=None):
    """``x`` (ints in ``[0, num_classes)``) as one-hot vectors along a new last dim, i64 by
    default; ``num_classes=-1`` uses ``max(x) + 1``."""
    if x._dtype.kind != "int":
        raise DTypeError(f"one_hot: expects an int tensor of class indices, got "
                         f"{x._dtype.short}")
    if num_classes == -1:
        num_classes = int(x.numpy().max()) + 1 if numel(x._shape) else 0
    if not isinstance(num_classes, int) or num_classes < 0:
        raise ShapeError(f"one_hot: num_classes must be a non-negative int or -1, got "
                         f"{num_classes!r}")
    d = dt.as_dtype(dtype) if dtype is not None else _I64
    return unary(I.ONE_HOT, x, {"num_classes": num_classes, "dtype": d})


def _triangle(op, x, k, lower):
    s = x._shape
    if len(s) < 2:
        raise ShapeError(f"{op}: needs a tensor of at least 2 dims, got shape {s}")
    n, m = s[-2], s[-1]
    keep = np.tri(n, m, k, dtype=bool) if lower else ~np.tri(n, m, k - 1, dtype=bool)
    if keep.all():
        return x
    from .creation import from_numpy
    from . import functional as F
    mask = from_numpy(~keep, x._device)
    return F.mask_fill(x, mask, 0)


def tril(x, k: int = 0):
    """The lower triangle of the last two dims (entries with ``j - i <= k``); the rest 0."""
    return _triangle("tril", x, k, True)


def triu(x, k: int = 0):
    """The upper triangle of the last two dims (entries with ``j - i >= k``); the rest 0."""
    return _triangle("triu", x, k, False)


def nonzero(x):
    """The indices of the non-zero entries, as an i64 tensor of shape [count, ndim] in
    row-major order (torch.nonzero). The count depends on the values, so this reads them."""
    return _index_tensor(np.argwhere(np.asarray(x.numpy()) != 0), x._device)


def roll(x, shifts, dims=None):
    """``x`` rotated by ``shifts`` along ``dims`` (torch.roll); with no dims, the flattened
    tensor is rolled and the shape restored."""
    if dims is None:
        if not isinstance(shifts, int):
            if len(shifts) != 1:
                raise ShapeError(f"roll: without dims, shifts must be one int, got {shifts}")
            shifts = shifts[0]
        return roll(x.reshape(-1), shifts, 0).reshape(x._shape)
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims):
        raise ShapeError(f"roll: {len(shifts)} shifts {shifts} but {len(dims)} dims {dims}")
    y = x
    for sh, dim in zip(shifts, dims):
        d = canonical_dim("roll", dim, len(x._shape))
        n = x._shape[d] if x._shape else 1
        if n == 0 or not x._shape:
            continue
        sh %= n
        if sh:
            y = cat((narrow(y, d, n - sh, sh), narrow(y, d, 0, n - sh)), d)
    return y


def clone(x):
    """A new tensor with ``x``'s values and its own graph node, e.g. to assign into
    (``y = x.clone(); y[0] = 1``) while gradients still flow to ``x``. Storage is
    immutable, so nothing is copied: the result is an identity reshape view."""
    return unary(V.RESHAPE, x, {"shape": x._shape})


def _slice_method(x, *slices):
    """Burn's ``slice``: per leading dim a slice, range, (start, stop[, step]) or None."""
    if len(slices) == 1 and isinstance(slices[0], (list, tuple)) and slices[0] and \
            not isinstance(slices[0][0], int):
        slices = tuple(slices[0])
    return _apply_slice(x, _canon_slices("slice", x._shape, slices))


class IndexingMethods:
    __slots__ = ()
    __getitem__ = getitem
    __setitem__ = setitem
    narrow = narrow
    split = split
    chunk = chunk
    select = select
    select_assign = select_assign
    slice_assign = slice_assign
    slice = _slice_method
    gather = gather
    scatter = scatter
    index_select = index_select
    index_add = index_add
    take = take
    one_hot = one_hot
    tril = tril
    triu = triu
    nonzero = nonzero
    roll = roll
    clone = clone
