"""Index arithmetic for fusion: affine index maps, view ops folded into them, and the
kernel contexts that turn recorded nodes into IR expressions.

An *index map* says where a node is read, as an affine function of the kernel's iteration
position ``i``: node index ``d`` is ``sum_k coeffs[d][k] * i[k] + offset[d]``. It is a tuple
of ``(coeffs, offset)`` rows, one per node dim, kept *normal* (rows of size-1 node dims and
coefficients on size-1 iteration dims are zero), so two maps that address the same elements
compare equal. permute, expand, slice (any step, flip included), unfold and broadcasting
compose affinely; a reshape composes when the linear index it preserves splits into the
input's digits without carries (``split_linear``); otherwise its input is materialized.
A load of a buffer through a map is a `BufferView`: the buffer's strides times the map.
"""
from __future__ import annotations

from ... import dtype as dt
from ...kernel import ir
from ...kernel.strides import contiguous_strides  # noqa: F401  (L.contiguous_strides)


# -- index maps -----------------------------------------------------------------------------
def identity(shape) -> tuple:
    n = len(shape)
    zero = (0,) * n
    rows = []
    for d in range(n):
        if shape[d] == 1:
            rows.append((zero, 0))
        else:
            rows.append((tuple(1 if k == d else 0 for k in range(n)), 0))
    return tuple(rows)


def compose(terms_rows, imap, in_shape, n_iter) -> tuple:
    """The map of a view's input: ``in[d] = sum_e c * out[e] + off`` for each ``(terms,
    off)`` of ``terms_rows`` (terms: ``((e, c), ...)``), composed with ``imap`` (out -> iter).
    """
    zero = (0,) * n_iter
    rows = []
    for d, (terms, off) in enumerate(terms_rows):
        if in_shape[d] == 1:
            rows.append((zero, 0))
            continue
        if len(terms) == 1:
            e, c = terms[0]
            ce, oe = imap[e]
            if c == 1:
                rows.append((ce, oe + off))
            else:
                rows.append((tuple(c * v for v in ce), c * oe + off))
            continue
        co = [0] * n_iter
        o = off
        for e, c in terms:
            ce, oe = imap[e]
            o += c * oe
            for k in range(n_iter):
                co[k] += c * ce[k]
        rows.append((tuple(co), o))
    return tuple(rows)


def broadcast_terms(in_shape, out_shape) -> tuple:
    lead = len(out_shape) - len(in_shape)
    return tuple(((((d + lead, 1),), 0) if in_shape[d] != 1 else ((), 0))
                 for d in range(len(in_shape)))


def view_terms(name, attrs, in_shape, out_shape):
    """The affine map of view op ``name`` from its output index to its input index, or
    None for reshape (handled by `split_linear`)."""
    if name == "permute":
        dims = attrs["dims"]
        rows = [None] * len(dims)
        for k, d in enumerate(dims):
            rows[d] = (((k, 1),), 0)
        return tuple(rows)
    if name == "expand":
        return broadcast_terms(in_shape, out_shape)
    if name == "slice":
        return tuple((((d, step),), start) for d, (start, _stop, step)
                     in enumerate(attrs["slices"]))
    if name == "unfold":
        dim, step = attrs["dim"], attrs["step"]
        last = len(out_shape) - 1
        return tuple(((((d, 1),), 0) if d != dim else (((d, step), (last, 1)), 0))
                     for d in range(len(in_shape)))
    return None


def linear_of(imap, shape):
    """``(c, l0)``: the row-major linear index of a node of ``shape`` read through ``imap``
    as ``l0 + sum_k c[k] i[k]``."""
    cs = contiguous_strides(shape)
    n_iter = len(imap[0][0]) if imap else 0
    c = [0] * n_iter
    l0 = 0
    for s, (co, off) in zip(cs, imap):
        l0 += s * off
        if s:
            for k, v in enumerate(co):
                if v:
                    c[k] += s * v
    return c, l0


