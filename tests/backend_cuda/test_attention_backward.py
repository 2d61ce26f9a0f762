"""attention's derivative as one primitive, ``attention_backward``, on the Cuda backend
(ember/backend/cuda/attention.py: cuBLAS products around `softmax_backward_kernel`, a kernel
of ember's renderer), against float64 references written here.

Without a GPU: the kernel's IR runs on the IR interpreter and on the C runtime (what it
computes does not depend on the renderer), renders to CUDA C and compiles with NVRTC; the
host code runs over NumPy with those runtimes as its kernel runtime, and runs the reference
without one; a backend that lists the op runs an attention's backward pass as that one op.
On a GPU: the op against float64 on Cuda and Fusion(Cuda), and a GPT-like attention's
backward pass as one op there."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ember as em
from ember.backend import Autodiff, Fusion
from ember.backend.cuda import attention as A
from ember.kernel.cuda.compiler import default_arch
from ember.kernel.cuda.render import render
from ember.ops.attention import ATTENTION, ATTENTION_BACKWARD
from ember.tensor.dispatch import apply
from tests.conformance.specs_attention import ref_attention, ref_attention_backward
from tests.backend_cuda._host import cpu_kernel_runtimes, host_namespace
from tests.fusion._util import RecordingNdArray
from tests.kernel_cuda._util import nvrtc_or_skip

BF16 = np.dtype(ml_dtypes.bfloat16)
gpu = pytest.mark.skipif(not em.cuda.is_available(),
                         reason=f"cuda: {em.cuda.why_unavailable()}")
#: (causal, offset): no mask, a causal one, queries that see no key, a shifted one
MASKS = [(False, 0), (True, 0), (True, -2), (True, 3)]


def ref_ds(dp, p, scale, causal, offset):
    """``dS`` in float64 from the textbook softmax derivative."""
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) * scale
    if causal and offset < 0:
        lq, lk = p.shape[-2:]
        ds = np.where(np.arange(lk)[None, :] > np.arange(lq)[:, None] + offset, 0.0, ds)
    return ds


# -- without a GPU --------------------------------------------------------------------------
@pytest.mark.parametrize("causal,offset", MASKS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kernel_on_the_cpu_runtimes(causal, offset, dtype):
    rng = np.random.default_rng(abs(offset) + 10 * causal)
    dp = rng.normal(size=(3, 4, 6)).astype(dtype)
    wide = rng.random(size=(3, 4, 12)).astype(dtype)
    for layout, p in (("contiguous", np.ascontiguousarray(wide[..., :6])),
                      ("every other key", wide[..., ::2])):
        item = p.itemsize
        k = A.softmax_backward_kernel(3, 4, 6, tuple(s // item for s in p.strides), dtype,
                                      0.4, causal, offset)
        want = ref_ds(dp.astype(np.float64), p.astype(np.float64), 0.4, causal, offset)
        for name, rt in cpu_kernel_runtimes():
            (got,) = rt.launch(rt.compile(k), [dp, p], [])
            assert got.shape == (3, 4, 6) and got.dtype == dtype
            tol = 1e-12 if dtype == np.float64 else 2e-6
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol,
                                       err_msg=f"{name}, {layout}")


@pytest.mark.parametrize("causal,offset", MASKS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kernel_compiles_for_cuda(tmp_path, causal, offset, dtype):
    compiler = nvrtc_or_skip(tmp_path)
    k = A.softmax_backward_kernel(192, 256, 256, (65536, 256, 1), dtype, 0.125, causal,
                                  offset)
    assert compiler.build(render(k).source, default_arch()).binary


# (g, q, k, v) shapes: heads, no leading dims, no keys, no queries
SHAPES = [((2, 3, 4, 2), (2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 2)),
          ((4, 3), (4, 2), (5, 2), (5, 3)),
          ((2, 3, 4), (2, 3, 5), (2, 0, 5), (2, 0, 4)),
          ((2, 0, 4), (2, 0, 5), (2, 3, 5), (2, 3, 4))]


@pytest.mark.parametrize("causal,offset", MASKS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_host_code_over_numpy(causal, offset, dtype):
    """`attention_backward_impl` with NumPy for CuPy and a CPU kernel runtime, on the
    forward's weights and on transposed (non-contiguous) weights."""
    for name, rt in cpu_kernel_runtimes():
        impl = A.attention_backward_impl(np, host_namespace(rt))
        for i, shapes in enumerate(SHAPES):
            rng = np.random.default_rng(i)
            g, q, k, v = (rng.normal(size=s).astype(dtype) for s in shapes)
            _, p = ref_attention(*(a.astype(np.float64) for a in (q, k, v)), 0.4, causal,
                                 offset)
            p = p.astype(dtype)
            if i == 0:       # the same values, p laid out [.., Lk, Lq], g [B, Lq, H, Dv]
                p = np.ascontiguousarray(np.swapaxes(p, -1, -2)).swapaxes(-1, -2)
                g = np.ascontiguousarray(np.swapaxes(g, 1, 2)).swapaxes(1, 2)
            got = impl(g, q, k, v, p, scale=0.4, causal=causal, offset=offset)
            want = ref_attention_backward(*(a.astype(np.float64) for a in (g, q, k, v, p)),
                                          0.4, causal, offset)
            tol = {np.float64: 1e-12, np.float32: 2e-5, np.float16: 2e-5}[dtype]
            for n, a, w in zip("qkv", got, want):
                assert a.shape == w.shape, (name, i, n)
                # (f16 is computed in f32: the Cuda backend's runner rounds the outputs)
                assert a.dtype == (np.float32 if dtype == np.float16 else dtype)
                np.testing.assert_allclose(a, w, rtol=tol, atol=tol,
                                           err_msg=f"{name}, shapes {i}: d{n}")


