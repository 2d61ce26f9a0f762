"""Reductions over dims (sum, prod, max, min, arg-reductions, any/all) and scans along one
dim (cumsum, cumprod, cummax, cummin).

Attributes are canonical: ``dims`` is a sorted tuple of distinct non-negative dims (empty for
a 0-d tensor), ``dim`` a non-negative int, ``keepdim`` a bool. The Tensor API
(``ember/tensor/reduce.py``) normalizes them.

Result dtypes: sum, prod, cumsum and cumprod keep the dtype (bool counts as i64; ints wrap
around like C, PyTorch and NumPy); max, min, cummax and cummin keep the dtype; indices are
i64; any and all give bool. f16 and bf16 sums, products and scans accumulate in f32 and round
once at the end, as PyTorch does (a bf16 running sum would stop growing at 256).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from .. import dtype as dt
from ..errors import ShapeError
from ._xp import accumulate_extreme
from .registry import declare
from .rules import require_kind
from ._api import apply_op
from .sort import TAKE_BACK

_LOW = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
_BF16 = np.dtype(ml_dtypes.bfloat16)
_BOOL = np.dtype(np.bool_)


def reduced_shape(shape, dims, keepdim):
    if keepdim:
        return tuple(1 if i in dims else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in dims)


def _check_nonempty(name, shape, dims):
    for d in dims:
        if shape[d] == 0:
            raise ShapeError(
                f"{name}: cannot reduce dim {d} of size 0 (input shape {shape}): the "
                f"reduction has no identity; reduce over non-empty dims only")


def reduce_infer(name, kinds="float int bool", out=None, nonempty=False):
    """Infer for ``(x, dims, keepdim)`` reductions; ``nonempty`` rejects reducing a size-0
    dim (max, min: no identity, as in PyTorch)."""
    def infer(x, dims, keepdim):
        if x._dtype.kind not in kinds:
            require_kind(name, x._dtype, kinds)
        if nonempty:
            _check_nonempty(name, x._shape, dims)
        d = out(x._dtype) if callable(out) else (out or x._dtype)
        return (reduced_shape(x._shape, dims, keepdim), d)
    return infer


def grad_to_input(g, x_shape, dims, keepdim):
    """A gradient of a reduced shape, broadcast back over the reduced dims."""
    if not keepdim and tuple(sorted(dims)) != tuple(range(len(dims))):
        # (reduced leading dims -- a full reduction too -- broadcast back as they are)
        g = g.reshape(reduced_shape(x_shape, dims, True))
    return g.expand(x_shape)


def _keep(t, x_shape, dims, keepdim):
    """``t`` (a reduced result) with the reduced dims kept as size 1."""
    return t if keepdim else t.reshape(reduced_shape(x_shape, dims, True))


def _sum_dtype(d):
    return dt.int64 if d.kind == "bool" else d


_F32_F64 = (np.dtype(np.float32), np.dtype(np.float64))
#: smaller inputs are summed by NumPy as they are (its own loop is as fast there)
_BLOCKED_MIN = 1 << 12
#: a kept block (the kept dims, innermost in memory) shorter than this is summed blocked
_SHORT_ROW = 64


def _sum_rows_blocked(x, dims):
    """The sum over ``dims`` (keeping them, size 1) of an array whose reduced dims are
    outermost in memory and whose kept dims form a short contiguous row -- a bias gradient,
    summed over batch and positions of a [N, C, H, W] gradient laid out channels-last, or
    over the rows of [M, C] with few columns -- or None for any other case. NumPy sums such
    an array one short column at a time (~30 µs for 2^15 f32); here the rows are first
    added as long vectors of several rows each, then the few partial rows: ~8 µs, and no
    less accurate (both add rows in sequence; the blocked form makes shorter chains)."""
    shape, strides = x.shape, x.strides
    red = set(dims)
    if x.flags.c_contiguous:            # memory order is the dims' order
        perm = list(range(x.ndim))
    else:
        perm = sorted(range(x.ndim), key=lambda a: -strides[a] if shape[a] > 1 else 0)
    k = 0
    while k < len(perm) and perm[k] in red:
        k += 1
    if k == 0 or k == len(perm) or any(a in red for a in perm[k:]):
        return None         # a full sum, or reduced dims that are not outermost in memory
    kept = 1
    for a in perm[k:]:
        kept *= shape[a]
    if kept >= _SHORT_ROW or kept < 2:
        return None
    xm = x if x.flags.c_contiguous else x.transpose(perm)
    if not xm.flags.c_contiguous:
        return None
    rows = x.size // kept
    r2 = least = -(-256 // kept)        # rows per long vector: about 256 elements or more
    while rows % r2:
        r2 += 1
        if r2 > 4 * least or r2 >= rows:
            return None
    part = np.add.reduce(xm.reshape(rows // r2, r2 * kept), axis=0, dtype=x.dtype)
    row = np.add.reduce(part.reshape(r2, kept), axis=0, dtype=x.dtype)
    out_shape = tuple(1 if a in red else n for a, n in enumerate(shape))
    return row.reshape(out_shape)


def _acc_reduce(fn, name):
    """``fn`` (np.add.reduce, np.multiply.reduce; ``xp.<name>`` in another namespace)
    accumulating f16/bf16 in f32 and ints in their own dtype. The ufunc's own ``reduce`` skips
    np.sum's Python-level dispatch."""
    blocked = name == "sum"         # sums of short kept rows may go `_sum_rows_blocked`

    def run(x, dims, keepdim, *, xp=np):
        red = fn if xp is np else getattr(xp, name)
        xd = x.dtype
        if blocked and xp is np and xd in _F32_F64 and x.size >= _BLOCKED_MIN and not (
                x.flags.c_contiguous and (x.shape[-1] >= _SHORT_ROW or x.ndim - 1 in dims)):
            out = _sum_rows_blocked(x, dims)
            if out is not None:
                return out if keepdim else out.reshape(reduced_shape(x.shape, dims, False))
        if xd in _LOW:
            return red(x, axis=dims, keepdims=keepdim, dtype=np.float32).astype(xd)
        if xd == _BOOL:
            return red(x, axis=dims, keepdims=keepdim, dtype=np.int64)
        return red(x, axis=dims, keepdims=keepdim, dtype=xd)
    return run


