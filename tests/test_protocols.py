"""Python and NumPy protocols of tensors: len, iteration, conversions, repr, Shape,
TensorData round trips, seeding, copying and pickling."""
from __future__ import annotations

import copy
import operator
import pickle

import ml_dtypes
import numpy as np
import pytest

import ember as em
from ember.errors import DTypeError, ShapeError

ND = em.device("cpu")
AD = ND.autodiff()
ALL = ("f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8", "u8", "bool")


def sample(name, shape=(2, 3), seed=0):
    rng = np.random.default_rng(seed)
    d = em.dtype.from_name(name)
    if d.kind == "float":
        return rng.normal(size=shape).astype(d.np)
    if d.kind == "bool":
        return rng.random(shape) < 0.5
    return rng.integers(0, 100, size=shape).astype(d.np)


# -- len and iteration ----------------------------------------------------------------------
def test_len():
    assert len(em.zeros(4, 2)) == 4
    assert len(em.zeros(0, 3)) == 0
    with pytest.raises(ShapeError, match="0-d"):
        len(em.tensor(1.0))


@pytest.mark.parametrize("device", [ND, AD], ids=["ndarray", "autodiff"])
def test_iteration_over_dim_0(device):
    a = np.arange(12.0).reshape(3, 4)
    t = em.tensor(a, device=device)
    rows = list(t)
    assert len(rows) == 3
    for r, ref in zip(rows, a):
        assert isinstance(r, em.Tensor) and r.shape == (4,) and r.device is device
        np.testing.assert_array_equal(r.numpy(), ref)
    items = list(em.tensor([1, 2, 3]))
    assert [x.shape for x in items] == [(), (), ()]
    assert [x.item() for x in items] == [1, 2, 3]
    assert list(em.zeros(0, 2)) == []
    with pytest.raises(ShapeError, match="0-d"):
        iter(em.tensor(1.0)).__next__()


def test_iteration_keeps_the_graph():
    x = em.tensor(np.arange(6.0).reshape(3, 2), device=AD).require_grad()
    total = None
    for i, row in enumerate(x):
        total = row * float(i) if total is None else total + row * float(i)
    g = x.grad(total.sum().backward()).numpy()
    np.testing.assert_array_equal(g, [[0, 0], [1, 1], [2, 2]])


# -- scalars and host data ------------------------------------------------------------------
def test_item_types():
    assert em.tensor([[2.5]]).item() == 2.5 and type(em.tensor([[2.5]]).item()) is float
    assert type(em.tensor([7]).item()) is int and em.tensor([7]).item() == 7
    assert em.tensor(True).item() is True
    assert em.tensor(1.5, dtype="bf16").item() == 1.5
    assert type(em.tensor(1.5, dtype="bf16").item()) is float
    assert em.tensor(200, dtype="u8").item() == 200
    with pytest.raises(ShapeError, match=r"item.*\(2,\)"):
        em.tensor([1.0, 2.0]).item()
    with pytest.raises(ShapeError):
        em.zeros(0).item()


@pytest.mark.parametrize("name", ALL)
def test_tolist_and_numpy(name):
    a = sample(name)
    t = em.tensor(a, dtype=name)
    n = t.numpy()
    assert n.dtype == em.dtype.from_name(name).np and n.shape == (2, 3)
    np.testing.assert_array_equal(n, a)
    lst = t.tolist()
    assert isinstance(lst, list) and len(lst) == 2 and len(lst[0]) == 3
    assert lst == a.tolist()
    kinds = {"float": float, "int": int, "bool": bool}
    assert type(lst[0][0]) is kinds[t.dtype.kind]
    assert em.tensor(a[0, 0], dtype=name).tolist() == a[0, 0].item()   # 0-d: a scalar


@pytest.mark.parametrize("name", ALL)
def test_array_protocol(name):
    a = sample(name)
    t = em.tensor(a, dtype=name)
    b = np.asarray(t)
    assert b.dtype == a.dtype
    np.testing.assert_array_equal(b, a)
    np.testing.assert_array_equal(np.asarray(t, dtype=np.float64), a.astype(np.float64))
    c = np.array(t, copy=True)
    assert not np.shares_memory(c, t.primitive)
    np.testing.assert_array_equal(c, a)


def test_array_protocol_copy_false_refuses_a_conversion():
    t = em.tensor([1.0, 2.0])
    with pytest.raises(ValueError, match="copy"):
        np.array(t, dtype=np.float64, copy=False)
    assert np.shares_memory(np.asarray(t), t.primitive)   # no conversion: no copy on NdArray