def split_linear(c, l0, iter_shape, radix):
    """Digits of ``L(i) = l0 + sum_k c[k] i[k]`` in the mixed radix ``radix`` (sizes, row
    major) as affine maps ``(rows, offsets)``, when no carry or borrow can happen over the
    iteration box; else None."""
    n = len(radix)
    cs = contiguous_strides(radix)
    total = cs[0] * radix[0] if n else 1
    if l0 < 0 or l0 >= max(total, 1):
        return None
    K = len(iter_shape)
    rows = [[0] * K for _ in range(n)]
    for k, ck in enumerate(c):
        if ck == 0 or iter_shape[k] == 1:
            continue
        a = -ck if ck < 0 else ck
        for d in range(n):
            if cs[d] <= a:
                break
        else:
            return None
        if a % cs[d]:
            return None
        rows[d][k] = ck // cs[d]
    offs = []
    rem = l0
    for d in range(n):
        offs.append(rem // cs[d])
        rem %= cs[d]
    for d in range(n):
        lo = hi = offs[d]
        for k in range(K):
            v = rows[d][k] * (iter_shape[k] - 1)
            if v < 0:
                lo += v
            else:
                hi += v
        if lo < 0 or hi >= radix[d]:
            return None
    return rows, offs


def reshape_input_map(imap, out_shape, in_shape, iter_shape):
    """The map of a reshape's input (a pending node, read digit by digit), or None."""
    c, l0 = linear_of(imap, out_shape)
    keep = [d for d, s in enumerate(in_shape) if s != 1]
    r = split_linear(c, l0, iter_shape, [in_shape[d] for d in keep])
    if r is None:
        return None
    rows, offs = r
    zero = (0,) * len(iter_shape)
    out = [(zero, 0)] * len(in_shape)
    for j, d in enumerate(keep):
        out[d] = (tuple(rows[j]), offs[j])
    return tuple(out)


def coarsen(shape, strides):
    """Dims of a strided buffer merged where the strides allow (size-1 dims dropped):
    ``[(size, stride)]`` outer to inner."""
    out = []
    for n, s in zip(reversed(shape), reversed(strides)):
        if n == 1:
            continue
        if out and out[-1][1] * out[-1][0] == s:
            m, st = out[-1]
            out[-1] = (m * n, st)
        else:
            out.append((n, s))
    out.reverse()
    return out


def buffer_view_through(imap, strides, offset, n_iter):
    """(strides per iteration dim, offset) of a buffer with element ``strides`` read through
    ``imap``."""
    st = [0] * n_iter
    o = offset
    for s, (co, off) in zip(strides, imap):
        if s:
            o += s * off
            for k, v in enumerate(co):
                if v:
                    st[k] += s * v
    return tuple(st), o


def reshaped_buffer_view(imap, out_shape, buf_shape, buf_strides, offset, iter_shape):
    """A buffer read through a reshape (to ``out_shape``) and then ``imap``; None when the
    buffer's layout does not allow it."""
    c, l0 = linear_of(imap, out_shape)
    dims = coarsen(buf_shape, buf_strides)
    r = split_linear(c, l0, iter_shape, [n for n, _ in dims])
    if r is None:
        return None
    rows, offs = r
    K = len(iter_shape)
    st = [0] * K
    o = offset
    for (n, s), row, off in zip(dims, rows, offs):
        o += s * off
        for k in range(K):
            st[k] += s * row[k]
    return tuple(st), o


def acc_map(in_shape, axis) -> tuple:
    """How a reduction over ``axis`` (keepdim) of a node of ``in_shape`` reads its own result
    while iterating over ``in_shape``: every dim but the axis."""
    n = len(in_shape)
    zero = (0,) * n
    return tuple((zero, 0) if (d == axis or in_shape[d] == 1) else
                 (tuple(1 if k == d else 0 for k in range(n)), 0) for d in range(n))


def keep_map(node_shape, red_shape, iter_shape, axis):
    """The map of a node whose non-1 dims are, in order, the non-1 kept dims of a reduction
    iterating over ``iter_shape`` (the reduced ``axis`` excluded); None if they differ."""
    kept = [d for d, s in enumerate(iter_shape) if d != axis and s != 1]
    nz = [d for d, s in enumerate(node_shape) if s != 1]
    if len(kept) != len(nz) or any(node_shape[a] != iter_shape[b] for a, b in zip(nz, kept)):
        return None
    K = len(iter_shape)
    zero = (0,) * K
    rows = [(zero, 0)] * len(node_shape)
    for a, b in zip(nz, kept):
        rows[a] = (tuple(1 if k == b else 0 for k in range(K)), 0)
    return tuple(rows)


# -- expressions ----------------------------------------------------------------------------
_HALF = (dt.float16, dt.bfloat16)


def load_expr(index: int, dtype) -> ir.Expr:
    e = ir.Load(index, dtype)
    return ir.Cast(e, dt.float32) if dtype in _HALF else e


def subst_acc(e: ir.Expr, repl: ir.Expr) -> ir.Expr:
    """``e`` with every ``Acc`` replaced by ``repl``."""
    memo = {}

    def go(x):
        r = memo.get(x)
        if r is not None:
            return r
        if isinstance(x, ir.Acc):
            r = repl
        elif isinstance(x, ir.Unary):
            r = ir.Unary(x.op, go(x.x), x.dtype)
        elif isinstance(x, ir.Binary):
            r = ir.Binary(x.op, go(x.a), go(x.b), x.dtype)
        elif isinstance(x, ir.Select):
            r = ir.Select(go(x.cond), go(x.a), go(x.b), x.dtype)
        elif isinstance(x, ir.Fma):
            r = ir.Fma(go(x.a), go(x.b), go(x.c), x.dtype)
        elif isinstance(x, ir.Cast):
            r = ir.Cast(go(x.x), x.dtype)
        elif isinstance(x, ir.Bitcast):
            r = ir.Bitcast(go(x.x), x.dtype)
        else:
            r = x
        memo[x] = r
        return r
    return go(e)


def split_broadcast(k: ir.Reduce):
    """A broadcast `Reduce` as two kernels for runtimes without the form: the reduction
    (kept shape, in the accumulator dtype) and an `Elementwise` over the full shape that reads
    it where the epilogue read ``Acc``."""
    acc_d = k.prologue.dtype
    red = ir.Reduce(k.shape, k.axis, k.inputs, k.prologue, k.op, ir.Acc(acc_d), acc_d, k.args)
    rshape = tuple(1 if d == k.axis else n for d, n in enumerate(k.shape))
    cs = contiguous_strides(rshape)
    st = tuple(0 if (d == k.axis or rshape[d] == 1) else cs[d] for d in range(len(rshape)))
    idx = len(k.inputs)
    ew = ir.Elementwise(k.shape, k.inputs + (ir.BufferView(acc_d, st, 0),),
                        (subst_acc(k.epilogue, ir.Load(idx, acc_d)),), (k.out_dtype,), k.args)
    return red, ew


# -- iteration-space canonicalization -------------------------------------------------------
def collapse(shape, views, axis=None):
    """Drop size-1 iteration dims and merge adjacent ones whose strides allow it in every
    view (never across a reduction ``axis``). Returns ``(shape, [strides per view], axis)``."""
    n = len(shape)
    keep = [d for d in range(n) if shape[d] != 1 or d == axis]
    groups = []   # list of lists of dims
    for d in keep:
        if groups and d != axis and groups[-1][-1] != axis:
            prev = groups[-1][-1]
            if all(v[prev] == v[d] * shape[d] for v in views):
                groups[-1].append(d)
                continue
        groups.append([d])
    new_shape = []
    new_views = [[] for _ in views]
    new_axis = None
    for g in groups:
        size = 1
        for d in g:
            size *= shape[d]
        if axis is not None and g[0] == axis:
            new_axis = len(new_shape)
        new_shape.append(size)
        for j, v in enumerate(views):
            new_views[j].append(v[g[-1]])
    if not new_shape:        # a single element: one dim of size 1 (no 0-d kernels)
        return (1,), [(0,) for _ in views], None
    return tuple(new_shape), [tuple(v) for v in new_views], new_axis