# -- sum, prod ------------------------------------------------------------------------------
SUM = declare(
    "sum", "reduce", nin=1, attrs=("dims", "keepdim"),
    infer=reduce_infer("sum", out=_sum_dtype),
    numpy=_acc_reduce(np.add.reduce, "sum"),
    vjp=lambda g, i, o, dims, keepdim: (grad_to_input(g, i[0]._shape, dims, keepdim),),
    doc="sum over dims; keeps the dtype (bool sums count as i64)")


def _prod_vjp(g, inputs, out, dims, keepdim):
    # d prod / d x_i is the product of the others. Dividing out/x_i breaks at zeros, so:
    # with z = [x == 0] and P = prod of the non-zero entries of the group,
    #   no zero in the group:   P / x_i
    #   exactly one zero:       P at the zero, 0 elsewhere
    #   two or more zeros:      0 everywhere
    # which is exact for any number of zeros.
    x = inputs[0]
    d = x._dtype
    z = (x == 0.0).cast(d)
    xs = x + z                                    # zeros replaced by ones
    p = xs.prod(dims, keepdim=True)
    cnt = z.sum(dims, keepdim=True)
    none = (cnt == 0.0).cast(d)
    one = (cnt == 1.0).cast(d)
    gk = _keep(g, x._shape, dims, keepdim)
    return (gk * p * (none / xs + one * z),)


PROD = declare(
    "prod", "reduce", nin=1, attrs=("dims", "keepdim"),
    infer=reduce_infer("prod", out=_sum_dtype),
    numpy=_acc_reduce(np.multiply.reduce, "prod"), vjp=_prod_vjp,
    doc="product over dims; keeps the dtype (bool counts as i64); the gradient is exact "
        "with zeros in the input")


# -- max, min -------------------------------------------------------------------------------
def _extreme_vjp(g, inputs, out, dims, keepdim):
    # The gradient is split evenly between the entries equal to the extreme (as PyTorch's
    # amax/amin do): each of m tied entries gets g / m.
    x = inputs[0]
    mask = (x == _keep(out, x._shape, dims, keepdim)).cast(x._dtype)
    cnt = mask.sum(dims, keepdim=True)
    return (_keep(g, x._shape, dims, keepdim) * mask / cnt,)


def _extreme_numpy(fn, name):
    def run(x, dims, keepdim, *, xp=np):
        return (fn if xp is np else getattr(xp, name))(x, axis=dims, keepdims=keepdim)
    return run


MAX = declare(
    "max", "reduce", nin=1, attrs=("dims", "keepdim"),
    infer=reduce_infer("max", nonempty=True), numpy=_extreme_numpy(np.maximum.reduce, "amax"),
    vjp=_extreme_vjp,
    doc="maximum over dims (NaN propagates); keeps the dtype; ties share the gradient evenly")
MIN = declare(
    "min", "reduce", nin=1, attrs=("dims", "keepdim"),
    infer=reduce_infer("min", nonempty=True), numpy=_extreme_numpy(np.minimum.reduce, "amin"),
    vjp=_extreme_vjp,
    doc="minimum over dims (NaN propagates); keeps the dtype; ties share the gradient evenly")


