"""The Cuda backend's attention (`ember.backend.cuda.attention`: two cuBLAS products around
`ATTN_SOURCE`'s softmax kernel) against float64 references written here.

Without a GPU: the source compiles with NVRTC, the launch plans cover every key of a row,
and the host code runs over NumPy with the kernel re-enacted (`FakeKernels`: the keys each
thread reads, ``lane + u * G`` for ``u < NPL``, the row's query ``r % Lq``, the causal
bound, the in-place write), so a key no thread covers keeps its raw score and fails. The
rest runs on a GPU and is skipped by name elsewhere."""
from __future__ import annotations

import inspect
import struct

import ml_dtypes
import numpy as np
import pytest

import ember as em
from ember.backend.cuda import attention as A
from ember.backend.cuda import ops as cuda_ops
from ember.kernel.cuda.compiler import default_arch
from ember.ops import OPS
from ember.ops.attention import ATTENTION
from ember.tensor.dispatch import apply
from tests.conformance.specs_attention import ref_attention
from tests.kernel_cuda._util import nvrtc_or_skip

BF16 = np.dtype(ml_dtypes.bfloat16)
gpu = pytest.mark.skipif(not em.cuda.is_available(),
                         reason=f"cuda: {em.cuda.why_unavailable()}")


# -- without a GPU ------------------------------------------------------------------------
def test_kernel_source_compiles_with_every_entry_point(tmp_path):
    compiler = nvrtc_or_skip(tmp_path)
    for std in ("--std=c++14", "--std=c++17"):
        binary = compiler.build(A.ATTN_SOURCE, default_arch(), options=(std,)).binary
        lacking = [n for n in A.attn_kernel_names() if n.encode() not in binary]
        assert binary and not lacking, f"{std}: the binary lacks {lacking}"


def test_the_registry_op_runs_here_on_cuda():
    from ember.backend.cuda.backend import Cuda
    op = OPS["attention"]
    fn = cuda_ops.CUDA_IMPLS["attention"](None, np)
    kw = [p.name for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY]
    assert (cuda_ops.how(op), tuple(kw)) == ("impl", op.attrs)
    assert "attention" in Cuda.fused_ops and op.decompose is not None


@pytest.mark.parametrize("lk,want", [(1, "w1"), (32, "w1"), (33, "w2"), (256, "w8"),
                                     (1024, "w32"), (1025, "b4"), (4096, "b8"),
                                     (8192, "b16"), (8193, "b0"), (50000, "b0")])
def test_plan_covers_every_key(lk, want):
    suffix, npl, grid, block = A.plan(10, lk)
    assert suffix == want and suffix in {n.rsplit("_", 1)[1] for n in A.attn_kernel_names()}
    assert npl == 0 or npl * (32 if suffix[0] == "w" else block) >= lk
    rows = block // 32 if suffix[0] == "w" else 1
    assert grid * rows >= 10 and block % 32 == 0 and block <= 1024


