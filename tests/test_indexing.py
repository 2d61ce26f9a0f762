"""Python indexing (``x[key]``, ``x[key] = v``) against NumPy's own indexing over random keys,
its gradients, copies, and the errors of the index family."""
import copy

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import ember as em
from ember.errors import DTypeError, IndexError as EmIndexError, ShapeError

CPU = em.device("cpu")
AD = CPU.autodiff()


# -- random keys ----------------------------------------------------------------------------
@st.composite
def shape_and_key(draw, advanced=True):
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=0, max_size=4)))
    ellipsis_used = False
    key = []
    dim = 0
    n_adv = 0
    while draw(st.integers(0, 4)) > 0:
        kinds = ["none"]
        if not ellipsis_used:
            kinds.append("ellipsis")
        if dim < len(shape):
            kinds += ["slice", "slice"]
            if shape[dim] > 0:
                kinds.append("int")
            if advanced and n_adv < 2:
                kinds += ["list", "tensor"]
                if shape[dim] > 0 or True:
                    kinds.append("mask")
        kind = draw(st.sampled_from(kinds))
        if kind == "none":
            key.append(None)
        elif kind == "ellipsis":
            # an ellipsis covers all dims that the rest of the key leaves; stop walking dims
            key.append(Ellipsis)
            ellipsis_used = True
            dim = len(shape)
            continue
        elif kind == "slice":
            b = st.one_of(st.none(), st.integers(-6, 6))
            step = draw(st.one_of(st.none(), st.sampled_from([-3, -2, -1, 1, 2, 3])))
            key.append(slice(draw(b), draw(b), step))
            dim += 1
        elif kind == "int":
            key.append(draw(st.integers(-shape[dim], shape[dim] - 1)))
            dim += 1
        elif kind in ("list", "tensor"):
            n = shape[dim]
            if n == 0:
                idx = np.zeros((0,), np.int64)
            else:
                ishape = tuple(draw(st.lists(st.integers(0, 3), min_size=0, max_size=2)))
                vals = draw(st.lists(st.integers(-n, n - 1), min_size=int(np.prod(ishape)),
                                     max_size=int(np.prod(ishape))))
                idx = np.asarray(vals, np.int64).reshape(ishape)
            key.append(("idx", kind, idx))
            dim += 1
            n_adv += 1
        else:
            k = draw(st.integers(1, len(shape) - dim))
            mshape = shape[dim:dim + k]
            vals = draw(st.lists(st.booleans(), min_size=int(np.prod(mshape)),
                                 max_size=int(np.prod(mshape))))
            key.append(("mask", np.asarray(vals, bool).reshape(mshape)))
            dim += k
            n_adv += 1
    return shape, key


def _keys(key, device):
    """The key as NumPy sees it and as ember sees it (lists, tensors)."""
    np_key, em_key = [], []
    for k in key:
        if isinstance(k, tuple) and k[0] == "idx":
            np_key.append(k[2])
            em_key.append(k[2].tolist() if k[1] == "list" and k[2].ndim and k[2].size else
                          em.tensor(k[2], device=device))
        elif isinstance(k, tuple) and k[0] == "mask":
            np_key.append(k[1])
            em_key.append(em.tensor(k[1], device=device))
        else:
            np_key.append(k)
            em_key.append(k)
    return tuple(np_key), tuple(em_key)


def _numpy_result(a, np_key):
    try:
        return a[np_key], None
    except IndexError as e:
        return None, e


@settings(max_examples=400, deadline=None)
@given(shape_and_key())
def test_getitem_matches_numpy(sk):
    shape, key = sk
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    np_key, em_key = _keys(key, CPU)
    expect, err = _numpy_result(a, np_key)
    x = em.tensor(a)
    if err is not None:
        with pytest.raises((EmIndexError, ShapeError)):
            x[em_key]
        return
    got = x[em_key].numpy()
    assert got.shape == expect.shape, (shape, key)
    np.testing.assert_array_equal(got, expect)


@settings(max_examples=300, deadline=None)
@given(shape_and_key(), st.booleans())
def test_setitem_matches_numpy(sk, scalar):
    shape, key = sk
    a = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    np_key, em_key = _keys(key, CPU)
    region, err = _numpy_result(a, np_key)
    if err is not None:
        return
    if scalar:
        value_np = value = -7
    else:
        value_np = -1 - np.arange(region.size, dtype=np.int64).reshape(region.shape)
        value = em.tensor(value_np)
    expect = a.copy()
    x = em.tensor(a)
    other = copy.copy(x)
    try:
        expect[np_key] = value_np
    except (IndexError, ValueError):
        return
    x[em_key] = value
    if np.unique(_positions(shape, np_key)).size == _positions(shape, np_key).size:
        np.testing.assert_array_equal(x.numpy(), expect)
    np.testing.assert_array_equal(other.numpy(), a)  # the copy keeps the old value


