"""adam_update on the Cuda backend launched directly (ember/backend/cuda/ops.py,
`_AdamDirect`): its sources compile without a GPU; on a GPU it gives the bits of the CuPy
ElementwiseKernel path (the same arithmetic) and of NdArray's reference."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.backend.cuda import ops as cuda_ops
from ember.kernel.cuda.compiler import CudaCompiler, default_arch


@pytest.mark.parametrize("ctype", ["float", "double"])
def test_direct_adam_sources_compile(tmp_path, ctype):
    compiler = CudaCompiler(cache_root=tmp_path)
    if not compiler.available:
        pytest.skip(f"NVRTC unavailable (compile-only checks skipped): {compiler.reason}")
    assert compiler.build(cuda_ops.adam_raw_source(ctype), default_arch()).binary


@pytest.mark.skipif(not em.cuda.is_available(), reason=f"cuda: {em.cuda.why_unavailable()}")
@pytest.mark.parametrize("d", ["f32", "f64"])
@pytest.mark.parametrize("first", [True, False])
def test_direct_adam_matches_the_elementwise_kernel_and_numpy(d, first):
    import cupy as cp
    rng = np.random.default_rng(7)
    npd = em.dtype.as_dtype(d).np
    host = [rng.normal(size=(33, 17)).astype(npd) for _ in range(4)]
    host[3] = np.abs(host[3])
    attrs = dict(beta1=0.9, beta2=0.999, k1=0.1, k2=0.001, step=1e-3, eps=1e-8, decay=0.99,
                 l2=0.01, first=first)
    op = em.ops.OPS["adam_update"]
    want = op.numpy(*host, **attrs)
    fn = cuda_ops.CUDA_IMPLS["adam_update"](cp, None)
    dev_in = [cp.asarray(h) for h in host]
    got = fn(*dev_in, **attrs)                               # contiguous: direct launch
    strided = [cp.asarray(np.asfortranarray(h)) for h in host]
    other = fn(*strided, **attrs)                            # F-ordered: ElementwiseKernel
    for g, o, w in zip(got, other, want):
        np.testing.assert_array_equal(cp.asnumpy(g), w)
        np.testing.assert_array_equal(cp.asnumpy(o), w)


@pytest.mark.parametrize("ctype", ["float", "double"])
def test_adam_many_source_compiles(tmp_path, ctype):
    compiler = CudaCompiler(cache_root=tmp_path)
    if not compiler.available:
        pytest.skip(f"NVRTC unavailable (compile-only checks skipped): {compiler.reason}")
    assert b"ember_adam_many" in compiler.build(cuda_ops.adam_many_source(ctype),
                                                default_arch()).binary


def test_adam_many_blocks_cover_every_element_once():
    """The kernel's geometry re-enacted: each block finds its parameter as the kernel does
    (the last slot whose first block is at most the block's index) and strides by the
    parameter's blocks; every element of every parameter is updated exactly once."""
    rng = np.random.default_rng(3)
    for sizes in ([1], [0, 5, 0], [256, 257, 1], [3000, 2048 * 256 + 7, 1, 0],
                  list(rng.integers(0, 2000, 32))):
        slots = cuda_ops.ADAM_MANY_SLOTS
        first = cuda_ops.adam_many_blocks(sizes, slots)
        assert len(first) == slots + 1 and first[-1] == first[len(sizes)]
        seen = [np.zeros(n, np.int64) for n in sizes]
        for b in range(first[-1]):
            s = 0
            while s + 1 < len(sizes) and first[s + 1] <= b:
                s += 1
            blocks = first[s + 1] - first[s]
            for t in range(0, 256, 37):              # (a sample of the block's threads)
                seen[s][np.arange((b - first[s]) * 256 + t, sizes[s], blocks * 256)] += 1
        for n, hits in zip(sizes, seen):
            sampled = np.zeros(n, bool)
            for t in range(0, 256, 37):
                sampled[t::256] = True
            assert (hits[sampled] == 1).all() and (hits[~sampled] == 0).all(), sizes


def test_adam_update_many_entry_builds_without_cupy():
    op = em.ops.OPS["adam_update_many"]
    assert cuda_ops.how(op) == "impl" and callable(cuda_ops.CUDA_IMPLS[op.name](None, None))
    from ember.backend.cuda.backend import Cuda
    assert "adam_update_many" in Cuda.fused_ops and "adam_update_many" in cuda_ops.BF16_NATIVE


@pytest.mark.skipif(not em.cuda.is_available(), reason=f"cuda: {em.cuda.why_unavailable()}")
@pytest.mark.parametrize("fusion", [False, True], ids=["cuda", "fusion(cuda)"])
@pytest.mark.parametrize("d", ["f32", "bf16"])
def test_adam_many_on_cuda_is_one_update_per_param(monkeypatch, fusion, d):
    """AdamW steps of a small model with the updates in one adam_update_many per step (the
    default on Cuda) give the bits of one adam_update per parameter (EMBER_ADAM_MANY=0)."""
    from ember import nn, optim
    from ember.optim import adam as adam_mod

    def train():
        monkeypatch.setattr(adam_mod, "_MANY", {})
        dev = em.device("cuda", fusion=fusion).autodiff()
        dev.seed(0)
        net = nn.Linear(7, 5, device=dev).map(lambda _, p: p.with_tensor(p.tensor.cast(d)))
        x = em.tensor(np.linspace(-1, 1, 28, dtype=np.float32).reshape(4, 7),
                      device=dev).cast(d)
        opt = optim.AdamW(lr=0.01)
        for _ in range(3):
            loss = (net(x) ** 2).mean()
            net = opt.step(None, net, em.GradientsParams.from_grads(loss.backward(), net))
        return [t.cast("f32").numpy() for _, t in net.named_parameters()]

    many = train()
    monkeypatch.setenv("EMBER_ADAM_MANY", "0")
    one = train()
    for a, b in zip(many, one):
        np.testing.assert_array_equal(a, b)


class _Wide(em.Module):
    """41 parameters (two launches of 32 slots) and one larger than a launch's block cap
    (``ADAM_MANY_BLOCKS * 256`` elements: its blocks loop)."""

    def __init__(self, device):
        from ember import nn
        self.body = nn.Sequential([nn.Linear(8, 8, device=device) for _ in range(20)])
        n = cuda_ops.ADAM_MANY_BLOCKS * 256 + 1000
        self.big = em.Param(em.tensor(np.linspace(-1, 1, n, dtype=np.float32), device=device))


@pytest.mark.skipif(not em.cuda.is_available(), reason=f"cuda: {em.cuda.why_unavailable()}")
@pytest.mark.parametrize("d", ["f32", "f64"])
def test_adam_many_over_many_launches_matches_numpy(monkeypatch, d):
    """A step of 41 parameters in two launches, one parameter's blocks looping: the same bits
    as one adam_update per parameter, and within rounding of NdArray's float64 reference."""
    from ember import optim
    from ember.optim import adam as adam_mod

    def train(name):
        em.device("cpu").seed(0)
        monkeypatch.setattr(adam_mod, "_MANY", {})
        dev = em.device(name).autodiff()
        net = _Wide(em.device("cpu")).map(      # (the same initial values on every device)
            lambda _, p: p.with_tensor(em.tensor(p.tensor.numpy(), device=dev).cast(d)))
        x = em.tensor(np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8), device=dev)
        opt = optim.AdamW(lr=0.01, weight_decay=0.1)
        for _ in range(2):
            loss = (net.big * net.big).sum()
            for layer in net.body.layers:          # (side by side: no vanishing gradient)
                loss = loss + (layer(x.cast(d)) ** 2).mean()
            net = opt.step(None, net, em.GradientsParams.from_grads(loss.backward(), net))
        return {k: t.cast("f64").numpy() for k, t in net.named_parameters()}

    many = train("cuda")
    monkeypatch.setenv("EMBER_ADAM_MANY", "0")
    one = train("cuda")
    ref = train("cpu")
    assert len(many) == 41
    for k in one:
        np.testing.assert_array_equal(many[k], one[k], err_msg=k)
        np.testing.assert_allclose(many[k], ref[k], rtol=1e-4 if d == "f32" else 1e-10,
                                   atol=1e-5 if d == "f32" else 1e-12, err_msg=k)