# -- arg-reductions -------------------------------------------------------------------------
def _dim_shape(shape, dim, keepdim):
    if not shape:
        return ()
    return reduced_shape(shape, (dim,), keepdim)


def _arg_infer(name):
    def infer(x, dim, keepdim):
        shape = x._shape
        if dim is None:
            if 0 in shape:
                raise ShapeError(f"{name}: the input of shape {shape} has a dim of size 0, so "
                                 f"no elements; an arg-reduction needs at least one")
            return ((1,) * len(shape) if keepdim else (), dt.int64)
        if shape:
            _check_nonempty(name, shape, (dim,))
        return (_dim_shape(shape, dim, keepdim), dt.int64)
    return infer


def _arg_numpy(name):
    fn_np = getattr(np, name)

    def run(x, dim, keepdim, *, xp=np):
        fn = fn_np if xp is np else getattr(xp, name)
        if x.dtype == _BF16:                    # exact, and NumPy's NaN rules apply
            x = x.astype(np.float32)
        if dim is None:
            r = fn(x.reshape(-1))
            if xp is not np:                    # a 0-d device array: no host read
                return r.astype(np.int64).reshape((1,) * x.ndim if keepdim else ())
            return np.full((1,) * x.ndim if keepdim else (), r, dtype=np.int64)
        if x.ndim == 0:
            return xp.zeros((), np.int64)
        return fn(x, axis=dim, keepdims=keepdim).astype(np.int64, copy=False)
    return run


ARGMAX = declare(
    "argmax", "reduce", nin=1, attrs=("dim", "keepdim"), infer=_arg_infer("argmax"),
    numpy=_arg_numpy("argmax"),
    doc="i64 index of the maximum along dim (of the flattened input for dim=None); the "
        "first one on ties; NaN counts as the maximum")
ARGMIN = declare(
    "argmin", "reduce", nin=1, attrs=("dim", "keepdim"), infer=_arg_infer("argmin"),
    numpy=_arg_numpy("argmin"),
    doc="i64 index of the minimum along dim (of the flattened input for dim=None); the "
        "first one on ties; NaN counts as the minimum")


def _with_indices_infer(name):
    def infer(x, dim, keepdim):
        shape = x._shape
        if shape:
            _check_nonempty(name, shape, (dim,))
        s = _dim_shape(shape, dim, keepdim)
        return [(s, x._dtype), (s, dt.int64)]
    return infer


def _with_indices_numpy(name):
    arg = _arg_numpy(name)

    def run(x, dim, keepdim, *, xp=np):
        if x.ndim == 0:
            return xp.array(x), xp.zeros((), np.int64)
        idx = arg(x, dim, True, xp=xp)
        vals = xp.take_along_axis(x, idx, dim)
        if not keepdim:
            idx = xp.squeeze(idx, dim)
            vals = xp.squeeze(vals, dim)
        return vals, idx
    return run


def _with_indices_vjp(g, inputs, out, dim, keepdim):
    # the whole gradient goes to the returned index (the first extreme on ties)
    x = inputs[0]
    if not x._shape:
        return (g,)
    idx = out[1]
    if not keepdim:
        kshape = reduced_shape(x._shape, (dim,), True)
        g, idx = g.reshape(kshape), idx.reshape(kshape)
    return (apply_op(TAKE_BACK, (g, idx), {"dim": dim, "size": x._shape[dim]}),)


MAX_DIM_WITH_INDICES = declare(
    "max_dim_with_indices", "reduce", nin=1, nout=2, attrs=("dim", "keepdim"),
    infer=_with_indices_infer("max_dim_with_indices"), numpy=_with_indices_numpy("argmax"),
    vjp=_with_indices_vjp,
    doc="(values, i64 indices) of the maximum along dim; the first index on ties")
MIN_DIM_WITH_INDICES = declare(
    "min_dim_with_indices", "reduce", nin=1, nout=2, attrs=("dim", "keepdim"),
    infer=_with_indices_infer("min_dim_with_indices"), numpy=_with_indices_numpy("argmin"),
    vjp=_with_indices_vjp,
    doc="(values, i64 indices) of the minimum along dim; the first index on ties")


# -- any, all -------------------------------------------------------------------------------
def _logical_numpy(name):
    fn_np = getattr(np, name)

    def run(x, dims, keepdim, *, xp=np):
        if x.dtype != _BOOL:
            x = x != 0                          # NaN counts as true, as in PyTorch
        return (fn_np if xp is np else getattr(xp, name))(x, axis=dims, keepdims=keepdim)
    return run