@pytest.mark.parametrize("heads", [2, 3])
def test_host_code_with_heads_over_numpy(heads):
    """``heads``: q, k, v and g given as [B, L, H*D]; the gradients come back so."""
    def merged(a):
        return np.ascontiguousarray(np.swapaxes(a, -2, -3)).reshape(
            a.shape[:-3] + (a.shape[-2], a.shape[-3] * a.shape[-1]))
    rng = np.random.default_rng(heads)
    g, q, k, v = (rng.normal(size=(2, heads) + s) for s in ((4, 2), (4, 5), (6, 5), (6, 2)))
    _, p = ref_attention(q, k, v, 0.4, True, 1)
    want = [merged(d) for d in ref_attention_backward(g, q, k, v, p, 0.4, True, 1)]
    for name, rt in cpu_kernel_runtimes():
        impl = A.attention_backward_impl(np, host_namespace(rt))
        got = impl(*(merged(a) for a in (g, q, k, v)), p, scale=0.4, causal=True, offset=1,
                   heads=heads)
        for n, a, w in zip("qkv", got, want):
            assert a.shape == w.shape and a.flags.c_contiguous, (name, n)
            np.testing.assert_allclose(a, w, rtol=1e-12, atol=1e-12, err_msg=f"{name} d{n}")


def _packed_case(heads=3):
    """(packed q = k = v [2, 5, 3*H*4], g merged, the weights, the output merged, the packed
    gradient), the references in float64."""
    def merged(a):
        return np.ascontiguousarray(np.swapaxes(a, -2, -3)).reshape(
            a.shape[:-3] + (a.shape[-2], a.shape[-3] * a.shape[-1]))
    rng = np.random.default_rng(11)
    q, k, v = (rng.normal(size=(2, heads, 5, 4)) for _ in range(3))
    g = rng.normal(size=(2, heads, 5, 4))
    out, p = ref_attention(q, k, v, 0.4, True, 0)
    packed = np.concatenate([merged(a) for a in (q, k, v)], -1)
    dqkv = np.concatenate([merged(d) for d in ref_attention_backward(g, q, k, v, p, 0.4,
                                                                     True, 0)], -1)
    return packed, merged(g), p, merged(out), dqkv


PACKED = {"scale": 0.4, "causal": True, "offset": 0, "heads": 3, "packed": True}


def test_packed_backward_host_code_over_numpy():
    """``packed``: q = k = v one [B, L, 3*H*D] tensor (column blocks q, k, v); the backward
    over NumPy with the CPU kernel runtimes gives one gradient of it, its blocks dq, dk,
    dv."""
    packed, g, p, _, want = _packed_case()
    for name, rt in cpu_kernel_runtimes():
        (got,) = A.attention_backward_impl(np, host_namespace(rt))(g, packed, packed, packed,
                                                                   p, **PACKED)
        assert got.shape == packed.shape and got.flags.c_contiguous, name
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=name)


@gpu
def test_packed_attention_on_cuda():
    """The packed forward and backward on Cuda against float64."""
    dev = em.device("cuda").autodiff()
    packed, g, _, out, want = _packed_case()
    x = em.tensor(packed, device=dev).require_grad()
    got, _ = apply(ATTENTION, (x, x, x), PACKED)
    np.testing.assert_allclose(got.numpy(), out, rtol=1e-10, atol=1e-12)
    grads = (got * em.tensor(g, device=dev)).sum().backward()
    np.testing.assert_allclose(x.grad(grads).numpy(), want, rtol=1e-10, atol=1e-12)


