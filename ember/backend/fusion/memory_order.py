"""Memory order: an elementwise result computed in the order its input lies in memory.

A conv output in channels-last order, or a transpose, is dense but not row-major. A kernel
over the logical shape writes row-major, so it would read such an input transposed; a kernel
over the dims permuted into the input's memory order (outermost first) reads and writes it
straight, and its result, permuted back (a view), lies in memory as its input does, as
NumPy's ufuncs lay it. Used by the single-op replays (`replay.Replays.run_elementwise`) and
by Fusion's planned elementwise chains (`stream._chain_order`).
"""
from __future__ import annotations

_ORDERS: dict = {}      # (strides, shape, itemsize) -> `order_of`
_INVERSES: dict = {}


def memory_order(prims, shape):
    """The dims of the op's first full-shape input, outermost in memory first, where that
    input is dense and not row-major (a channels-last conv output, a transpose); else None."""
    if len(shape) < 2:
        return None
    for p in prims:
        if getattr(p, "shape", None) == shape:
            k = (p.strides, shape, p.itemsize)
            try:
                return _ORDERS[k]
            except KeyError:
                pass
            if len(_ORDERS) >= 4096:
                _ORDERS.clear()
            perm = _ORDERS[k] = order_of(shape, p.strides, p.itemsize)
            return perm
    return None


def order_of(shape, strides, itemsize):
    """The dims of an array of ``shape`` and byte ``strides``, outermost in memory first,
    where it is dense and not row-major; else None."""
    perm = tuple(sorted(range(len(shape)), key=lambda d: -strides[d]))
    if perm == tuple(range(len(shape))):
        return None
    step = itemsize
    for d in reversed(perm):
        if shape[d] != 1:
            if strides[d] != step:
                return None             # not dense: the kernel writes row-major
            step *= shape[d]
    _INVERSES[perm] = tuple(sorted(range(len(perm)), key=perm.__getitem__))
    return perm


def inverse(perm):
    """The permutation undoing ``perm`` (one `order_of` returned)."""
    return _INVERSES[perm]


def permuted(prims, perm, nd):
    """The op's array inputs with their dims in ``perm``'s order (broadcast operands of fewer
    dims first get leading 1s, as broadcasting reads them)."""
    out = []
    for p in prims:
        n = getattr(p, "ndim", -1)
        if n == nd:
            p = p.transpose(perm)
        elif n >= 0:
            p = p.reshape((1,) * (nd - n) + p.shape).transpose(perm)
        out.append(p)
    return tuple(out)
