"""ember.errors: each bad input raises the right exception, whose message names the op, the
shapes, dtypes or devices involved, and what would be valid."""
from __future__ import annotations

import builtins

import numpy as np
import pytest

import ember as em
from ember import errors
from ember.errors import AutodiffError, DeviceError, DTypeError, IndexError_, ShapeError

ND = em.device("cpu")
AD = ND.autodiff()
C1 = em.device("cpu:1")


def message(exc_type, fn):
    with pytest.raises(exc_type) as info:
        fn()
    return str(info.value)


def test_hierarchy():
    for cls in (ShapeError, DTypeError, DeviceError, IndexError_, AutodiffError,
                errors.RecordError, errors.BackendUnavailableError):
        assert issubclass(cls, errors.EmberError)
    # each is also the builtin a caller would expect
    assert issubclass(ShapeError, ValueError) and issubclass(DTypeError, TypeError)
    assert issubclass(IndexError_, builtins.IndexError) and errors.IndexError is IndexError_
    assert issubclass(AutodiffError, RuntimeError) and issubclass(DeviceError, ValueError)


# -- devices --------------------------------------------------------------------------------
@pytest.mark.parametrize("other", [AD, C1], ids=["autodiff-cpu0", "ndarray-cpu1"])
def test_mixing_devices(other):
    a = em.zeros(2, 3)
    b = em.zeros(2, 3, device=other)
    for fn, op in [(lambda: a + b, "add"), (lambda: b * a, "mul"), (lambda: a - b, "sub")]:
        m = message(DeviceError, fn)
        assert m.startswith(op + ":"), m
        assert str(ND) in m and str(other) in m and "to_device" in m
    # after moving, it works
    assert (a + b.to_device(ND)).shape == (2, 3)


def test_mixing_devices_in_other_ops():
    a = em.zeros(2, 2)
    b = em.zeros(2, 2, device=C1)
    m = message(DeviceError, lambda: em.cat([a, b]))
    assert "cat" in m and "cpu:0" in m and "cpu:1" in m
    m = message(DeviceError, lambda: em.where(a == 0, a, b))
    assert "where" in m and "cpu:1" in m
    m = message(DeviceError, lambda: a @ b)
    assert "matmul" in m and "cpu:1" in m


def test_unknown_devices():
    m = message(DeviceError, lambda: em.device("tpu"))
    assert "tpu" in m and "'cpu'" in m
    if not em.cuda.is_available():   # with a GPU, em.device("cuda") works
        m = message(errors.BackendUnavailableError, lambda: em.device("cuda"))
        assert "cuda" in m and em.cuda.why_unavailable() in m


# -- dtypes ---------------------------------------------------------------------------------
def test_float_only_op_on_ints():
    m = message(DTypeError, lambda: em.tensor([1, 2]).exp())
    assert m.startswith("exp:") and "i64" in m and "float" in m and "f32" in m
    m = message(DTypeError, lambda: em.tensor([True]).log())
    assert m.startswith("log:") and "bool" in m


def test_int_only_op_on_floats():
    m = message(DTypeError, lambda: em.bitwise_and(em.zeros(2), em.zeros(2)))
    assert m.startswith("bitwise_and:") and "f32" in m and "int" in m


def test_bool_arithmetic():
    b = em.tensor([True])
    m = message(DTypeError, lambda: b + b)
    assert m.startswith("add:") and "bool" in m and "float or int" in m


def test_scalar_that_does_not_fit():
    m = message(DTypeError, lambda: em.tensor([1], dtype="i8") + 1000)
    assert "add" in m and "1000" in m and "i8" in m and "-128..127" in m


def test_foreign_operands_and_unknown_dtypes():
    m = message(DTypeError, lambda: em.zeros(3) + [1, 2, 3])
    assert "add" in m and "list" in m and "em.tensor" in m
    m = message(DTypeError, lambda: em.zeros(3).cast("f128"))
    assert "f128" in m and "f32" in m and "bf16" in m


def test_require_grad_of_ints():
    m = message(AutodiffError, lambda: em.tensor([1], device=AD).require_grad())
    assert "require_grad" in m and "i64" in m and "float" in m


# -- dims and indices -----------------------------------------------------------------------
def test_dim_out_of_range():
    a = em.zeros(2, 3)
    m = message(IndexError_, lambda: a.sum(dim=5))
    assert m.startswith("sum:") and "dim 5" in m and "2 dims" in m and "-2..1" in m
    m = message(IndexError_, lambda: a.sum(dim=-3))
    assert "dim -3" in m and "-2..1" in m
    with pytest.raises(builtins.IndexError):     # also catchable as the builtin
        a.sum(dim=2)