def test_float_int_bool_index():
    assert float(em.tensor([3.5])) == 3.5
    assert int(em.tensor([[3.7]])) == 3 and int(em.tensor([-3.7])) == -3
    assert int(em.tensor(5, dtype="i8")) == 5
    assert bool(em.tensor([0.0])) is False and bool(em.tensor(2)) is True
    assert operator.index(em.tensor(3)) == 3
    assert list(range(em.tensor(3))) == [0, 1, 2]
    assert [10, 20, 30][em.tensor(1)] == 20
    with pytest.raises(DTypeError, match="only int tensors"):
        operator.index(em.tensor(1.0))
    with pytest.raises(ShapeError, match="ambiguous"):
        bool(em.tensor([1.0, 2.0]))
    with pytest.raises(ShapeError):
        float(em.tensor([1.0, 2.0]))


def test_metadata():
    t = em.zeros(2, 3, 4, dtype="f16")
    assert t.shape == (2, 3, 4) and isinstance(t.shape, em.Shape)
    assert t.dtype is em.f16 and t.device is ND
    assert t.ndim == 3 == t.dim() and t.numel() == 24
    assert t.size() == (2, 3, 4) and t.size(-1) == 4
    assert t.kind == "float" and em.zeros(1, dtype="u8").kind == "int"


# -- devices --------------------------------------------------------------------------------
def test_to_device_ndarray_and_autodiff():
    a = np.arange(4.0, dtype=np.float32)
    t = em.tensor(a)
    assert t.to_device(ND) is t
    u = t.to_device(AD)
    assert u.device is AD and not u.is_require_grad()
    np.testing.assert_array_equal(u.numpy(), a)
    assert u.primitive is t.primitive or np.shares_memory(u.primitive, t.primitive)
    w = u.require_grad()
    back = (w * 2.0).to_device(ND)
    assert back.device is ND and not back.device.backend.is_autodiff
    np.testing.assert_array_equal(back.numpy(), a * 2)
    assert back.to_device("cpu") is back
    # another index is another device
    other = t.to_device(em.device("cpu:1"))
    assert other.device is em.device("cpu", 1) and other.device is not ND
    np.testing.assert_array_equal(other.numpy(), a)


# -- repr -----------------------------------------------------------------------------------
def test_repr_small():
    r = repr(em.tensor([1.5, -2.0]))
    assert r.startswith("Tensor([") and "1.5" in r and "-2." in r
    assert "shape=(2,)" in r and "dtype=f32" in r and f"device={em.default_device()}" in r
    assert "require_grad" not in r
    r = repr(em.tensor([1.0], device=AD).require_grad())
    assert str(AD) in r and "require_grad" in r
    assert "3" in repr(em.tensor(3)) and "shape=()" in repr(em.tensor(3))
    assert "1.5" in repr(em.tensor([1.5, 2.25], dtype="bf16")) and "bf16" in \
        repr(em.tensor([1.5], dtype="bf16"))
    assert "True" in repr(em.tensor([True, False]))
    assert "shape=(0, 3)" in repr(em.zeros(0, 3))
    assert str(em.tensor([1.0])) == repr(em.tensor([1.0]))


def test_repr_large_is_summarized():
    t = em.tensor(np.arange(100_000, dtype=np.float32).reshape(100, 1000))
    r = repr(t)
    assert "..." in r and "shape=(100, 1000)" in r
    assert ("99999" in r or "9.9999e+04" in r) and "0.0000e+00" in r
    assert len(r) < 2000


# -- Shape ----------------------------------------------------------------------------------
def test_shape_class():
    s = em.Shape(2, 3)
    assert s == (2, 3) and s == em.Shape((2, 3)) == em.Shape([2, 3])
    assert s.num_elements() == 6 == s.numel() and s.dims == (2, 3)
    assert em.Shape(5) == (5,) and em.Shape() == () and em.Shape().num_elements() == 1
    assert em.Shape(0, 4).num_elements() == 0
    assert repr(s) == "Shape(2, 3)"
    assert s[1] == 3 and len(s) == 2 and list(s) == [2, 3]
    assert hash(s) == hash((2, 3))
    assert {s: 1}[(2, 3)] == 1
    assert em.Shape(np.int64(2), 3) == (2, 3) and type(em.Shape(np.int64(2))[0]) is int