def test_packed_inputs_must_be_one_tensor_split_in_heads():
    dev = em.device("cpu")
    t = lambda *s: em.tensor(np.zeros(s, np.float32), device=dev)  # noqa: E731
    attrs = {"scale": 0.5, "causal": False, "offset": 0}
    x = t(2, 3, 12)
    with pytest.raises(em.errors.ShapeError, match="three different tensors"):
        apply(ATTENTION, (x, x, t(2, 3, 12)), {**attrs, "heads": 2, "packed": True})
    with pytest.raises(em.errors.ShapeError, match="need heads > 0"):
        apply(ATTENTION, (x, x, x), {**attrs, "heads": 0, "packed": True})
    with pytest.raises(em.errors.ShapeError, match=r"3 \* 5 \* D"):
        apply(ATTENTION, (x, x, x), {**attrs, "heads": 5, "packed": True})
    with pytest.raises(em.errors.DTypeError, match="packed must be a bool"):
        apply(ATTENTION, (x, x, x), {**attrs, "heads": 2, "packed": 1})
    out, w = apply(ATTENTION, (x, x, x), {**attrs, "heads": 2, "packed": True})
    assert tuple(out.shape) == (2, 3, 4) and tuple(w.shape) == (2, 2, 3, 3)


def test_heads_that_do_not_divide_are_refused():
    dev = em.device("cpu")
    t = lambda *s: em.tensor(np.zeros(s, np.float32), device=dev)  # noqa: E731
    attrs = {"scale": 0.5, "causal": False, "offset": 0}
    with pytest.raises(em.errors.ShapeError, match="with heads=4"):
        apply(ATTENTION, (t(2, 3, 6), t(2, 5, 6), t(2, 5, 6)), {**attrs, "heads": 4})
    with pytest.raises(em.errors.DTypeError, match="heads must be an int"):
        apply(ATTENTION, (t(2, 3, 6), t(2, 5, 6), t(2, 5, 6)), {**attrs, "heads": -1})
    with pytest.raises(em.errors.ShapeError, match="attention_backward: the weights"):
        apply(ATTENTION_BACKWARD, (t(2, 3, 6), t(2, 3, 6), t(2, 5, 6), t(2, 5, 6),
                                   t(2, 3, 5)), {**attrs, "heads": 2})


def test_without_a_kernel_runtime_the_reference_runs():
    impl = A.attention_backward_impl(np, host_namespace(None))
    rng = np.random.default_rng(5)
    g, q, k, v = (rng.normal(size=s) for s in SHAPES[0])
    _, p = ref_attention(q, k, v, 0.3, True, -1)
    got = impl(g, q, k, v, p, scale=0.3, causal=True, offset=-1)
    for a, w in zip(got, ref_attention_backward(g, q, k, v, p, 0.3, True, -1)):
        np.testing.assert_allclose(a, w, rtol=1e-12, atol=1e-12)




class _ListsIt(RecordingNdArray):
    """A backend that runs attention and its derivative as ops of its own (as Cuda does)."""
    fused_ops = frozenset({"attention", "attention_backward"})


def _backward_ops(inner, needs=(True, True, True)):
    """The ops ``inner`` ran in an attention's backward pass under Autodiff(Fusion), and
    the gradients (checked against float64)."""
    dev = Autodiff(Fusion(inner, "c", 0)).device(0)
    rng = np.random.default_rng(3)
    arrs = [rng.normal(size=s) for s in ((2, 2, 5, 4), (2, 2, 5, 4), (2, 2, 5, 3))]
    ts = [em.tensor(a, device=dev) for a in arrs]
    ts = [t.require_grad() if n else t for t, n in zip(ts, needs)]
    out, _ = apply(ATTENTION, tuple(ts), {"scale": 0.5, "causal": True, "offset": 0})
    g = rng.normal(size=tuple(out.shape))
    loss = (out * em.tensor(g, device=dev)).sum()
    dev.sync()
    inner.ran.clear()
    grads = loss.backward()
    got = [t.grad(grads).numpy() if n else None for t, n in zip(ts, needs)]
    ran = list(inner.ran)
    _, pw = ref_attention(*arrs, 0.5, True, 0)
    for a, w in zip(got, ref_attention_backward(g, *arrs, pw, 0.5, True, 0)):
        if a is not None:
            np.testing.assert_allclose(a, w, rtol=1e-10, atol=1e-12)
    return ran


def test_backward_pass_is_one_op_where_the_backend_lists_it():
    """Under Fusion the derivative runs as one op of the backend below where that backend
    lists it (as Cuda does), else as its decomposition: matmuls and fused kernels."""
    ran = _backward_ops(_ListsIt())
    assert ran.count("attention_backward") == 1 and "matmul" not in ran, ran
    ran = _backward_ops(RecordingNdArray())
    assert "attention_backward" not in ran and ran.count("matmul") == 4, ran


def test_only_the_gradients_asked_for_are_computed():
    """With only v requiring a gradient the derivative runs as Tensor ops (dV's product
    alone), not the primitive that computes all three."""
    ran = _backward_ops(_ListsIt(), needs=(False, False, True))
    assert "attention_backward" not in ran and ran.count("matmul") == 1, ran