def test_select_index_out_of_range():
    t = em.zeros(3, 4)
    m = message(IndexError_, lambda: t.select(0, 5))
    assert m.startswith("select:") and "index 5" in m and "size 3" in m and "-3..2" in m
    m = message(IndexError_, lambda: t.select(2, 0))
    assert "select" in m and "dim 2" in m
    m = message(IndexError_, lambda: t[5])
    assert "5" in m and "3" in m


def test_gather_and_index_select_out_of_range():
    t = em.zeros(3, 4)
    m = message(IndexError_, lambda: t.gather(1, em.tensor([[0], [4], [1]])))
    assert m.startswith("gather:") and "index 4" in m and "size 4" in m and "0..3" in m
    m = message(IndexError_, lambda: t.index_select(0, em.tensor([0, 3])))
    assert m.startswith("index_select:") and "index 3" in m and "0..2" in m


# -- shapes ---------------------------------------------------------------------------------
def test_reshape_to_the_wrong_element_count():
    m = message(ShapeError, lambda: em.zeros(2, 3).reshape(4, 2))
    assert m.startswith("reshape:") and "(2, 3)" in m and "(4, 2)" in m
    assert "6" in m and "8" in m


def test_broadcast_mismatch_names_the_dim():
    m = message(ShapeError, lambda: em.zeros(2, 3) + em.zeros(4, 3))
    assert m.startswith("add:") and "(2, 3)" in m and "(4, 3)" in m
    assert "dim 0" in m and "2 vs 4" in m and "be 1" in m
    m = message(ShapeError, lambda: em.zeros(5, 2, 3) * em.zeros(4, 1))
    assert m.startswith("mul:") and "dim 1" in m and "2 vs 4" in m


def test_negative_sizes():
    m = message(ShapeError, lambda: em.zeros(-1, 2))
    assert "zeros" in m and "(-1, 2)" in m and ">= 0" in m


def test_one_element_conversions():
    m = message(ShapeError, lambda: em.zeros(2, 3).item())
    assert "item" in m and "(2, 3)" in m


def test_matmul_inner_dims():
    m = message(ShapeError, lambda: em.zeros(2, 3) @ em.zeros(4, 5))
    assert m.startswith("matmul:") and "(2, 3)" in m and "(4, 5)" in m
    assert "3" in m and "4" in m
    m = message(ShapeError, lambda: em.matmul(em.zeros(3), em.zeros(4)))
    assert "matmul" in m
    with pytest.raises(ShapeError, match="matmul"):
        em.zeros(2, 2, 3) @ em.zeros(3, 3, 5)        # batch dims 2 vs 3


def test_linear_weight_mismatch():
    m = message(ShapeError, lambda: em.linear(em.zeros(2, 3), em.zeros(4, 5)))
    assert "linear" in m and "(2, 3)" in m and "(4, 5)" in m


@pytest.mark.parametrize("fn,name", [
    (lambda: em.conv2d(em.zeros(1, 3, 8, 8), em.zeros(4, 2, 3, 3)), "conv2d"),
    (lambda: em.conv1d(em.zeros(1, 3, 8), em.zeros(4, 2, 3)), "conv1d"),
])
def test_conv_weight_channels(fn, name):
    m = message(ShapeError, fn)
    assert m.startswith(name + ":") and "3 channels" in m and "2" in m
    assert "(1, 3, 8" in m and "expected a weight of shape" in m


# -- autodiff -------------------------------------------------------------------------------
def test_autodiff_errors():
    m = message(AutodiffError, lambda: em.zeros(2, device=AD).sum().backward())
    assert "backward" in m and "not tracked" in m and "require_grad" in m
    m = message(AutodiffError, lambda: em.zeros(2).sum().backward())
    assert "backward" in m and str(em.default_device()) in m and "autodiff" in m
    x = em.zeros(2, device=AD).require_grad()
    loss = (x * 2.0).sum()
    loss.backward()
    m = message(AutodiffError, loss.backward)
    assert "already freed" in m and "sum" in m and "forward pass" in m


def test_errors_are_raised_before_any_work():
    # shapes are checked where the op is built: a bad op leaves no graph behind
    from ember.backend.autodiff import live_nodes
    x = em.zeros(2, 3, device=AD).require_grad()
    base = live_nodes()
    with pytest.raises(ShapeError):
        x + em.zeros(4, 3, device=AD)
    assert live_nodes() == base
    np.testing.assert_array_equal(x.numpy(), np.zeros((2, 3)))


@pytest.mark.parametrize("spec", ["cuda:x", "cpu:", "cpu:-1"])
def test_device_with_a_bad_index(spec):
    with pytest.raises(DeviceError, match="device"):
        em.device(spec)