def _positions(shape, np_key):
    return np.arange(int(np.prod(shape))).reshape(shape)[np_key].reshape(-1)


@pytest.mark.parametrize("dtype", ["f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8",
                                   "u8", "bool"])
def test_getitem_every_dtype(dtype):
    a = (np.arange(24).reshape(2, 3, 4) % 5).astype(em.dtype.as_dtype(dtype).np)
    x = em.tensor(a)
    for key in [np.s_[::-1, 1], np.s_[..., [2, 0]], np.s_[None, 1, ::-2],
                (a.astype(np.float64) > 2,), np.s_[[1, 0], :, [3, 3]]]:
        got = x[tuple(em.tensor(k) if isinstance(k, np.ndarray) else k for k in key)]
        np.testing.assert_array_equal(got.numpy(), a[key])


# -- gradients through indexing -------------------------------------------------------------
def test_getitem_grad():
    a = np.random.default_rng(0).normal(size=(3, 4))
    x = em.tensor(a, device=AD).require_grad()
    y = (x[::-2, [1, 1, 3]] * 2).sum() + x[x > 0].sum()
    g = x.grad(y.backward()).numpy()
    expect = (a > 0).astype(float)
    for i in (2, 0):
        expect[i, 1] += 4
        expect[i, 3] += 2
    np.testing.assert_allclose(g, expect)


def test_setitem_grad_flows_to_both():
    a = np.ones((3, 4))
    x = em.tensor(a, device=AD).require_grad()
    v = em.tensor(np.full((2,), 3.0), device=AD).require_grad()
    y = x * 2
    y[1, 1:3] = v
    grads = (y * y).sum().backward()
    gx = np.full((3, 4), 8.0)   # d(2x)^2/dx
    gx[1, 1:3] = 0
    np.testing.assert_allclose(x.grad(grads).numpy(), gx)
    np.testing.assert_allclose(v.grad(grads).numpy(), [6.0, 6.0])


def test_setitem_rebinds_only_this_object():
    x = em.tensor([1, 2, 3])
    alias = x
    c = copy.copy(x)
    d = copy.deepcopy(x)
    x[0] = 9
    assert alias.tolist() == [9, 2, 3]   # the same object
    assert c.tolist() == [1, 2, 3] and d.tolist() == [1, 2, 3]
    assert c is not x and d is not x


def test_setitem_casts_values():
    x = em.tensor([1, 2, 3])
    x[1:] = em.tensor([2.7, -1.2])
    assert x.tolist() == [1, 2, -1]
    assert x.dtype is em.int64


