"""Interop: DLPack zero-copy exchange with NumPy and PyTorch (memory sharing checked by
address), NumPy's array and ufunc protocols, and ``tensor.primitive``."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ember as em
from ember.errors import DTypeError

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

ND = em.device("cpu")
AD = ND.autodiff()
NP_NAMES = ("f64", "f32", "f16", "i64", "i32", "i16", "i8", "u8", "bool")
TORCH = None if torch is None else {
    "f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
    "i64": torch.int64, "i32": torch.int32, "i16": torch.int16, "i8": torch.int8,
    "u8": torch.uint8, "bool": torch.bool}


def addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def sample(name, shape=(3, 4)):
    d = em.dtype.from_name(name)
    rng = np.random.default_rng(0)
    if d.kind == "float":
        return rng.normal(size=shape).astype(d.np)
    if d.kind == "bool":
        return rng.random(shape) < 0.5
    return rng.integers(0, 100, size=shape).astype(d.np)


# -- tensor.primitive and __array__ ---------------------------------------------------------
def test_primitive_is_the_numpy_array():
    t = em.tensor([[1.0, 2.0], [3.0, 4.0]])
    p = t.primitive
    assert type(p) is np.ndarray and p.dtype == np.float32 and p.shape == (2, 2)
    np.testing.assert_array_equal(p, [[1, 2], [3, 4]])
    # on an autodiff device it is the inner backend's buffer
    u = t.to_device(AD).require_grad()
    assert type(u.primitive) is np.ndarray and addr(u.primitive) == addr(p)
    assert em.tensor([1.0], dtype="bf16").primitive.dtype == ml_dtypes.bfloat16


def test_from_numpy_shares_memory_and_tensor_copies():
    a = np.arange(6.0).reshape(2, 3)
    assert addr(em.from_numpy(a).primitive) == addr(a)
    assert not np.shares_memory(em.tensor(a).primitive, a)


def test_array_protocol_shares_host_memory():
    t = em.tensor(np.arange(5.0))
    assert np.shares_memory(np.asarray(t), t.primitive)


# -- DLPack with NumPy ----------------------------------------------------------------------
@pytest.mark.parametrize("name", NP_NAMES)
@pytest.mark.parametrize("device", [ND, AD], ids=["ndarray", "autodiff"])
def test_numpy_from_dlpack_is_zero_copy(name, device):
    t = em.tensor(sample(name), dtype=name, device=device)
    assert t.__dlpack_device__() == (1, 0)          # kDLCPU, device 0
    a = np.from_dlpack(t)
    assert a.dtype == t.dtype.np and a.shape == (3, 4)
    assert np.shares_memory(a, t.primitive) and addr(a) == addr(t.primitive)
    np.testing.assert_array_equal(a, t.numpy())


@pytest.mark.parametrize("name", NP_NAMES)
def test_em_from_dlpack_of_numpy_is_zero_copy(name):
    a = sample(name)
    t = em.from_dlpack(a)
    assert t.dtype.short == name and t.shape == (3, 4) and t.device is ND
    assert addr(t.primitive) == addr(a)
    u = em.from_dlpack(a, device=AD)
    assert u.device is AD and not u.is_require_grad() and addr(u.primitive) == addr(a)
    # a view with strides travels as one too
    v = em.from_dlpack(a[:, ::2])
    assert v.shape == (3, 2) and addr(v.primitive) == addr(a)
    np.testing.assert_array_equal(v.numpy(), a[:, ::2])


def test_em_from_dlpack_of_an_ember_tensor():
    t = em.tensor([1.0, 2.0, 3.0])
    u = em.from_dlpack(t)
    assert addr(u.primitive) == addr(t.primitive)
    np.testing.assert_array_equal(u.numpy(), [1, 2, 3])


def test_shared_memory_is_visible_both_ways():
    a = np.zeros(3, np.float32)
    t = em.from_dlpack(a)
    a[1] = 5.0
    assert t.tolist() == [0.0, 5.0, 0.0]


def test_expanded_views_export_read_only():
    t = em.tensor([[1.0], [2.0]]).expand(2, 3)
    a = np.from_dlpack(t)
    assert a.shape == (2, 3) and not a.flags.writeable and addr(a) == addr(t.primitive)
    np.testing.assert_array_equal(a, [[1, 1, 1], [2, 2, 2]])


def test_dlpack_errors():
    with pytest.raises(DTypeError, match="does not support DLPack"):
        em.from_dlpack([1, 2, 3])
    with pytest.raises(DTypeError, match="uint32 has no ember dtype"):
        em.from_dlpack(np.zeros(2, np.uint32))
    with pytest.raises(DTypeError):
        em.from_dlpack(np.zeros(2, np.complex64))


def test_bf16_to_numpy_through_dlpack_is_refused_by_numpy():
    # NumPy's DLPack importer knows no bf16 (ember exports it as DLPack kDLBfloat);
    # np.asarray(t) is the NumPy route for bf16.
    t = em.tensor([1.5, 2.0], dtype="bf16")
    with pytest.raises((RuntimeError, BufferError, TypeError)):
        np.from_dlpack(t)
    assert np.asarray(t).dtype == ml_dtypes.bfloat16
    assert addr(np.asarray(t)) == addr(t.primitive)


# -- DLPack with PyTorch --------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("name", NP_NAMES + ("bf16",))
def test_torch_from_dlpack_is_zero_copy(name):
    t = em.tensor(sample(name), dtype=name)
    x = torch.from_dlpack(t)
    assert x.dtype == TORCH[name] and tuple(x.shape) == (3, 4)
    assert x.data_ptr() == addr(t.primitive)
    np.testing.assert_array_equal(x.float().numpy(), t.numpy().astype(np.float32))


@needs_torch
@pytest.mark.parametrize("name", NP_NAMES + ("bf16",))
def test_em_from_dlpack_of_torch_is_zero_copy(name):
    x = torch.from_numpy(sample(name).astype(np.float32)).to(TORCH[name])
    t = em.from_dlpack(x)
    assert t.dtype.short == name and t.shape == (3, 4)
    assert addr(t.primitive) == x.data_ptr()
    np.testing.assert_array_equal(t.numpy().astype(np.float32), x.float().numpy())
    # changes made through torch are seen by ember (shared memory)
    x[0, 0] = 1
    assert t.numpy()[0, 0] == 1


@needs_torch
def test_torch_round_trip_of_non_contiguous_and_autodiff():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()
    t = em.from_dlpack(x, device=AD)
    assert t.shape == (4, 3) and t.device is AD and addr(t.primitive) == x.data_ptr()
    np.testing.assert_array_equal(t.numpy(), x.numpy())
    w = t.require_grad()
    g = w.grad((w * 2.0).sum().backward())
    np.testing.assert_array_equal(torch.from_dlpack(g).numpy(), np.full((4, 3), 2.0))
    y = torch.from_dlpack(w)
    assert y.data_ptr() == x.data_ptr() and tuple(y.stride()) == tuple(x.stride())


@needs_torch
def test_bf16_round_trip_with_torch_keeps_bits():
    x = torch.tensor([1.0, -2.5, 3.140625, 1e30], dtype=torch.bfloat16)
    t = em.from_dlpack(x)
    assert t.dtype is em.bf16
    assert t.primitive.view(np.uint16).tolist() == x.view(torch.int16).numpy().astype(
        np.uint16).tolist()
    y = torch.from_dlpack(t)
    assert y.dtype == torch.bfloat16 and torch.equal(x, y) and y.data_ptr() == x.data_ptr()


# -- NumPy ufuncs and scalars ---------------------------------------------------------------
def test_numpy_scalars_combine_weakly_and_give_tensors():
    t = em.tensor([1.0, 2.0])                       # f32
    for out in (np.float64(2.0) + t, t + np.float64(2.0), np.float64(2.0) * t):
        assert isinstance(out, em.Tensor) and out.dtype is em.f32
    r = np.float64(2.0) - t
    assert isinstance(r, em.Tensor) and r.tolist() == [1.0, 0.0]
    i8 = em.tensor([1, 2], dtype="i8")
    out = np.int64(3) * i8
    assert isinstance(out, em.Tensor) and out.dtype is em.i8 and out.tolist() == [3, 6]
    assert (np.float32(0.5) < t).tolist() == [True, True]


def test_numpy_ufuncs_on_tensors_run_ember_ops():
    t = em.tensor([0.0, 1.0])
    e = np.exp(t)
    assert isinstance(e, em.Tensor) and e.dtype is em.f32
    np.testing.assert_allclose(e.numpy(), np.exp([0.0, 1.0]), rtol=1e-6)
    assert isinstance(np.add(t, 1.0), em.Tensor)
    assert isinstance(np.negative(t), em.Tensor)


def test_numpy_arrays_and_tensors_do_not_mix_silently():
    t = em.tensor([1.0, 2.0])
    with pytest.raises(DTypeError, match="NumPy array of shape \\(2,\\)"):
        np.ones(2) + t
    with pytest.raises(DTypeError, match="convert"):
        t + np.ones(2)
    with pytest.raises(DTypeError, match="out"):
        np.add(t, 1.0, out=np.zeros(2))
    with pytest.raises(DTypeError, match="reduce"):
        np.add.reduce(t)