# -- TensorData -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ALL)
def test_tensor_data_round_trips(name):
    a = sample(name, (2, 3))
    d = em.TensorData(a)
    assert d.shape == (2, 3) and d.dtype is em.dtype.from_name(name)
    np.testing.assert_array_equal(d.to_numpy(), a)
    assert d.to_numpy().dtype == a.dtype
    assert d.tolist() == a.tolist()
    # bytes are little-endian values in C order
    assert d.bytes == np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()
    again = em.TensorData(d.bytes, shape=d.shape, dtype=d.dtype)
    assert again == d
    t = em.tensor(d)
    assert t.dtype is d.dtype and t.to_data() == d
    assert em.TensorData(t) == d
    # non-contiguous input
    assert em.TensorData(a.T).tolist() == a.T.tolist()


def test_tensor_data_from_python_values():
    assert em.TensorData([[1, 2], [3, 4]]).dtype is em.i64
    assert em.TensorData([1.5, 2]).dtype is em.f32
    assert em.TensorData([True, False]).dtype is em.bool_
    d = em.TensorData(3.5)
    assert d.shape == () and d.tolist() == 3.5 and d.dtype is em.f32
    assert em.TensorData(7).dtype is em.i64 and em.TensorData(True).dtype is em.bool_
    assert em.TensorData(np.float64(1.25)).dtype is em.f64     # NumPy scalars keep theirs
    assert em.TensorData([1.0, 2.0], dtype="bf16").to_numpy().dtype == ml_dtypes.bfloat16
    assert em.TensorData([1, 2, 3, 4], shape=(2, 2)).shape == (2, 2)
    assert em.TensorData([], dtype="f32").shape == (0,)
    big_endian = np.arange(3, dtype=">i4")
    assert em.TensorData(big_endian).tolist() == [0, 1, 2]
    assert em.TensorData(big_endian).dtype is em.i32


def test_tensor_data_errors():
    with pytest.raises(ShapeError, match="bytes"):
        em.TensorData(b"\x00\x00\x00", shape=(1,), dtype="f32")
    with pytest.raises(ShapeError, match="shape and a dtype"):
        em.TensorData(b"\x00" * 4)
    with pytest.raises(ShapeError, match="uneven"):
        em.TensorData([[1, 2], [3]])
    with pytest.raises(ShapeError, match="fill shape"):
        em.TensorData([1, 2, 3], shape=(2, 2))
    with pytest.raises(DTypeError):
        em.TensorData(np.zeros(2, np.complex64))
    with pytest.raises(DTypeError):
        em.TensorData(["a", "b"])


def test_tensor_data_bf16_bytes_are_the_bf16_bits():
    d = em.TensorData([1.0, -2.0], dtype="bf16")
    # 1.0 = 0x3f80, -2.0 = 0xc000 in bfloat16, little-endian
    assert d.bytes == bytes([0x80, 0x3F, 0x00, 0xC0])


def test_tensor_data_convert_and_eq():
    d = em.TensorData([1.7, -2.2])
    assert d.convert("i32").tolist() == [1, -2] and d.convert("i32").dtype is em.i32
    assert d != d.convert("f64") and d == em.TensorData([1.7, -2.2])
    assert d.num_elements() == 2
    assert "f32" in repr(d) and "(2,)" in repr(d)


def test_assert_eq():
    d = em.TensorData([1.0, 2.0, float("nan")])
    d.assert_eq(em.TensorData([1.0, 2.0, float("nan")]))
    with pytest.raises(AssertionError, match=r"differ at 1 of 3 positions, first at \(1,\)"):
        d.assert_eq(em.TensorData([1.0, 2.5, float("nan")]))
    with pytest.raises(AssertionError, match="dtypes differ"):
        d.assert_eq(d.convert("f64"))
    d.assert_eq(d.convert("f64"), strict_dtype=False)
    with pytest.raises(AssertionError, match="shapes differ"):
        d.assert_eq(em.TensorData([1.0, 2.0]))
    em.TensorData([2 ** 62 + 1]).assert_eq(em.TensorData([2 ** 62 + 1]))
    with pytest.raises(AssertionError):       # ints compare exactly, not through float64
        em.TensorData([2 ** 62 + 1]).assert_eq(em.TensorData([2 ** 62]))