def test_bad_inputs_are_refused():
    dev = em.device("cpu")
    t = lambda *s, d=np.float32: em.tensor(np.zeros(s, d), device=dev)  # noqa: E731
    attrs = {"scale": 0.5, "causal": False, "offset": 0}
    g, q, k, v, p = t(2, 4, 3), t(2, 4, 5), t(2, 6, 5), t(2, 6, 3), t(2, 4, 6)
    with pytest.raises(em.errors.ShapeError, match="attention_backward: the weights"):
        apply(ATTENTION_BACKWARD, (g, q, k, v, t(2, 4, 5)), attrs)
    with pytest.raises(em.errors.ShapeError, match="attention_backward: the output grad"):
        apply(ATTENTION_BACKWARD, (t(2, 4, 4), q, k, v, p), attrs)
    with pytest.raises(em.errors.DTypeError, match="attention_backward: the weights is f64"):
        apply(ATTENTION_BACKWARD, (g, q, k, v, t(2, 4, 6, d=np.float64)), attrs)
    with pytest.raises(em.errors.ShapeError, match="attention_backward: query"):
        apply(ATTENTION_BACKWARD, (g, q, t(2, 6, 4), v, p), attrs)
    with pytest.raises(em.errors.DTypeError, match="scale must be a float"):
        apply(ATTENTION_BACKWARD, (g, q, k, v, p), {**attrs, "scale": 1})


def test_it_has_no_derivative_of_its_own():
    dev = em.device("cpu").autodiff()
    rng = np.random.default_rng(6)
    g, q, k, v, p = (em.tensor(rng.normal(size=s), device=dev).require_grad()
                     for s in ((2, 4, 3), (2, 4, 5), (2, 6, 5), (2, 6, 3), (2, 4, 6)))
    dq, _, _ = apply(ATTENTION_BACKWARD, (g, q, k, v, p),
                     {"scale": 0.5, "causal": False, "offset": 0})
    with pytest.raises(em.errors.AutodiffError, match="attention_backward has no derivative"):
        dq.sum().backward()


# -- on a GPU -------------------------------------------------------------------------------
_TOL = {"f64": 1e-11, "f32": 3e-5, "f16": 4e-3, "bf16": 3e-2}
_NP = {"f64": np.float64, "f32": np.float32, "f16": np.float16, "bf16": BF16}
GPU_SHAPES = [((4, 6, 64, 64),) * 4, ((2, 3, 5, 4), (2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 4)),
              ((1, 3, 1024, 8), (1, 3, 1024, 16), (1, 3, 1024, 16), (1, 3, 1024, 8))]


@gpu
@pytest.mark.parametrize("fusion", [False, True], ids=["cuda", "fusion_cuda"])
@pytest.mark.parametrize("dtype", ["f32", "f64", "f16", "bf16"])
@pytest.mark.parametrize("causal,offset", MASKS)
def test_gpu_against_float64(fusion, dtype, causal, offset):
    dev = em.device("cuda", fusion=fusion)
    for i, shapes in enumerate(GPU_SHAPES):
        rng = np.random.default_rng(i)
        g, q, k, v = (rng.normal(size=s) for s in shapes)
        _, p = ref_attention(q, k, v, 0.125, causal, offset)
        arrs = [a.astype(_NP[dtype]) for a in (g, q, k, v, p)]
        got = apply(ATTENTION_BACKWARD, tuple(em.tensor(a, device=dev) for a in arrs),
                    {"scale": 0.125, "causal": causal, "offset": offset})
        want = ref_attention_backward(*(a.astype(np.float64) for a in arrs), 0.125, causal,
                                      offset)
        tol = _TOL[dtype]
        for n, a, w in zip("qkv", got, want):
            assert a.dtype.short == dtype
            np.testing.assert_allclose(a.numpy().astype(np.float64), w, atol=tol * 8,
                                       rtol=tol, err_msg=f"shapes {i} {dtype}: d{n}")


@gpu
def test_gpu_backward_pass_runs_one_op():
    dev = em.device("cuda").autodiff()
    rng = np.random.default_rng(1)
    ts = [em.tensor(rng.normal(size=(4, 6, 128, 64)).astype(np.float32),
                    device=dev).require_grad() for _ in range(3)]
    out, _ = apply(ATTENTION, tuple(ts), {"scale": 0.125, "causal": True, "offset": 0})
    loss = out.sum()
    em.sync(dev)
    em.fusion.reset_stats()
    grads = loss.backward()
    for t in ts:
        t.grad(grads).numpy()
    st = em.fusion.stats()
    assert st["inner_ops"] == 2, st          # the seed (full) and the op: no matmul
