"""Strides as kernels index arrays: in elements, not bytes (one home for the Fusion
decorator's kernels and the Cuda backend's own, which may not import the decorator)."""
from __future__ import annotations


def element_strides(a):
    """Array ``a``'s strides in elements, or None where one is no whole number of elements
    (a view that kernels cannot index)."""
    item = a.itemsize
    st = a.strides
    for s in st:
        if s % item:
            return None
    return tuple([s // item for s in st])


def with_element_strides(a, ascontiguous):
    """``(a, its element strides)``, ``a`` first copied by ``ascontiguous`` (the array
    library's) where a stride is no whole number of elements."""
    st = element_strides(a)
    if st is None:
        a = ascontiguous(a)
        st = element_strides(a)
    return a, st


def contiguous_strides(shape) -> tuple:
    """The element strides of a C-contiguous array of ``shape`` (a dim of size 0 steps as one
    of size 1, as NumPy's do)."""
    out, s = [], 1
    for n in reversed(shape):
        out.append(s)
        s *= max(n, 1)
    return tuple(reversed(out))