# -- composite ops against NumPy ----------------------------------------------------------
def test_split_chunk_torch_semantics():
    x = em.tensor(np.arange(7))
    assert [t.tolist() for t in x.split(3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [t.shape[0] for t in x.chunk(3)] == [3, 3, 1]
    assert [t.shape[0] for t in em.tensor(np.arange(6)).chunk(4)] == [2, 2, 2]


def test_iter_and_select():
    x = em.tensor(np.arange(6).reshape(2, 3))
    assert [r.tolist() for r in x] == [[0, 1, 2], [3, 4, 5]]
    assert x.select(1, -1).tolist() == [2, 5]


def test_slice_method_burn_style():
    x = em.tensor(np.arange(12).reshape(3, 4))
    assert x.slice([(0, 2), (1, 3)]).tolist() == [[1, 2], [5, 6]]
    assert x.slice(slice(None, None, -1)).tolist() == np.arange(12).reshape(3, 4)[::-1].tolist()


def test_nonzero_and_bool_mask_are_row_major():
    a = np.array([[0, 3, 0], [1, 0, 2]])
    x = em.tensor(a)
    np.testing.assert_array_equal(x.nonzero().numpy(), np.argwhere(a))
    assert x.nonzero().dtype is em.int64
    np.testing.assert_array_equal(x[x != 0].numpy(), a[a != 0])


def test_one_hot_infers_num_classes():
    x = em.tensor([0, 2, 1])
    np.testing.assert_array_equal(x.one_hot().numpy(), np.eye(3, dtype=np.int64)[[0, 2, 1]])


def test_views_compose():
    a = np.arange(60.0).reshape(3, 4, 5)
    x = em.tensor(a)
    y = x.permute(2, 0, 1)[::-1, 1:, ::2].swap_dims(0, 1).flip(-1).unfold(1, 2, 2)
    e = np.flip(np.swapaxes(np.transpose(a, (2, 0, 1))[::-1, 1:, ::2], 0, 1), -1)
    e = np.stack([e[:, w * 2:w * 2 + 2] for w in range(2)], 1)   # [.., nw, .., size]
    e = np.moveaxis(e, 2, -1)
    np.testing.assert_array_equal(y.numpy(), e)


# -- errors ---------------------------------------------------------------------------------
def test_int_index_out_of_range_names_dim_and_range():
    x = em.zeros(2, 3)
    with pytest.raises(EmIndexError, match=r"index 3 .*dim 1 of size 3.*-3\.\.2"):
        x[0, 3]
    with pytest.raises(EmIndexError, match="dim 0 of size 2"):
        x[-3]
    with pytest.raises(EmIndexError):
        x.select(0, 5)
    with pytest.raises(EmIndexError, match="too many indices"):
        x[0, 0, 0]
    with pytest.raises(EmIndexError):
        em.zeros(())[0]
    with pytest.raises(EmIndexError):
        x[..., ...]


def test_tensor_index_out_of_range():
    x = em.zeros(2, 3)
    with pytest.raises(EmIndexError, match="index 5"):
        x[:, [0, 5]]
    with pytest.raises(EmIndexError, match="index 2"):
        x.index_select(0, em.tensor([2]))
    with pytest.raises(EmIndexError):
        x.gather(1, em.tensor([[0, 3], [1, 1]]))
    with pytest.raises(EmIndexError):
        x.scatter(1, em.tensor([[0, -1]]), em.ones(1, 2))
    with pytest.raises(EmIndexError):
        em.tensor([0, 4]).one_hot(3)


def test_dim_out_of_range():
    x = em.zeros(2, 3)
    for f in (lambda: x.swap_dims(0, 2), lambda: x.flip(-3), lambda: em.cat([x, x], 2),
              lambda: x.narrow(2, 0, 1), lambda: x.unsqueeze(3), lambda: x.movedim(0, 5)):
        with pytest.raises(EmIndexError):
            f()


def test_non_int_indices_are_dtype_errors():
    x = em.zeros(2, 3)
    with pytest.raises(DTypeError):
        x[1.5]
    with pytest.raises(DTypeError):
        x[em.tensor([0.0, 1.0])]
    with pytest.raises(DTypeError):
        x.index_select(0, em.tensor([0.5]))
    with pytest.raises(DTypeError):
        x.gather(0, em.zeros(2, 3))
    with pytest.raises(DTypeError):
        x.one_hot(3)
    with pytest.raises(DTypeError):
        x["a"]


def test_shape_mismatches_are_shape_errors():
    x = em.zeros(2, 3)
    with pytest.raises(ShapeError):
        em.cat([x, em.zeros(3, 2)])
    with pytest.raises(ShapeError):
        em.stack([x, em.zeros(3, 2)])
    with pytest.raises(ShapeError):
        x[em.tensor([True, False, True])]
    with pytest.raises(ShapeError):
        x[[0, 1], [[0, 1, 2]]]                # index arrays that do not broadcast
    with pytest.raises(ShapeError):
        x[0:2, 1] = em.zeros(3)
    with pytest.raises(ShapeError):
        x.permute(0, 0)
    with pytest.raises(ShapeError):
        x.gather(1, em.tensor([[0], [1], [0]]))
    with pytest.raises(ShapeError):
        x.unfold(1, 4, 1)
    with pytest.raises(ShapeError):
        x.split([1, 1], 1)
    with pytest.raises(ShapeError):
        x[::0]
    with pytest.raises(ShapeError):
        x.repeat(2)
    with pytest.raises(ShapeError):
        em.cat([em.zeros(()), em.zeros(())])


def test_setitem_on_a_grad_leaf_is_refused():
    from ember.errors import AutodiffError
    x = em.tensor(np.ones(3), device=AD).require_grad()
    with pytest.raises(AutodiffError, match="setitem"):
        x[0] = 2.0
    y = x.clone()
    y[0] = 2.0
    assert y.tolist() == [2.0, 1.0, 1.0]
    assert np.allclose(x.grad((y * y).sum().backward()).numpy(), [0.0, 2.0, 2.0])


def test_index_add_and_select_on_0d():
    x = em.tensor(1.0)
    assert x.index_add(0, em.tensor([0, 0]), em.tensor([2.0, 3.0])).item() == 6.0
    with pytest.raises(ShapeError):
        x.index_select(0, em.tensor([0]))
    assert x.take(em.tensor([0, 0])).tolist() == [1.0, 1.0]
