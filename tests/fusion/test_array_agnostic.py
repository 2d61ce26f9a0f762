"""Fusion over an inner backend whose arrays are not NumPy's, checked without a GPU.

The inner backend is `StrictXp` (the Cuda backend's op path on NumPy arrays posing as device
arrays, `tests/backend_cuda/strict_xp.py`) with a kernel runtime that, like the CUDA one,
takes and returns device arrays only: a host array reaching a kernel or coming back from
one (``np.asarray`` of a device array, an ``np.empty`` output, ...) is a `LeakError`. So
every NumPy-ism in the fusion layer fails here, as it would on Fusion(Cuda)."""
from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import ember as em
from ember.backend import Fusion
from ember.backend.fusion.runtime import InterpretRuntime
from tests.backend_cuda.strict_xp import STRICT, DevArray, LeakError, StrictXp
from tests.conformance.cases import CASES
from tests.conformance.test_ops import _inputs, _run
from tests.fusion._util import UNFUSED, assert_close
from tests.fusion.test_chains import _run as run_chain
from tests.fusion.test_chains import programs


def _device_only(arrays, what):
    for i, a in enumerate(arrays):
        if not isinstance(a, DevArray):
            raise LeakError(f"{what} {i} is a {type(a).__name__}, not a device array")


class StrictRuntime:
    """The IR interpreter behind a device-array interface (CUDA's: device arrays in, new
    device arrays out, ``launch_into`` writing device arrays)."""

    name = "strict"
    features = InterpretRuntime.features

    def __init__(self):
        self._rt = InterpretRuntime()
        self.launches = 0

    def available(self):
        return True

    def compile(self, kernel):
        return kernel

    def launch(self, program, inputs, args):
        _device_only(inputs, "kernel input")
        self.launches += 1
        outs = self._rt.launch(program, [a.view(np.ndarray) for a in inputs], args)
        return [np.ascontiguousarray(o).view(DevArray) for o in outs]

    def launch_into(self, program, inputs, args, outputs):
        _device_only(outputs, "kernel output")
        for o, r in zip(outputs, self.launch(program, inputs, args)):
            o.view(np.ndarray)[...] = r.view(np.ndarray)

    def source(self, program):
        return repr(program)


class StrictFusionInner(StrictXp):
    """`StrictXp` with what Fusion asks of an inner backend."""

    name = "strict_fusion_inner"

    def __init__(self):
        super().__init__()
        self.kernel_runtime = StrictRuntime()
        #: op name -> registration, as the Cuda backend lists user kernels (Fusion leaves
        #: those ops unfused)
        self.custom_kernels = {}

    def as_array(self, prim):
        _device_only([prim], "a buffer Fusion reads")
        return prim

    def ascontiguous(self, prim):
        _device_only([prim], "a buffer Fusion copies")
        return STRICT.ascontiguousarray(prim)

    def describe(self):
        return "strict_fusion_inner"


@pytest.fixture(autouse=True)
def _strict(monkeypatch):
    """A failing fused plan raises (it would otherwise run unfused and hide the leak)."""
    monkeypatch.setenv("EMBER_FUSION_STRICT", "1")


def _device():
    b = Fusion(StrictFusionInner(), "auto", 0)
    assert b.fusing
    return b.device(0)


def test_the_runtime_refuses_host_arrays():
    rt = StrictRuntime()
    with pytest.raises(LeakError):
        rt.launch(None, [np.zeros(3)], [])


def test_kernels_run_on_device_arrays():
    dev = _device()
    rt = dev.backend.runtime
    before = rt.launches
    a = np.random.default_rng(0).normal(size=(8, 5)).astype(np.float32)
    x = em.tensor(a, device=dev)
    got = (em.softmax(x * 2.0, 1) + x.swap_dims(0, 1).sum(0).unsqueeze(1)).numpy()
    assert rt.launches > before
    u = em.tensor(a, device=UNFUSED)
    assert_close(got, (em.softmax(u * 2.0, 1) + u.swap_dims(0, 1).sum(0).unsqueeze(1)).numpy())


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs())
def test_chains_on_device_arrays(program):
    got = run_chain(program, _device())
    want = run_chain(program, UNFUSED)
    assert got.keys() == want.keys()
    for j in want:
        assert_close(got[j], want[j], rtol=1e-4, atol=2e-5, what=f"value {j} of {program}")


_PARAMS = [pytest.param(c, d, id=f"{c.name}-{d}") for c in CASES for d in c.dtypes
           if d in ("f32", "i32", "bool", "bf16")]


@pytest.mark.parametrize("case,dtype", _PARAMS)
def test_conformance_case_on_device_arrays(case, dtype):
    """Each conformance case (f32, i32, bool and bf16; contiguous and transposed inputs)
    through Fusion over device arrays, against the case's float64 reference."""
    device = _device()
    for layout in ("contiguous", "transposed"):
        for shapes in case.shapes:
            rng = np.random.default_rng(zlib.crc32(repr((case.name, dtype, shapes)).encode()))
            _run(case, _inputs(case, shapes, dtype, rng), device, layout, dtype)


