"""The Cuda backend's embedding and its backward (ember/backend/cuda/embedding.py): the source
compiles with NVRTC wherever it is found; without a GPU the host code runs over NumPy with
each kernel re-enacted in NumPy, index arithmetic as in its source (wrapped rows, the
scatter-add's sum); on a GPU both ops match float64 NumPy on Cuda and Fusion(Cuda), with
repeated indices and every index dtype."""
from __future__ import annotations

import types

import numpy as np
import pytest

import ember as em
from ember.backend.cuda import embedding as E
from ember.backend.cuda import ops as cuda_ops
from ember.kernel.cuda.compiler import default_arch
from ember.ops import nn as N
from tests.kernel_cuda._util import nvrtc_or_skip

gpu = pytest.mark.skipif(not em.cuda.is_available(),
                         reason=f"cuda: {em.cuda.why_unavailable()}")


@pytest.mark.parametrize("arch", [None, 52], ids=["default", "sm_52"])
def test_embed_source_compiles(tmp_path, arch):
    """(sm_52: no f64 atomicAdd, the compare-and-swap loop instead)"""
    compiler = nvrtc_or_skip(tmp_path)
    archs = compiler.nvrtc.archs
    if arch is not None and archs and min(archs) > arch:
        pytest.skip(f"NVRTC {compiler.nvrtc.version[0]}.{compiler.nvrtc.version[1]} cannot "
                    f"target sm_{arch} (its lowest is sm_{min(archs)}): the "
                    f"compare-and-swap branch compiles only under an older NVRTC")
    c = compiler.build(E.EMBED_SOURCE, arch or default_arch())
    missing = [n for n in E.embed_kernel_names() if n.encode() not in c.binary]
    assert not missing, missing


class FakeKernels:
    """`_Kernels` re-enacted in NumPy: each launch does what its source does, element by
    element index arithmetic included (rows wrapped into the table)."""
    calls: list = []

    def __init__(self, cp, source):
        assert source is E.EMBED_SOURCE

    def launch(self, name, grid, block, arrays, i64s=(), i32s=(), smem=0):
        FakeKernels.calls.append(name)
        src, idx, out = arrays
        rows, d, n = i64s
        assert src.flags.c_contiguous and idx.flags.c_contiguous and idx.ndim == 1
        assert rows == idx.size and grid * block >= 1
        flat_src, flat_out = src.reshape(-1), out.reshape(-1)
        for i in range(rows * d):
            r = i // d
            v = int(idx[r]) % n                       # C's % then + n: Python's floor mod
            if name.startswith("ember_embed_gather_b"):
                assert name.endswith("_i64" if idx.dtype == np.int64 else "_i32")
                assert f"_b{src.itemsize}_" in name
                flat_out[i] = flat_src[v * d + (i - r * d)]
            else:
                assert name.startswith("ember_embed_scatter_f")
                flat_out[v * d + (i - r * d)] += flat_src[i]


@pytest.fixture
def impls(monkeypatch):
    monkeypatch.setattr(E, "_Kernels", FakeKernels)
    monkeypatch.setattr(E, "zero", lambda cp, out: out.fill(0))
    FakeKernels.calls = []
    xp = cuda_ops.namespace(np)                 # no deferred check: NumPy's check raises
    return E.embedding_impl(None, xp), E.embedding_backward_impl(None, xp)


@pytest.mark.parametrize("wd", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("idd", [np.int64, np.int32, np.int16, np.uint8])
def test_host_code_with_the_kernels_reenacted(impls, wd, idd):
    fwd, bwd = impls
    rng = np.random.default_rng(3)
    w = rng.normal(size=(7, 5)).astype(wd)
    idx = np.array([[0, 6, 3], [3, 3, 1]], idd)          # repeated rows
    out = fwd(w, idx)
    np.testing.assert_array_equal(out, w[idx.astype(np.int64)])
    assert out.dtype == wd and out.shape == (2, 3, 5)
    g = rng.normal(size=(2, 3, 5)).astype(wd)
    got = bwd(g, idx, num_weights=7)
    want = np.zeros((7, 5))
    np.add.at(want, idx.astype(np.int64).reshape(-1), g.astype(np.float64).reshape(-1, 5))
    tol = 1e-3 if wd == np.float16 else 1e-6
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)
    assert got.dtype == wd and got.shape == (7, 5)
    kinds = [c.split("_")[2] for c in FakeKernels.calls]
    # f16 gradients are summed in f32 by the reference (no scatter kernel)
    assert kinds == (["gather"] if wd == np.float16 else ["gather", "scatter"])


def test_out_of_range_and_empty_operands(impls):
    fwd, bwd = impls
    w = np.ones((4, 3), np.float32)
    with pytest.raises(em.errors.IndexError_, match="index 4 is out of range for 4"):
        fwd(w, np.array([0, 4]))
    with pytest.raises(em.errors.IndexError_, match="embedding_backward: index -1"):
        bwd(np.ones((2, 3), np.float32), np.array([0, -1]), num_weights=4)
    FakeKernels.calls = []
    assert fwd(w, np.zeros((0,), np.int64)).shape == (0, 3)
    assert not bwd(np.ones((0, 3), np.float32), np.zeros((0,), np.int64),
                   num_weights=4).any()
    assert FakeKernels.calls == []                       # (the references)


@gpu
@pytest.mark.parametrize("fusion", [False, True], ids=["cuda", "fusion(cuda)"])
@pytest.mark.parametrize("wd", ["f32", "f64", "f16"])
def test_embedding_on_cuda_matches_float64(fusion, wd):
    dev = em.device("cuda", fusion=fusion).autodiff()
    rng = np.random.default_rng(4)
    w_np = rng.normal(size=(50, 24))
    tol = {"f32": 1e-5, "f64": 1e-12, "f16": 2e-2}[wd]
    for idd in (np.int64, np.int32, np.int16):
        idx_np = rng.integers(0, 50, size=(6, 40)).astype(idd)
        idx_np[0, :5] = 7                                # repeated rows
        w = em.tensor(w_np, device=dev).cast(wd).require_grad()
        idx = em.tensor(idx_np, device=dev)
        out = em.embedding(w, idx)
        want = w_np.astype(em.dtype.as_dtype(wd).np).astype(np.float64)[idx_np.astype(np.int64)]
        np.testing.assert_allclose(out.numpy().astype(np.float64), want, rtol=tol, atol=tol)
        g_np = rng.normal(size=out.shape)
        grads = (out * em.tensor(g_np, device=dev).cast(wd)).sum().backward()
        gw = w.grad(grads).numpy().astype(np.float64)
        want_gw = np.zeros_like(w_np)
        np.add.at(want_gw, idx_np.astype(np.int64).reshape(-1),
                  g_np.astype(em.dtype.as_dtype(wd).np).astype(np.float64).reshape(-1, 24))
        np.testing.assert_allclose(gw, want_gw, rtol=tol * 10, atol=tol * 10)


def test_impls_are_registered():
    for op in (N.EMBEDDING, N.EMBEDDING_BACKWARD):
        assert cuda_ops.CUDA_IMPLS[op.name] is not None, op.name
        assert cuda_ops.how(types.SimpleNamespace(name=op.name)) == "impl", op.name