ANY = declare(
    "any", "reduce", nin=1, attrs=("dims", "keepdim"),
    infer=reduce_infer("any", out=dt.bool_), numpy=_logical_numpy("any"),
    doc="whether any element over dims is non-zero (False over no elements); bool result")
ALL = declare(
    "all", "reduce", nin=1, attrs=("dims", "keepdim"),
    infer=reduce_infer("all", out=dt.bool_), numpy=_logical_numpy("all"),
    doc="whether every element over dims is non-zero (True over no elements); bool result")


# -- scans ----------------------------------------------------------------------------------
def _scan_infer(name, kinds="float int bool", out=_sum_dtype):
    def infer(x, dim, **_):
        if x._dtype.kind not in kinds:
            require_kind(name, x._dtype, kinds)
        return (x._shape, out(x._dtype))
    return infer


def _acc_scan(name):
    """np.cumsum / np.cumprod along ``dim``, f16/bf16 accumulated in f32."""
    fn_np = getattr(np, name)

    def run(x, dim, *, xp=np):
        fn = fn_np if xp is np else getattr(xp, name)
        xd = x.dtype
        if x.ndim == 0:
            return xp.array(x, dtype=np.int64 if xd == _BOOL else xd)
        if xd in _LOW:
            return fn(x, axis=dim, dtype=np.float32).astype(xd)
        return fn(x, axis=dim, dtype=np.int64 if xd == _BOOL else xd)
    return run


_cumsum = _acc_scan("cumsum")


def _cumsum_numpy(x, dim, reverse, *, xp=np):
    if reverse and x.ndim:
        return xp.flip(_cumsum(xp.flip(x, dim), dim, xp=xp), dim)
    return _cumsum(x, dim, xp=xp)


CUMSUM = declare(
    "cumsum", "scan", nin=1, attrs=("dim", "reverse"),
    infer=_scan_infer("cumsum"), numpy=_cumsum_numpy,
    vjp=lambda g, i, o, dim, reverse: (
        apply_op(CUMSUM, (g,), {"dim": dim, "reverse": not reverse}),),
    doc="running sum along dim (from the end when reverse); keeps the dtype (bool -> i64)")


def _cumprod_vjp(g, inputs, out, dim):
    # d out_j / d x_i = out_j / x_i for j >= i: the reverse running sum of g * out, over x.
    # Exact where x has no zeros along dim; a zero gives inf/nan gradients before it.
    x = inputs[0]
    return (apply_op(CUMSUM, (g * out,), {"dim": dim, "reverse": True}) / x,)


CUMPROD = declare(
    "cumprod", "scan", nin=1, attrs=("dim",),
    infer=_scan_infer("cumprod"), numpy=_acc_scan("cumprod"), vjp=_cumprod_vjp,
    doc="running product along dim; keeps the dtype (bool -> i64); the gradient assumes no "
        "zeros in the input")


def _cum_extreme_infer(name):
    def infer(x, dim):
        return [(x._shape, x._dtype), (x._shape, dt.int64)]
    return infer


def _cum_extreme_numpy(largest):
    def run(x, dim, *, xp=np):
        if x.ndim == 0:
            return xp.array(x), xp.zeros((), np.int64)
        key = x.astype(np.float32) if x.dtype == _BF16 else x
        acc = accumulate_extreme(key, dim, largest, xp)
        mark = key == acc
        if key.dtype.kind == "f":
            mark |= xp.isnan(key)
        n = x.shape[dim]
        pos = xp.arange(n, dtype=np.int64).reshape((n,) + (1,) * (x.ndim - dim - 1))
        idx = accumulate_extreme(xp.where(mark, pos, 0), dim, True, xp)
        return (acc if acc.dtype == x.dtype else acc.astype(x.dtype)), idx
    return run


def _cum_extreme_vjp(g, inputs, out, dim):
    x = inputs[0]
    if not x._shape:
        return (g,)
    return (apply_op(TAKE_BACK, (g, out[1]), {"dim": dim, "size": x._shape[dim]}),)


CUMMAX = declare(
    "cummax", "scan", nin=1, nout=2, attrs=("dim",), infer=_cum_extreme_infer("cummax"),
    numpy=_cum_extreme_numpy(True), vjp=_cum_extreme_vjp,
    doc="(running maximum, i64 index of it) along dim, as PyTorch: the latest index on ties, "
        "NaN propagates")
CUMMIN = declare(
    "cummin", "scan", nin=1, nout=2, attrs=("dim",), infer=_cum_extreme_infer("cummin"),
    numpy=_cum_extreme_numpy(False), vjp=_cum_extreme_vjp,
    doc="(running minimum, i64 index of it) along dim, as PyTorch: the latest index on ties, "
        "NaN propagates")
