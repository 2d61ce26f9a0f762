"""A linear layer as one primitive each way (ember/ops/linear.py): ``linear`` under Fusion
runs as its product and a bias add that fuses with what follows, and its derivative
``linear_backward`` runs as one op where the backend lists it -- on the Cuda backend two
cuBLAS products and `column_sum_kernel` (ember/backend/cuda/linear.py) -- against float64
references written here.

Without a GPU: the column-sum kernel's IR on the IR interpreter and the C runtime, its CUDA
C compiled with NVRTC; the Cuda host code over NumPy with those runtimes (and the reference
without one); the gradients for every combination of inputs that need them, and which ops
ran below Fusion. On a GPU: the op against float64 on Cuda and Fusion(Cuda), and a linear
layer's backward pass as one op there."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ember as em
from ember.backend import Autodiff, Fusion, NdArray
from ember.backend.cuda import linear as LB
from ember.kernel.cuda.compiler import default_arch
from ember.kernel.cuda.render import render
from ember.ops.linear import LINEAR_BACKWARD
from ember.tensor.dispatch import apply
from tests.backend_cuda._host import cpu_kernel_runtimes, host_namespace
from tests.fusion._util import RecordingNdArray
from tests.kernel_cuda._util import nvrtc_or_skip

BF16 = np.dtype(ml_dtypes.bfloat16)
gpu = pytest.mark.skipif(not em.cuda.is_available(),
                         reason=f"cuda: {em.cuda.why_unavailable()}")


def ref_grads(g, x, w, need_x=True, has_bias=True):
    """``[dx] + [dweight] + [dbias]`` of ``y = x @ w + b`` in float64, by the textbook."""
    n = int(np.prod(x.shape[:-1]))
    xr, gr = x.reshape(n, x.shape[-1]), g.reshape(n, g.shape[-1])
    out = [np.einsum("...o,io->...i", g, w)] if need_x else []
    out.append(np.einsum("ni,no->io", xr, gr))
    if has_bias:
        out.append(gr.sum(axis=0))
    return out


# -- without a GPU --------------------------------------------------------------------------
@pytest.mark.parametrize("rows,cols", [(7, 5), (1, 3), (3000, 6), (64, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_column_sum_kernel_on_the_cpu_runtimes(rows, cols, dtype):
    g = np.random.default_rng(rows).normal(size=(rows, cols)).astype(dtype)
    k = LB.column_sum_kernel(rows, cols, dtype)
    for name, rt in cpu_kernel_runtimes():
        (got,) = rt.launch(rt.compile(k), [g], [])
        assert got.shape == (1, cols) and got.dtype == dtype, name
        tol = 1e-12 if dtype == np.float64 else 1e-5 * np.sqrt(rows)
        np.testing.assert_allclose(got[0], g.astype(np.float64).sum(0), rtol=tol, atol=tol,
                                   err_msg=name)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_column_sum_kernel_compiles_for_cuda(tmp_path, dtype):
    compiler = nvrtc_or_skip(tmp_path)
    for rows, cols in ((8192, 384), (8192, 1536), (64, 10)):
        assert compiler.build(render(LB.column_sum_kernel(rows, cols, dtype)).source,
                              default_arch()).binary


# (g, x, w) shapes: a batch of sequences, plain rows, no rows, no outputs
SHAPES = [((2, 5, 4), (2, 5, 3), (3, 4)), ((6, 2), (6, 3), (3, 2)),
          ((0, 4), (0, 3), (3, 4)), ((2, 3, 0), (2, 3, 5), (5, 0))]
FLAGS = [(True, True), (True, False), (False, True), (False, False)]


@pytest.mark.parametrize("need_x,has_bias", FLAGS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_host_code_over_numpy(need_x, has_bias, dtype):
    """`linear_backward_impl` with NumPy for CuPy and a CPU kernel runtime, on contiguous
    and on transposed (non-contiguous) g and x."""
    for name, rt in cpu_kernel_runtimes():
        impl = LB.linear_backward_impl(np, host_namespace(rt))
        for i, shapes in enumerate(SHAPES):
            rng = np.random.default_rng(i)
            g, x, w = (rng.normal(size=s).astype(dtype) for s in shapes)
            if i == 0:                         # the same values, laid out [T, B, .]
                g, x = (np.ascontiguousarray(np.swapaxes(a, 0, 1)).swapaxes(0, 1)
                        for a in (g, x))
            got = impl(g, x, w, need_x=need_x, has_bias=has_bias)
            want = ref_grads(*(a.astype(np.float64) for a in (g, x, w)), need_x, has_bias)
            assert len(got) == len(want)
            tol = 1e-12 if dtype == np.float64 else 2e-5
            for a, b in zip(got, want):
                assert a.shape == b.shape and a.dtype == (
                    np.float32 if dtype == np.float16 else dtype), (name, i)
                np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=f"{name} {i}")


def test_without_a_kernel_runtime_the_reference_runs():
    impl = LB.linear_backward_impl(np, host_namespace(None))
    rng = np.random.default_rng(7)
    g, x, w = (rng.normal(size=s) for s in SHAPES[0])
    for a, b in zip(impl(g, x, w, need_x=True, has_bias=True), ref_grads(g, x, w)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


class _ListsIt(RecordingNdArray):
    """A backend that runs linear_backward as an op of its own (as Cuda does)."""
    fused_ops = frozenset({"linear_backward"})


def _grads(inner, needs, bias=True):
    """Gradients of ``sum((x @ w + b) * h)`` for the inputs ``needs`` marks, against
    float64, and the ops ``inner`` ran in the backward pass."""
    dev = Autodiff(Fusion(inner, "c", 0)).device(0)
    rng = np.random.default_rng(sum(needs))
    arrs = [rng.normal(size=s) for s in ((2, 5, 3), (3, 4), (4,))][:3 if bias else 2]
    ts = [em.tensor(a, device=dev) for a in arrs]
    ts = [t.require_grad() if n else t for t, n in zip(ts, needs)]
    h = rng.normal(size=(2, 5, 4))
    loss = (em.linear(*ts) * em.tensor(h, device=dev)).sum()
    dev.sync()
    inner.ran.clear()
    grads = loss.backward()
    got = [t.grad(grads).numpy() if n else None for t, n in zip(ts, needs)]
    ran = list(inner.ran)
    want = ref_grads(h, arrs[0], arrs[1], True, bias)
    for name, a, b in zip(("dx", "dw", "db"), got, want):
        if a is not None:
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, err_msg=name)
    return ran


@pytest.mark.parametrize("needs", [(True, True, True), (False, True, True),
                                   (True, True, False), (True, False, True),
                                   (False, False, True), (True, False, False)])
def test_gradients_of_every_input_combination(needs):
    """One linear_backward op wherever the weight needs a gradient, with only the outputs
    asked for; without it the Tensor ops for dx / dbias alone."""
    ran = _grads(_ListsIt(), needs)
    if needs[1]:
        assert ran.count("linear_backward") == 1 and "matmul" not in ran, ran
    else:
        assert "linear_backward" not in ran and ran.count("matmul") == int(needs[0]), ran
    if any(needs[:2]):
        ran = _grads(_ListsIt(), needs[:2], bias=False)
        assert ran.count("linear_backward") == int(needs[1]), ran


class _ListsNothing(RecordingNdArray):
    fused_ops = frozenset()


def test_without_the_listing_the_decomposition_fuses():
    """Below Fusion a backend that does not list linear_backward runs its decomposition
    (products on NdArray, the bias sum a kernel); NdArray lists it. The forward's bias add
    fuses with the relu after it."""
    assert "linear_backward" in NdArray.fused_ops
    ran = _grads(_ListsNothing(), (True, True, True))
    assert "linear_backward" not in ran and ran.count("matmul") == 2, ran
    inner = RecordingNdArray()
    dev = Fusion(inner, "c", 0).device(0)
    rng = np.random.default_rng(1)
    x, w, b = (em.tensor(rng.normal(size=s), device=dev) for s in ((2, 5, 3), (3, 4), (4,)))
    dev.sync()
    inner.ran.clear()
    em.fusion.reset_stats()
    y = em.linear(x, w, b).relu().numpy()
    assert inner.ran == ["matmul"] and em.fusion.stats()["kernels"] == 1, inner.ran
    want = np.maximum(x.numpy() @ w.numpy() + b.numpy(), 0.0)
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)


def test_inputs_the_primitive_does_not_take_run_the_composite():
    """A 1-d input, mixed dtypes and a broadcast bias go through matmul and add, promoting
    and broadcasting as before."""
    dev = em.device("cpu").autodiff()
    rng = np.random.default_rng(2)
    w = em.tensor(rng.normal(size=(3, 4)).astype(np.float32), device=dev).require_grad()
    for x, b in ((rng.normal(size=(3,)), rng.normal(size=(4,))),
                 (rng.normal(size=(2, 3)), rng.normal(size=(1,))),
                 (rng.normal(size=(2, 3)).astype(np.float16), None)):
        tx = em.tensor(x.astype(np.float32) if x.dtype == np.float64 else x, device=dev)
        tb = None if b is None else em.tensor(b.astype(np.float32), device=dev)
        y = em.linear(tx, w, tb)
        want = tx.numpy().astype(np.float32) @ w.numpy() + (0 if b is None else tb.numpy())
        np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)
        grads = y.sum().backward()
        assert w.grad(grads) is not None


def test_bad_inputs_are_refused():
    dev = em.device("cpu")
    t = lambda *s, d=np.float32: em.tensor(np.zeros(s, d), device=dev)  # noqa: E731
    with pytest.raises(em.errors.ShapeError, match="linear_backward: the output gradient"):
        apply(LINEAR_BACKWARD, (t(2, 5), t(2, 3), t(3, 4)), {"need_x": True,
                                                            "has_bias": True})
    with pytest.raises(em.errors.DTypeError, match="linear_backward: the output gradient g "
                                                   "is f64"):
        apply(LINEAR_BACKWARD, (t(2, 4, d=np.float64), t(2, 3), t(3, 4)),
              {"need_x": True, "has_bias": False})
    with pytest.raises(em.errors.DTypeError, match="need_x must be a bool"):
        apply(LINEAR_BACKWARD, (t(2, 4), t(2, 3), t(3, 4)), {"need_x": 1, "has_bias": False})
    with pytest.raises(em.errors.ShapeError, match="linear: bias must have shape"):
        em.linear(t(2, 3), t(3, 4), t(3))


def test_it_has_no_derivative_of_its_own():
    dev = em.device("cpu").autodiff()
    rng = np.random.default_rng(6)
    g, x, w = (em.tensor(rng.normal(size=s), device=dev).require_grad()
               for s in ((2, 4), (2, 3), (3, 4)))
    dx, _ = apply(LINEAR_BACKWARD, (g, x, w), {"need_x": True, "has_bias": False})
    with pytest.raises(em.errors.AutodiffError, match="linear_backward has no derivative"):
        dx.sum().backward()


# -- on a GPU -------------------------------------------------------------------------------
_TOL = {"f64": 1e-11, "f32": 3e-5, "f16": 4e-3, "bf16": 3e-2}
_NP = {"f64": np.float64, "f32": np.float32, "f16": np.float16, "bf16": BF16}
GPU_SHAPES = [((32, 256, 384), (32, 256, 384), (384, 384)),
              ((64, 10), (64, 256), (256, 10)), ((3, 7, 5), (3, 7, 9), (9, 5))]


@gpu
@pytest.mark.parametrize("fusion", [False, True], ids=["cuda", "fusion_cuda"])
@pytest.mark.parametrize("dtype", ["f32", "f64", "f16", "bf16"])
@pytest.mark.parametrize("need_x,has_bias", FLAGS)
def test_gpu_against_float64(fusion, dtype, need_x, has_bias):
    dev = em.device("cuda", fusion=fusion)
    for i, shapes in enumerate(GPU_SHAPES):
        rng = np.random.default_rng(i)
        arrs = [rng.normal(size=s).astype(_NP[dtype]) for s in shapes]
        got = apply(LINEAR_BACKWARD, tuple(em.tensor(a, device=dev) for a in arrs),
                    {"need_x": need_x, "has_bias": has_bias})
        want = ref_grads(*(a.astype(np.float64) for a in arrs), need_x, has_bias)
        rows = np.prod(shapes[1][:-1])
        for a, w in zip(got, want):
            assert a.dtype.short == dtype
            tol = _TOL[dtype] * np.sqrt(max(rows, shapes[1][-1]))
            np.testing.assert_allclose(a.numpy().astype(np.float64), w, atol=tol, rtol=tol,
                                       err_msg=f"shapes {i} {dtype}")


@gpu
def test_gpu_backward_pass_runs_one_op():
    dev = em.device("cuda").autodiff()
    rng = np.random.default_rng(1)
    x, w, b = (em.tensor(rng.normal(size=s).astype(np.float32), device=dev).require_grad()
               for s in ((32, 256, 384), (384, 1536), (1536,)))
    loss = em.linear(x, w, b).sum()
    em.sync(dev)
    em.fusion.reset_stats()
    grads = loss.backward()
    for t in (x, w, b):
        t.grad(grads).numpy()
    assert em.fusion.stats()["inner_ops"] == 2, em.fusion.stats()  # the seed (full) and the op