def test_a_numpy_conversion_in_fusion_would_be_caught(monkeypatch):
    """The check can fail: an inner backend converting buffers to NumPy arrays (what the
    fusion layer once did itself) makes the kernel launch refuse them."""
    dev = _device()
    monkeypatch.setattr(StrictFusionInner, "as_array", staticmethod(np.asarray))
    a = em.tensor(np.ones((4, 4), np.float32), device=dev)
    b = em.tensor(np.ones((4, 4), np.float32), device=dev)
    assert type(a._prim).__name__ == "DevArray"
    with pytest.raises(LeakError):
        (a * np.float32(2) + b).numpy()


def test_an_op_with_a_registered_kernel_is_not_fused():
    dev = _device()
    custom = dev.backend.inner.custom_kernels
    a = np.random.default_rng(3).normal(size=(6, 7)).astype(np.float32)
    x = em.tensor(a, device=dev)
    want = 1.0 / (1.0 + np.exp(-2.0 * a.astype(np.float64))) + 1.0

    em.fusion.reset_stats()
    got = ((x * 2.0).sigmoid() + 1.0).numpy()
    st = em.fusion.stats()
    assert (st["kernels"], st["inner_ops"]) == (1, 0), st
    assert_close(got, want)

    custom["sigmoid"] = "a user kernel"
    try:
        em.fusion.reset_stats()
        got = ((x * 2.0).sigmoid() + 1.0).numpy()
        st = em.fusion.stats()
    finally:
        del custom["sigmoid"]
    # x * 2 is materialized for the inner backend's sigmoid; + 1 is a kernel of its own
    assert (st["kernels"], st["inner_ops"]) == (2, 1), st
    assert_close(got, want)


def test_adjacent_reduced_dims_of_a_ready_device_array_are_one_kernel():
    """A sum over dims 0 and 1 of a ready [B, T, d] array (a bias gradient) reads the two
    dims as one (a view of the buffer): one reduction kernel on a device array as on a NumPy
    one, where a kernel per dim wrote and read an intermediate."""
    dev = _device()
    rt = dev.backend.runtime
    a = np.random.default_rng(2).normal(size=(4, 6, 5)).astype(np.float32)
    x = em.tensor(a, device=dev)
    x.numpy()                                          # ready: a buffer, no pending node
    before = rt.launches
    got = x.sum((0, 1)).numpy()
    assert rt.launches - before == 1
    np.testing.assert_allclose(got, a.astype(np.float64).sum((0, 1)), rtol=1e-5)
    # a transposed buffer's dims do not merge: one kernel per dim, the same values
    y = em.tensor(np.ascontiguousarray(a.transpose(1, 0, 2)), device=dev).swap_dims(0, 1)
    y.numpy()
    before = rt.launches
    np.testing.assert_allclose(y.sum((0, 1)).numpy(), a.astype(np.float64).sum((0, 1)),
                               rtol=1e-5)
    assert rt.launches - before >= 1


def _ordered_device():
    """Fusion over device arrays with a small ``min_numel``, so that its rules about large
    transposed inputs apply to the small arrays of these tests."""
    b = Fusion(StrictFusionInner(), "auto", 16)
    return b.device(0), b.runtime


@pytest.mark.parametrize("bias_shape", [(1, 3, 1, 1), (3, 1, 1)])
def test_a_chain_over_a_transposed_input_runs_in_its_memory_order(bias_shape):
    """An elementwise chain reading a large input that is dense but not row-major (a conv
    output in channels-last order) is one kernel over the dims in that input's memory order
    (it ran op by op on the inner backend before); its result lies as the input does."""
    dev, rt = _ordered_device()
    rng = np.random.default_rng(0)
    a = rng.normal(size=(2, 5, 4, 3)).astype(np.float32)            # NHWC in memory
    bias = rng.normal(size=bias_shape).astype(np.float32)
    x = em.tensor(a, device=dev).permute(0, 3, 1, 2)                # logical NCHW
    xs = x.primitive.strides
    em.fusion.reset_stats()
    before = rt.launches
    y = ((x + em.tensor(bias, device=dev)).relu() * 2.0).primitive
    st = em.fusion.stats()
    assert rt.launches - before == 1 and st["kernels"] == 1
    assert st["inner_ops"] == 0 and st["eager_ops"] == 0
    assert y.shape == (2, 3, 5, 4) and y.strides == xs              # channels-last too
    want = np.maximum(a.transpose(0, 3, 1, 2) + bias.reshape((1,) * (4 - len(bias_shape))
                                                            + bias_shape), 0) * 2
    np.testing.assert_array_equal(np.asarray(y), want)


def test_a_chain_over_a_strided_transposed_input_runs_unfused():
    """Not dense (every other column): no memory order to run in, so the inner backend runs
    the ops, as before."""
    dev, rt = _ordered_device()
    a = np.random.default_rng(1).normal(size=(2, 5, 4, 6)).astype(np.float32)
    x = em.tensor(a, device=dev).permute(0, 3, 1, 2)[:, ::2]
    em.fusion.reset_stats()
    y = ((x + 1.0).relu() * 2.0).numpy()
    assert em.fusion.stats()["inner_ops"] + em.fusion.stats()["eager_ops"] >= 3
    np.testing.assert_allclose(y, np.maximum(a.transpose(0, 3, 1, 2)[:, ::2] + 1, 0) * 2,
                               rtol=1e-6)
