"""Array-namespace helpers for the op references.

Each reference takes a keyword-only ``xp`` (NumPy by default; the Cuda backend passes CuPy)
and calls ``xp.*``. The few NumPy features other namespaces lack, or implement with a hidden
host synchronization, are here, once: NumPy keeps its own (fast) path, other namespaces get
an equivalent built from what every array library has.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided as _np_as_strided


def as_strided(x, shape, strides, xp=np):
    """A read-only strided view of ``x`` (NumPy), or a plain strided view (others)."""
    if xp is np:
        return _np_as_strided(x, shape, strides, writeable=False)
    return xp.lib.stride_tricks.as_strided(x, shape, strides)


def device_array(a, xp=np):
    """A host (NumPy) constant as an array of ``xp`` (itself for NumPy)."""
    return a if xp is np else xp.asarray(a)


def accumulate_extreme(x, axis: int, largest: bool, xp=np):
    """The running maximum (or minimum) along ``axis``; NaN propagates, as in NumPy's
    ``maximum.accumulate``. Other namespaces get a doubling scan: log2(n) elementwise steps."""
    fn = np.maximum if largest else np.minimum
    if xp is np:
        return fn.accumulate(x, axis=axis)
    fn = xp.maximum if largest else xp.minimum
    n = x.shape[axis]
    acc = x.copy()
    pre = (slice(None),) * axis
    step = 1
    while step < n:
        nxt = acc.copy()
        nxt[pre + (slice(step, None),)] = fn(acc[pre + (slice(step, None),)],
                                             acc[pre + (slice(0, n - step),)])
        acc = nxt
        step *= 2
    return acc


def weighted_bincount(lin, weights, total: int, xp=np):
    """``np.bincount(lin, weights, minlength=total)`` in float64, ``lin`` in ``[0, total)``
    (other namespaces: an atomic scatter-add, without bincount's host synchronizations)."""
    if xp is np:
        return np.bincount(lin, weights=weights, minlength=total)
    out = xp.zeros(total, dtype=np.float64)
    if lin.size:
        xp.add.at(out, lin, weights.astype(np.float64, copy=False))
    return out


# dtypes every namespace can scatter-add atomically; others are accumulated through these
_ATOMIC = frozenset(np.dtype(t) for t in (np.int32, np.int64, np.float16, np.float32,
                                          np.float64))


def add_at(out, where, values, xp=np):
    """``out[where] += values`` with repeated positions accumulating (``np.add.at``), in place
    where possible; returns the result. Other namespaces accumulate narrow ints and bools in
    i64 (wrapping like the narrow dtype) and write the result back."""
    if xp is np or out.dtype in _ATOMIC:
        xp.add.at(out, where, values)
        return out
    wide = np.dtype(np.int64)
    acc = out.astype(wide)
    xp.add.at(acc, where, values.astype(wide))
    return acc.astype(out.dtype)


def check_indices(a, size: int, message, xp=np, ignore=None) -> None:
    """Raise `IndexError` with ``message(value)`` if a value of the int array ``a`` is outside
    ``[0, size)`` (``ignore``: a value let through, as cross-entropy's ignore_index). On NumPy
    at once. A device namespace with a ``defer_index_check`` (Cuda's:
    ember/backend/cuda/checks.py) queues the check on the device instead, and raises at the
    next read: no synchronization on the op path. Elsewhere: one read of the range."""
    if not a.size:
        return
    defer = getattr(xp, "defer_index_check", None)
    if defer is not None and size > 0:      # (an empty dim: every value is out of range)
        defer(a, size, message, ignore=ignore)
        return
    if ignore is not None:
        a = a[a != ignore]
        if not a.size:
            return
    lo, hi = value_range(a, xp)
    if lo < 0 or hi >= size:
        from ..errors import IndexError_
        raise IndexError_(message(lo if lo < 0 else hi))


def value_range(a, xp=np) -> tuple[int, int]:
    """(min, max) of a non-empty int array as Python ints: on a device, one read of two values
    (a synchronization: index checks need the values on the host)."""
    if xp is np:
        return int(a.min()), int(a.max())
    lo, hi = xp.stack((a.min(), a.max())).tolist()
    return int(lo), int(hi)