def test_assert_approx_eq_tolerances():
    a = em.tensor([1.0, 2.0, 3.0])
    em.assert_approx_eq(a, [1.0, 2.0, 3.0 + 1e-7])
    em.assert_approx_eq(a, np.array([1.0, 2.0, 3.001]), tol=2e-3, rtol=0)
    with pytest.raises(AssertionError, match=r"1 of 3 values differ.*first at \(2,\)"):
        em.assert_approx_eq(a, np.array([1.0, 2.0, 3.001]), tol=1e-4)
    with pytest.raises(AssertionError, match="max abs error 0.5"):
        em.assert_approx_eq(a, [1.5, 2.0, 3.0], tol=1e-3)
    # rtol scales with the magnitude; atol does not
    big = em.tensor([1000.0])
    em.assert_approx_eq(big, [1000.5], tol=0, rtol=1e-3)
    with pytest.raises(AssertionError):
        em.assert_approx_eq(big, [1000.5], tol=0.1, rtol=0)
    # nan matches nan; nan does not match a number; inf matches inf only
    em.assert_approx_eq([float("nan"), float("inf")], [float("nan"), float("inf")])
    with pytest.raises(AssertionError):
        em.assert_approx_eq([float("nan")], [0.0])
    with pytest.raises(AssertionError):
        em.assert_approx_eq([float("inf")], [-float("inf")])
    with pytest.raises(AssertionError, match="shapes differ"):
        em.assert_approx_eq(a, [1.0, 2.0])
    a.to_data().assert_approx_eq(em.tensor([1.0, 2.0, 3.0 + 1e-6]).to_data(), 1e-5)
    with pytest.raises(AssertionError):
        a.to_data().assert_approx_eq(em.tensor([1.0, 2.0, 3.1]).to_data(), 1e-2)
    em.assert_approx_eq(em.tensor([1.0, 2.0], dtype="bf16"), [1.0, 2.0], tol=0)


# -- seeding --------------------------------------------------------------------------------
def test_em_seed_reproducible():
    em.seed(1)
    a = em.random((4, 3))
    b = em.random((4, 3))
    em.seed(1)
    c = em.random((4, 3))
    np.testing.assert_array_equal(a.numpy(), c.numpy())
    assert not np.array_equal(a.numpy(), b.numpy())
    em.seed(2)
    assert not np.array_equal(em.random((4, 3)).numpy(), a.numpy())


def test_device_seed_reproducible_and_shared_with_autodiff():
    for dist in (em.Default(), em.Normal(0.0, 2.0), em.Uniform(-1.0, 1.0), em.Bernoulli(0.3)):
        ND.seed(7)
        a = em.random((5,), dist)
        AD.seed(7)                                  # the autodiff device seeds its inner one
        b = em.random((5,), dist, device=AD)
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    em.seed(3, device=ND)
    x = em.random((3,))
    ND.seed(3)
    np.testing.assert_array_equal(em.random((3,)).numpy(), x.numpy())


# -- copying and pickling -------------------------------------------------------------------
@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("device", [ND, AD], ids=["ndarray", "autodiff"])
def test_pickle_round_trip(name, device):
    a = sample(name)
    t = em.tensor(a, dtype=name, device=device)
    u = pickle.loads(pickle.dumps(t))
    assert u.dtype is t.dtype and u.device is device and u.shape == t.shape
    np.testing.assert_array_equal(u.numpy(), a)
    v = copy.deepcopy(t)
    assert v is not t and v.dtype is t.dtype and v.device is device
    np.testing.assert_array_equal(v.numpy(), a)
    w = copy.copy(t)
    np.testing.assert_array_equal(w.numpy(), a)


def test_pickle_keeps_require_grad_of_leaves():
    w = em.tensor([1.0, 2.0], device=AD).require_grad()
    u = pickle.loads(pickle.dumps(w))
    assert u.is_require_grad() and u.id() is not None
    np.testing.assert_array_equal(u.grad((u * 3.0).sum().backward()).numpy(), [3.0, 3.0])
    assert not pickle.loads(pickle.dumps(w.detach())).is_require_grad()
    # a deep copy is the same leaf
    assert copy.deepcopy(w).id() == w.id()


def test_pickle_dtypes_devices_and_data():
    for d in em.dtype.ALL:
        assert pickle.loads(pickle.dumps(d)) is d
        assert copy.deepcopy(d) is d
    assert pickle.loads(pickle.dumps(AD)) is AD
    assert pickle.loads(pickle.dumps(em.device("cpu:1"))) is em.device("cpu:1")
    assert pickle.loads(pickle.dumps(AD.backend)) is AD.backend
    d = em.TensorData([1.0, 2.0], dtype="bf16")
    assert pickle.loads(pickle.dumps(d)) == d
    assert pickle.loads(pickle.dumps(em.Shape(2, 3))) == em.Shape(2, 3)
    assert type(pickle.loads(pickle.dumps(em.Shape(2, 3)))) is em.Shape