def _emulate(s, M, Lq, Lk, offset, scale_bits, causal, npl, G):
    """`ember_attn_rows` over NumPy, thread by thread (a row's G threads vectorized): the
    keys each thread reads, the causal bound, the passes, the in-place write."""
    F = s.dtype.type
    scale = F(struct.unpack("<d", struct.pack("<q", scale_bits))[0])
    fill = F(np.finfo(s.dtype).min)
    flat = s.reshape(-1)
    lane = np.arange(G)
    n = npl if npl else -(-Lk // G)          # passes over u (NPL 0: the strided loop)
    j = lane[None, :] + np.arange(n)[:, None] * G           # [n, G] keys per thread
    inside = j < Lk
    for r in range(M):
        last = r % Lq + offset if causal else Lk
        seen = inside & (j <= last)
        raw = flat[r * Lk + np.where(inside, j, 0)]
        x = np.where(seen, raw * scale, fill).astype(F)
        m = np.max(np.where(inside, x, -np.inf))                 # NaN propagates
        e = np.where(inside, np.exp(x - F(m)), F(0)).astype(F)
        t = F(0)
        for part in e.sum(axis=0, dtype=F):                       # threads, then the group
            t = F(t + part)
        out = (e / t).astype(F)
        flat[r * Lk + j[inside]] = out[inside]


class FakeKernels:
    """`ops._Kernels` with `ATTN_SOURCE` re-enacted (`_emulate`)."""
    calls: list = []

    def __init__(self, cp, source):
        assert source is A.ATTN_SOURCE

    def launch(self, name, grid, block, arrays, i64s=(), i32s=(), smem=0):
        FakeKernels.calls.append(name)
        (s,) = arrays
        assert s.flags.c_contiguous and name in A.attn_kernel_names()
        assert name.split("_")[2] == {np.float32: "f32", np.float64: "f64"}[s.dtype.type]
        mode = name.rsplit("_", 1)[1]
        M, Lq, Lk = i64s[:3]
        assert s.size == M * Lk and block % 32 == 0
        if mode[0] == "w":
            assert grid * (block // 32) >= M or grid == cuda_ops._GRID_CAP
        _emulate(s, *i64s, *i32s, int(mode[1:]), 32 if mode[0] == "w" else block)


CASES = [  # (q, k, v shapes, scale, causal, offset)
    (((2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 3)), 0.4, False, 0),
    (((2, 2, 7, 4), (2, 2, 7, 4), (2, 2, 7, 4)), 0.5, True, 0),
    (((3, 5, 8), (3, 9, 8), (3, 9, 2)), 0.3, True, 4),          # MHA's offset Lk - Lq
    (((2, 6, 3), (2, 5, 3), (2, 5, 3)), 0.7, True, -2),         # rows that see no key
    (((1, 40, 4), (1, 40, 4), (1, 40, 2)), 0.5, True, 0),       # two values a lane
    (((1, 1100, 2), (1, 1100, 2), (1, 1100, 2)), 0.5, True, 0),  # past a warp's keys
    (((5, 2), (1500, 2), (1500, 3)), 0.2, False, 0),            # a block a row
    (((3, 2), (8300, 2), (8300, 1)), 0.2, True, 8296),          # the strided block
    (((3, 4), (0, 4), (0, 2)), 0.5, False, 0),                  # no keys
    (((0, 4), (3, 4), (3, 2)), 0.5, True, 0),                   # no queries
]


@pytest.mark.parametrize("case", CASES, ids=[f"c{i}" for i in range(len(CASES))])
@pytest.mark.parametrize("dtype", ["f32", "f64", "f16"])
def test_host_code_with_the_kernel_reenacted(monkeypatch, case, dtype):
    shapes, scale, causal, offset = case
    monkeypatch.setattr(A, "_Kernels", FakeKernels)
    FakeKernels.calls = []
    rng = np.random.default_rng(len(shapes[1]) * 7 + shapes[1][-2])
    d = {"f32": np.float32, "f64": np.float64, "f16": np.float16}[dtype]
    q, k, v = (rng.normal(size=s).astype(d) for s in shapes)
    fn = A.attention_impl(None, np)
    out, w = fn(q, k, v, scale=scale, causal=causal, offset=offset)
    ro, rw = ref_attention(*(a.astype(np.float64) for a in (q, k, v)), scale, causal, offset)
    tol = 1e-12 if dtype == "f64" else 2e-6
    np.testing.assert_allclose(w.astype(np.float64), rw, atol=tol, rtol=tol)
    np.testing.assert_allclose(out.astype(np.float64), ro, atol=tol * 10, rtol=tol * 10)
    assert w.dtype == out.dtype == (np.float64 if dtype == "f64" else np.float32)
    launched = 0 not in w.shape
    assert len(FakeKernels.calls) == int(launched)
    # the same heads given unsplit, [..., L, H*D] (``heads``): split and merged around it
    if len(shapes[0]) >= 3:
        def merged(a):
            return np.ascontiguousarray(np.swapaxes(a, -2, -3)).reshape(
                a.shape[:-3] + (a.shape[-2], a.shape[-3] * a.shape[-1]))
        heads = shapes[0][-3]
        mq, mk, mv = (merged(a) for a in (q, k, v))
        out_h, w_h = fn(mq, mk, mv, scale=scale, causal=causal, offset=offset, heads=heads)
        np.testing.assert_allclose(w_h.astype(np.float64), rw, atol=tol, rtol=tol)
        np.testing.assert_allclose(out_h.astype(np.float64), merged(ro), atol=tol * 10,
                                   rtol=tol * 10)
        if shapes[0] == shapes[1] == shapes[2]:
            # ``packed``: one [..., L, 3*H*D] tensor as q = k = v (its column blocks)
            qkv = np.concatenate([mq, mk, mv], -1)
            out_p, w_p = fn(qkv, qkv, qkv, scale=scale, causal=causal, offset=offset,
                            heads=heads, packed=True)
            np.testing.assert_array_equal(w_p, w_h)
            np.testing.assert_array_equal(out_p, out_h)


# -- on a GPU -----------------------------------------------------------------------------
_TOL = {"f64": 1e-11, "f32": 2e-5, "f16": 3e-3, "bf16": 2e-2}
_NP = {"f64": np.float64, "f32": np.float32, "f16": np.float16, "bf16": BF16}
GPU_CASES = [
    (((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 4)), 0.35, True, 2),
    (((4, 6, 64, 64), (4, 6, 64, 64), (4, 6, 64, 64)), 0.125, True, 0),    # GPT-like, w2
    (((2, 2, 256, 64), (2, 2, 256, 64), (2, 2, 256, 64)), 0.125, True, 0),  # w8
    (((1, 3, 1024, 16), (1, 3, 1024, 16), (1, 3, 1024, 8)), 0.25, True, 0),  # w32
    (((2, 8, 32), (2, 2000, 32), (2, 2000, 16)), 0.2, False, 0),            # b4
    (((1, 9, 16), (1, 4096, 16), (1, 4096, 16)), 0.25, True, 4090),         # b8
    (((5, 8), (9000, 8), (9000, 4)), 0.3, True, 8995),                      # b0
    (((2, 5, 4), (2, 3, 4), (2, 3, 4)), 0.5, True, -2),                     # rows see none
]


@gpu
@pytest.mark.parametrize("fusion", [False, True], ids=["cuda", "fusion_cuda"])
@pytest.mark.parametrize("dtype", ["f32", "f64", "f16", "bf16"])
def test_gpu_against_float64(fusion, dtype):
    dev = em.device("cuda", fusion=fusion)
    for i, (shapes, scale, causal, offset) in enumerate(GPU_CASES):
        rng = np.random.default_rng(i)
        arrs = [rng.normal(size=s).astype(_NP[dtype]) for s in shapes]
        ts = [em.tensor(a, device=dev) for a in arrs]
        out, w = apply(ATTENTION, tuple(ts), {"scale": scale, "causal": causal,
                                              "offset": offset})
        ro, rw = ref_attention(*(a.astype(np.float64) for a in arrs), scale, causal, offset)
        tol = _TOL[dtype]
        what = f"case {i} {dtype}"
        assert str(out.dtype.short) == dtype and str(w.dtype.short) == dtype
        np.testing.assert_allclose(w.numpy().astype(np.float64), rw, atol=tol, rtol=tol,
                                   err_msg=what)
        np.testing.assert_allclose(out.numpy().astype(np.float64), ro, atol=5 * tol,
                                   rtol=5 * tol, err_msg=what)


@gpu
def test_gpu_fusion_runs_the_kernel_not_the_decomposition():
    dev = em.device("cuda")
    rng = np.random.default_rng(1)
    q, k, v = (em.tensor(rng.normal(size=(4, 6, 128, 64)).astype(np.float32), device=dev)
               for _ in range(3))
    before = em.fusion.stats()
    out, w = apply(ATTENTION, (q, k, v), {"scale": 0.125, "causal": True, "offset": 0})
    out.numpy()
    after = em.fusion.stats()
    assert after["recorded_ops"] == before["recorded_ops"]      # nothing decomposed
    assert after["inner_ops"] == before["inner_ops"] + 1


def ref_grads(q, k, v, g, scale, causal, offset):
    """(dq, dk, dv) of ``sum(out * g)`` in float64, from the weights (a query that sees no
    key: its scores get no gradient)."""
    _, p = ref_attention(q, k, v, scale, causal, offset)
    dv = np.swapaxes(p, -1, -2) @ g
    dp = g @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) * scale
    if causal:
        lq, lk = p.shape[-2:]
        ds[..., (np.arange(lq) + offset) < 0, :] = 0.0
    return ds @ k, np.swapaxes(ds, -1, -2) @ q, dv


@gpu
@pytest.mark.parametrize("fusion", [False, True], ids=["cuda", "fusion_cuda"])
def test_gpu_gradients_against_float64(fusion):
    dev = em.device("cuda", fusion=fusion).autodiff()
    for i in (1, 2, 6, 7):
        shapes, scale, causal, offset = GPU_CASES[i]
        rng = np.random.default_rng(10 + i)
        q, k, v = (rng.normal(size=s) for s in shapes)
        ts = [em.tensor(a, device=dev).require_grad() for a in (q, k, v)]
        out, _ = apply(ATTENTION, tuple(ts), {"scale": scale, "causal": causal,
                                              "offset": offset})
        g = rng.normal(size=tuple(out.shape))
        grads = (out * em.tensor(g, device=dev)).sum().backward()
        for t, want, name in zip(ts, ref_grads(q, k, v, g, scale, causal, offset), "qkv"):
            np.testing.assert_allclose(t.grad(grads).numpy(), want, atol=1e-9, rtol=1e-8,
                                       err_msg=f"case {i}: d{name}")


@pytest.mark.parametrize("shape", [(5, 24), (2, 5, 24), (3, 2, 5, 24)])
def test_split_packed_is_the_split_column_blocks(shape):
    """One copy of the packed [..., L, 3*H*D] gives q, k, v split in heads [..., H, L, D],
    as the column blocks split one by one do."""
    from ember.ops.attention import split_np, unpack_np
    a = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    qkv = A.split_packed(np.ascontiguousarray, a, 2)
    assert qkv.flags.c_contiguous and qkv.shape == (3,) + shape[:-2] + (2, 5, 4)
    for got, want in zip(qkv, unpack_np(a)):
        np.testing.assert_array_equal(got, split_np(want, 2))