@pytest.mark.skipif(not em.cuda.is_available(), reason=f"cuda: {em.cuda.why_unavailable()}")
def test_adam_many_takes_strided_gradients(monkeypatch):
    """A self-attention's q, k, v weights are updated from column blocks of one gradient
    (their projection is one product): views, copied on the op's stream; the same bits as
    one adam_update per parameter."""
    from ember import nn, optim
    from ember.optim import adam as adam_mod

    def train():
        monkeypatch.setattr(adam_mod, "_MANY", {})
        dev = em.device("cuda").autodiff()
        dev.seed(0)
        mha = nn.MultiHeadAttention(8, 2, dropout=0.0, device=dev)
        x = em.tensor(np.linspace(-1, 1, 48, dtype=np.float32).reshape(2, 3, 8), device=dev)
        opt = optim.AdamW(lr=0.01)
        for _ in range(2):
            loss = (mha(x, need_weights=False).context ** 2).mean()
            mha = opt.step(None, mha, em.GradientsParams.from_grads(loss.backward(), mha))
        return {k: t.numpy() for k, t in mha.named_parameters()}

    many = train()
    monkeypatch.setenv("EMBER_ADAM_MANY", "0")
    one = train()
    for k in one:
        np.testing.assert_array_equal(many[k], one[k], err_msg=k)
