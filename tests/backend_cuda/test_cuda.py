"""The Cuda backend on a GPU: data movement, streams and threads, memory, matmul precision,
random streams and interop. Skipped by name where no CUDA device is usable."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import ember as em
from ember.errors import DeviceError, OutOfMemoryError

pytestmark = pytest.mark.skipif(not em.cuda.is_available(),
                                reason=f"cuda: {em.cuda.why_unavailable()}")

ALL = ("f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8", "u8", "bool")


@pytest.fixture
def dev():
    return em.device("cuda", fusion=False)     # the plain Cuda backend (Fusion: tests/fusion)


@pytest.mark.parametrize("d", ALL)
def test_round_trip_every_dtype(dev, d):
    rng = np.random.default_rng(0)
    a = (rng.normal(size=(3, 5)) * 10).astype(em.dtype.as_dtype(d).np)
    t = em.tensor(a, device=dev)
    assert t.dtype.short == d and t.device is dev
    got = t.numpy()
    assert got.dtype == a.dtype
    np.testing.assert_array_equal(got.view(np.uint8), a.view(np.uint8))
    assert t.primitive.dtype == a.dtype   # bf16 is CuPy's own bf16 (ml_dtypes)


def test_device_names(dev):
    import cupy
    assert em.device("cuda:0", fusion=False) is dev and em.device("gpu", fusion=False) is dev
    fused = em.device("cuda")                  # Fusion(Cuda), the default
    assert fused.backend.inner is dev.backend and fused is em.device("gpu:0")
    assert dev.kind == "cuda" and "cuda" in str(dev)
    assert isinstance(em.zeros(2, device=dev).primitive, cupy.ndarray)
    with pytest.raises(DeviceError, match="cuda:99"):
        em.device("cuda:99")


def test_results_match_numpy(dev):
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(64, 32)), rng.normal(size=(32, 16))
    x, y = em.tensor(a, device=dev), em.tensor(b, device=dev)
    out = ((x @ y).exp().sum(1) / 3.0).numpy()
    np.testing.assert_allclose(out, (np.exp(a.astype(np.float32) @ b.astype(np.float32))
                                     .sum(1) / 3), rtol=1e-5)


def test_per_thread_streams(dev):
    b = dev.backend
    main = b.scope(0).stream
    seen = []
    t = threading.Thread(target=lambda: seen.append(b.scope(0).stream))
    t.start()
    t.join()
    assert seen[0].ptr != main.ptr and main.ptr != 0
    import cupy
    assert cupy.cuda.get_current_stream().ptr != main.ptr   # current only around ops


def test_tensors_cross_threads(dev):
    """A tensor computed on one thread's stream and used on another's is ordered."""
    out = {}

    def work():
        x = em.ones((2048, 2048), device=dev)
        for _ in range(20):
            x = x @ x * (1.0 / 2048)          # long work queued on this thread's stream
        out["x"] = x

    t = threading.Thread(target=work)
    t.start()
    t.join()
    y = out.pop("x") + 1.0
    np.testing.assert_allclose(y.numpy(), 2.0, rtol=1e-5)


@pytest.mark.parametrize("reader", ["legacy default stream", "user stream"])
def test_primitive_is_ordered_for_the_readers_stream(dev, reader):
    """Long work queued on ember's stream, then the primitive read on the caller's stream
    with no sync: the legacy default stream is ordered by ember's streams being blocking
    (no event), any other stream by an event."""
    import cupy
    x = em.ones((2048, 2048), device=dev)
    for _ in range(20):
        x = x @ x * (1.0 / 2048)
    x = x + 1.0
    stream = cupy.cuda.Stream.null if reader == "legacy default stream" \
        else cupy.cuda.Stream(non_blocking=True)
    with stream:
        prim = x.primitive
        total = float(prim.sum())          # runs and reads on ``stream``
    assert total == 2.0 * 2048 * 2048


def test_sync_waits_for_queued_work(dev):
    x = em.random((4096, 4096), device=dev)
    y = x @ x
    em.sync(dev)
    import cupy
    assert cupy.cuda.get_current_stream().done
    assert y.shape == (4096, 4096)


def test_memory_stats_and_empty_cache(dev):
    em.cuda.empty_cache()
    before = em.cuda.memory_stats(dev)
    x = em.zeros((1 << 20,), device=dev)   # 4 MiB
    mid = em.cuda.memory_stats("cuda:0")
    assert mid["in_use"] >= before["in_use"] + (4 << 20)
    assert mid["reserved"] >= mid["in_use"]
    del x
    em.cuda.empty_cache()
    after = em.cuda.memory_stats(0)
    assert after["reserved"] <= mid["reserved"] - (4 << 20)
    assert set(after) == {"in_use", "reserved", "device_free", "device_total"}


def test_out_of_memory_says_what_happened(dev):
    with pytest.raises(OutOfMemoryError) as e:
        em.zeros((1 << 45,), dtype="u8", device=dev)     # 32 TiB
    m = str(e.value)
    assert "full:" in m and "cuda:0" in m and "35,184,372,088,832 bytes" in m and "free" in m
    assert isinstance(e.value, MemoryError)


def _matmul_err(dev, dtype, k=2048):
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(256, k)), rng.normal(size=(k, 256))
    ref = a @ b
    got = (em.tensor(a, dtype=dtype, device=dev) @ em.tensor(b, dtype=dtype, device=dev))
    return np.abs(got.numpy().astype(np.float64) - ref).max() / np.abs(ref).max()


def test_matmul_precision(dev):
    assert _matmul_err(dev, "f32") < 1e-5                # full f32 by default
    try:
        em.set_matmul_precision("tf32")
        tf32 = _matmul_err(dev, "f32")
    finally:
        em.set_matmul_precision("highest")
    assert 1e-5 < tf32 < 5e-3                             # TF32: 10 mantissa bits
    assert _matmul_err(dev, "f16") < 2e-3
    assert _matmul_err(dev, "bf16") < 1.6e-2


def test_batched_broadcast_matmul(dev):
    rng = np.random.default_rng(3)
    for d in ("f64", "f32", "f16", "bf16"):
        a, b = rng.normal(size=(2, 1, 5, 7)), rng.normal(size=(3, 7, 4))
        got = em.tensor(a, dtype=d, device=dev) @ em.tensor(b, dtype=d, device=dev)
        tol = {"f64": 1e-12, "f32": 1e-5, "f16": 4e-3, "bf16": 3e-2}[d]
        np.testing.assert_allclose(got.numpy().astype(np.float64), a @ b, rtol=tol,
                                   atol=tol * 10)


def test_seeding(dev):
    dev.seed(7)
    a = em.random((1000,), em.Normal(), device=dev).numpy()
    dev.seed(7)
    b = em.random((1000,), em.Normal(), device=dev).numpy()
    c = em.random((1000,), em.Normal(), device=dev).numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(b, c)
    assert abs(a.mean()) < 0.15 and 0.85 < a.std() < 1.15
    u = em.random((10000,), dtype="bf16", device=dev).numpy().astype(np.float32)
    assert 0.0 <= u.min() and u.max() < 1.0


def test_dlpack_with_cupy_zero_copy(dev):
    import cupy
    t = em.arange(0, 12, 1, dtype="f32", device=dev).reshape(3, 4)
    c = cupy.from_dlpack(t)
    assert c.data.ptr == t.primitive.data.ptr
    np.testing.assert_array_equal(cupy.asnumpy(c), np.arange(12.0).reshape(3, 4))
    back = em.from_dlpack(c, device=dev)
    assert back.primitive.data.ptr == c.data.ptr


def test_cuda_array_interface(dev):
    import cupy
    t = em.ones((4, 3), device=dev) * 2.0
    cai = t.__cuda_array_interface__
    assert cai["shape"] == (4, 3) and cai["data"][0] == t.primitive.data.ptr
    assert cai["version"] == 3 and cai["stream"] == dev.backend.scope(0).stream.ptr
    c = cupy.asarray(t)                                       # zero-copy through the CAI
    assert c.data.ptr == t.primitive.data.ptr and float(c.sum()) == 24.0
    with pytest.raises(AttributeError):
        em.ones(2).__cuda_array_interface__                    # a CPU tensor has none


def test_dlpack_with_torch_zero_copy(dev):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("torch: this PyTorch build has no CUDA")
    t = em.arange(0, 6, 1, dtype="f32", device=dev)
    tt = torch.from_dlpack(t)
    assert tt.is_cuda and tt.data_ptr() == t.primitive.data.ptr
    src = torch.arange(5, device="cuda", dtype=torch.float16) * 2
    e = em.from_dlpack(src, device=dev)
    assert e.primitive.data.ptr == src.data_ptr() and e.dtype.short == "f16"
    np.testing.assert_array_equal(e.numpy(), np.arange(5) * 2)
    b = torch.ones(3, device="cuda", dtype=torch.bfloat16)
    eb = em.from_dlpack(b, device=dev)
    assert eb.dtype.short == "bf16" and eb.primitive.data.ptr == b.data_ptr()
    assert torch.from_dlpack(eb).dtype == torch.bfloat16


def test_dlpack_with_jax(dev):
    jax = pytest.importorskip("jax", reason="JAX is not installed")
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    if not gpus:
        pytest.skip("jax: no GPU backend")
    t = em.arange(0, 8, 1, dtype="f32", device=dev)
    j = jax.dlpack.from_dlpack(t)
    np.testing.assert_array_equal(np.asarray(j), np.arange(8.0))
    back = em.from_dlpack(jax.numpy.arange(4.0, dtype="float32") + 1, device=dev)
    np.testing.assert_array_equal(back.numpy(), np.arange(4.0) + 1)


def test_from_dlpack_refuses_host_memory(dev):
    with pytest.raises(DeviceError, match="em.tensor"):
        em.from_dlpack(np.zeros(3), device=dev)


def test_index_errors_are_ember_errors(dev):
    x = em.zeros((4, 3), device=dev)
    with pytest.raises(em.errors.IndexError):      # checked on the device: at the read
        x.index_select(0, em.tensor([0, 7], device=dev)).numpy()


def test_training_step_runs(dev):
    from ember import nn
    ad = dev.autodiff()
    lin = nn.Linear(8, 4, device=ad)
    x = em.random((16, 8), device=ad)
    loss = lin(x).relu().sum()
    grads = loss.backward()
    g = lin.weight.grad(grads)
    assert g.shape == lin.weight.shape and g.device.kind == "cuda"


def test_kernel_runtime_launches_on_the_backend_stream(dev):
    """Fusion(Cuda)'s generated kernels go on the stream the backend's ops use."""
    import cupy
    from ember.backend.cuda.kernel_runtime import ScopedKernelRuntime

    class Recorder:
        features = frozenset()

        def compile(self, kernel):
            return kernel

        def launch(self, program, inputs, args=()):
            self.stream = cupy.cuda.get_current_stream().ptr
            return [inputs[0] + 1]

    rec = Recorder()
    rt = ScopedKernelRuntime(rec, dev.backend)
    x = em.ones(3, device=dev).primitive
    (out,) = rt.launch(rt.compile("k"), [x], ())
    assert rec.stream == dev.backend.scope(0).stream.ptr
    assert rt.features == frozenset()
    em.sync(dev)
    np.testing.assert_array_equal(out.get(), 2.0)
