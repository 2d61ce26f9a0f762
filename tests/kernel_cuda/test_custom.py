"""User kernels: the registry of hand-written op implementations (no GPU needed), the
`CustomKernel` wrapper on a GPU, and the example that shows both."""
from __future__ import annotations

import numpy as np
import pytest

from ember.errors import ConfigError
from ember.kernel.cuda import (CustomKernel, has_kernel, lookup, register_kernel, registered,
                               unregister)
from tests.kernel_cuda._util import gpu_or_skip


def test_register_lookup_remove():
    def impl(x):
        return x
    reg = register_kernel("relu", impl, dtypes=["f32", "float16"])
    try:
        assert has_kernel("relu") and registered()["relu"] is reg
        assert lookup("relu", ["float32"]) is impl
        assert lookup("relu", [np.float16]) is impl
        assert lookup("relu", ["f64"]) is None            # a dtype it does not handle
        assert lookup("exp") is None
    finally:
        reg.remove()
    assert not has_kernel("relu")


def test_decorator_and_context_manager():
    @register_kernel("exp")
    def my_exp(x):
        return x
    assert lookup("exp", ["f64"]) is my_exp
    assert unregister("exp") and not unregister("exp")
    with register_kernel("tanh", my_exp):
        assert has_kernel("tanh")
    assert not has_kernel("tanh")


def test_bad_registrations_raise():
    with pytest.raises(ConfigError, match="not a registry op"):
        register_kernel("attention_please", lambda x: x)
    with pytest.raises(ConfigError, match="callable"):
        register_kernel("relu", 3)
    reg = register_kernel("relu", lambda x: x)
    try:
        with pytest.raises(ConfigError, match="already"):
            register_kernel("relu", lambda x: x, replace=False)
    finally:
        reg.remove()
    with pytest.raises(ConfigError):
        CustomKernel("extern \"C\" __global__ void a() {}", "b")


def test_custom_kernel_on_gpu(tmp_path):
    gpu_or_skip(tmp_path)
    import cupy as cp
    k = CustomKernel(r"""
    extern "C" __global__ void axpy(const float *x, float *y, float a, long long n) {
      long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
      if (i < n) y[i] = a * x[i] + y[i];
    }""", "axpy")
    x = cp.arange(1000, dtype=cp.float32)
    y = cp.ones(1000, dtype=cp.float32)
    k((4,), (256,), (x, y, cp.float32(2.0), 1000))
    assert (y.get() == 2 * np.arange(1000, dtype=np.float32) + 1).all()
    k2 = CustomKernel(k.source, "axpy", options=["--use_fast_math"])
    k2(4, 256, (x, y, cp.float32(1.0), 1000))
    assert (y.get() == 3 * np.arange(1000, dtype=np.float32) + 1).all()


def test_example_runs_or_skips(tmp_path):
    from tests.test_examples import run_example
    res, out = run_example("custom_cuda_kernel", "--batch-heads", "4", "--seq", "64",
                           tmp_path=tmp_path, timeout=300)
    if "skipped" in res:
        assert "skipped:" in out and res["skipped"]
        pytest.skip(f"example skipped itself: {res['skipped']}")
    assert res["attention_max_err"] < 1e-4, res
    assert res["sigmoid_max_err"] < 1e-5, res
    assert res["registered_kernel_used"] is True, res


def _cuda_devices_or_skip():
    import ember as em
    from ember.backend.fusion.registration import fusion_cuda_reason
    why = fusion_cuda_reason()
    if why:
        pytest.skip(f"fusion(cuda): {why}")
    from ember.backend import Fusion
    from ember.backend.cuda import Cuda
    # Fusion fusing every op however small (em.device("cuda") runs small ops unrecorded)
    return em.device("cuda", fusion=False), Fusion(Cuda(), "auto", 0).device(0)


@pytest.mark.parametrize("fused", [False, True], ids=["cuda", "fusion(cuda)"])
def test_registered_kernel_runs_instead_of_the_backends(fused):
    plain, fusion = _cuda_devices_or_skip()       # skips before CuPy is imported
    import cupy as cp

    import ember as em
    dev = fusion if fused else plain
    calls = []

    def my_exp(x):
        assert isinstance(x, cp.ndarray) and x.flags.c_contiguous
        calls.append(x.shape)
        return cp.exp(x) + 0.0        # computed here, not by the backend

    a = np.random.default_rng(0).normal(size=(64, 33)).astype(np.float32)
    x = em.tensor(a, device=dev)
    em.fusion.reset_stats()
    with register_kernel("exp", my_exp, dtypes=["float32"]):
        y = ((x * 2.0).swap_dims(0, 1).exp() + 1.0).numpy()
        assert calls == [(33, 64)]
        z = (x.double().exp()).numpy()          # f64: not the registered dtypes
        assert calls == [(33, 64)]
    np.testing.assert_allclose(y, np.exp(2.0 * a.T.astype(np.float64)) + 1, rtol=1e-5)
    np.testing.assert_allclose(z, np.exp(a.astype(np.float64)), rtol=1e-12)
    if fused:
        # the ops around it still fuse: x*2 (one kernel), exp (the user's), +1 (one kernel)
        st = em.fusion.stats()
        assert st["kernels"] >= 2 and st["inner_ops"] >= 1, st
    (x.exp() + 1.0).numpy()                      # unregistered: not called any more
    assert calls == [(33, 64)]


def test_registered_kernel_with_a_wrong_result_is_an_error():
    plain, _ = _cuda_devices_or_skip()            # skips before CuPy is imported
    import cupy as cp

    import ember as em
    from ember.errors import DTypeError, ShapeError
    x = em.tensor(np.ones((4, 3), np.float32), device=plain)
    with register_kernel("exp", lambda x: cp.ones((3, 4), cp.float32)):
        with pytest.raises(ShapeError, match=r"exp.*\(3, 4\).*\(4, 3\)"):
            x.exp().numpy()
    with register_kernel("exp", lambda x: cp.ones((4, 3), cp.float64)):
        with pytest.raises(DTypeError, match="float64"):
            x.exp().numpy()
