"""Index arithmetic of the fuser, checked against NumPy's own views element by element."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from ember.backend.fusion import lower as L


def _positions(shape):
    return itertools.product(*[range(n) for n in shape])


def _apply(imap, i):
    return tuple(sum(c * v for c, v in zip(co, i)) + off for co, off in imap)


@pytest.mark.parametrize("src,dst,folds", [
    ((24,), (2, 3, 4), True), ((6, 4), (2, 3, 4), True), ((2, 1, 3), (2, 3), True),
    ((1,), (), True), ((5, 1), (1, 5), True),
    ((4, 6), (24,), False), ((2, 3, 4), (6, 4), False)])
def test_reshape_of_an_identity_map_is_exact(src, dst, folds):
    """A pending node of shape ``src`` read through reshape(dst) at every position: splits
    fold into index arithmetic; merges (one iteration dim across several source dims) do
    not, for a pending source (its materialized buffer then reshapes freely)."""
    imap = L.identity(dst)
    m = L.reshape_input_map(imap, dst, src, dst)
    assert (m is not None) == folds
    if not folds:
        st, off = L.reshaped_buffer_view(imap, dst, src, L.contiguous_strides(src), 0, dst)
        assert st == L.contiguous_strides(dst) and off == 0
        return
    ref = np.arange(int(np.prod(src))).reshape(src)
    out = ref.reshape(dst)
    for i in _positions(dst):
        assert ref[_apply(m, i)] == out[i]


def test_reshape_that_would_carry_is_refused():
    # a transposed [3, 4] read as 12 elements: the linear index carries between dims
    perm = L.compose(L.view_terms("permute", {"dims": (1, 0)}, (3, 4), (4, 3)),
                     L.identity((4, 3)), (3, 4), 2)
    c, l0 = L.linear_of(perm, (3, 4))
    assert L.split_linear(c, l0, (4, 3), [12]) is not None      # one digit: fine
    assert L.split_linear([5], 0, (4,), [4, 3]) is None          # stride 5 crosses digits


@pytest.mark.parametrize("case", range(40))
def test_buffer_views_compose_like_numpy(case):
    rng = np.random.default_rng(case)
    shape = tuple(int(n) for n in rng.integers(1, 5, size=rng.integers(1, 4)))
    base = np.arange(int(np.prod(shape)) * 2, dtype=np.int64)[::2].reshape(shape)
    arr = base
    # a random chain of NumPy views, mirrored as maps from the final view's index
    maps = []
    for _ in range(3):
        k = rng.integers(0, 3)
        if k == 0 and arr.ndim >= 2:
            dims = tuple(int(d) for d in rng.permutation(arr.ndim))
            maps.append(("permute", {"dims": dims}, arr.shape))
            arr = arr.transpose(dims)
        elif k == 1:
            d = int(rng.integers(0, arr.ndim))
            step = int(rng.choice([1, 2, -1, -2]))
            n = arr.shape[d]
            start = int(rng.integers(0, n))
            sl = slice(start, None, step)
            ln = len(range(n)[sl])
            stop = start + ln * step
            tri = tuple((0, s, 1) if j != d else (start, stop, step)
                        for j, s in enumerate(arr.shape))
            maps.append(("slice", {"slices": tri}, arr.shape))
            arr = arr[(slice(None),) * d + (sl,)]
        else:
            new = (2,) + arr.shape if arr.ndim < 3 else arr.shape
            maps.append(("expand", {"shape": new}, arr.shape))
            arr = np.broadcast_to(arr, new)
    imap = L.identity(arr.shape)
    cur_shape = arr.shape
    for name, attrs, in_shape in reversed(maps):
        terms = L.view_terms(name, attrs, in_shape, cur_shape)
        imap = L.compose(terms, imap, in_shape, len(arr.shape))
        cur_shape = in_shape
    strides = tuple(s // 8 for s in base.strides)
    st, off = L.buffer_view_through(imap, strides, 0, len(arr.shape))
    flat = np.arange(int(np.prod(shape)) * 2, dtype=np.int64)  # the memory itself
    for i in _positions(arr.shape):
        e = off + sum(a * b for a, b in zip(st, i))
        assert flat[e] == arr[i]


def test_collapse_merges_compatible_dims_only():
    shape, views, axis = L.collapse((2, 3, 4), [(12, 4, 1), (0, 0, 1)])
    assert shape == (6, 4) and views == [(4, 1), (0, 1)] and axis is None
    shape, views, axis = L.collapse((2, 3, 4), [(12, 4, 1)], axis=1)
    assert shape == (2, 3, 4) and axis == 1
    shape, views, axis = L.collapse((1, 1), [(5, 7)])
    assert shape == (1,) and views == [(0,)]
