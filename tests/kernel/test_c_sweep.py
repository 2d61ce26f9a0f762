"""The column-mode broadcast sweep of the C renderer (ember/kernel/c/render.py): the parts of
the epilogue that do not change along the reduced axis are computed once per lane, and when
the output is contiguous along the reduced axis (a reduction over a swapped dim: layer norm
after ``swap_dims``) the sweep goes through a transposing tile. Checked against NumPy (max
reductions: exact), against the IR interpreter's epilogue applied to the kernel's sums (bit
for bit: float sums are pairwise in the renderer's own order) and against float64 NumPy,
over tile edges, odd sizes and dtypes."""
import numpy as np
import pytest

from ember import dtype as dt
from ember.kernel import ir
from ember.backend.fusion.lower import split_broadcast
from ember.kernel.interpret import evaluate

from .test_c_kernels import bits_equal, view


def replay(rt, kernel, inputs, args):
    """What a broadcast reduction means: the reduction (by C: float sums are pairwise in
    an order the interpreter does not follow), then the epilogue at every position by the
    IR interpreter."""
    red, ew = split_broadcast(kernel)
    (mid,) = rt.launch(rt.compile(red), inputs, args)
    return evaluate(ew, list(inputs) + [mid], args)


def _swapped(shape, npd, seed):
    """x of iteration shape (B, L, R), stored as (B, R, L): the kept dim L has unit stride,
    the output (contiguous in (B, L, R)) has the reduced axis R contiguous."""
    rng = np.random.default_rng(seed)
    b, n_l, r = shape
    base = (rng.standard_normal((b, r, n_l)) * 4).astype(npd)
    return base.transpose(0, 2, 1)


@pytest.mark.parametrize("shape", [(3, 70, 37), (2, 33, 5), (2, 1030, 64), (1, 17, 48)])
def test_swapped_layer_norm_shape_max(rt, shape):
    """(x - max) * w + b with w, b indexed along the reduced axis, against NumPy exactly."""
    x = _swapped(shape, np.float32, 1)
    r = shape[2]
    rng = np.random.default_rng(2)
    w = rng.standard_normal(r).astype(np.float32)
    bias = rng.standard_normal(r).astype(np.float32)
    vx, _ = view(x)
    vw = ir.BufferView(dt.f32, (0, 0, 1))
    L, W, B = ir.Load(0, dt.f32), ir.Load(1, dt.f32), ir.Load(2, dt.f32)
    epi = (L - ir.Acc(dt.f32) * ir.Arg(0, dt.f32)) * W + B
    k = ir.Reduce(shape, 2, (vx, vw, vw), L, "max", epi, dt.f32, (dt.f32,), broadcast=True)
    p = rt.compile(k)
    assert p.mode == "column" and "tile_" in p.source
    (out,) = rt.launch(p, [x, w, bias], [0.5])
    ref = (x - x.max(2, keepdims=True) * np.float32(0.5)) * w + bias
    assert out.flags.c_contiguous
    bits_equal(out, ref)


@pytest.mark.parametrize("d", [dt.f32, dt.f64, dt.f16])
def test_swapped_normalize_sum_matches_interpreter(rt, d):
    """A layer norm's second kernel: sum of squares around a given mean, then
    (x - mean) * rsqrt(var + eps) at every position; the per-lane part hoisted."""
    shape = (2, 45, 67)
    x = _swapped(shape, d.np, 3)
    mean = x.astype(np.float64).mean(2).astype(d.np)          # (2, 45), kept positions
    vx, _ = view(x)
    vm = ir.BufferView(d, (45, 1, 0))
    cd = ir.compute_dtype(d)
    L = ir.Load(0, d)
    Lf = ir.Cast(L, cd) if cd is not d else L
    M = ir.Load(1, d)
    Mf = ir.Cast(M, cd) if cd is not d else M
    c = Lf - Mf
    var = ir.Acc(cd) * ir.Arg(0, cd) + ir.Arg(1, cd)
    epi = c * (ir.Const(1.0, cd) / ir.Unary("sqrt", var, cd))
    k = ir.Reduce(shape, 2, (vx, vm), c * c, "sum", epi, d, (cd, cd), broadcast=True)
    p = rt.compile(k)
    assert p.mode == "column" and "tile_" in p.source and "h0_" in p.source
    args = [1 / 67, 1e-5]
    (out,) = rt.launch(p, [x, mean.reshape(-1)], args)
    (ref,) = replay(rt, k, [x, mean.reshape(-1)], args)
    bits_equal(out, ref)
    # and close to an independent float64 layer norm
    x64 = x.astype(np.float64)
    m64 = mean.astype(np.float64)[..., None]
    v64 = ((x64 - m64) ** 2).mean(2, keepdims=True)
    tol = {dt.f32: 1e-4, dt.f64: 1e-10, dt.f16: 2e-2}[d]
    np.testing.assert_allclose(out.astype(np.float64), (x64 - m64) / np.sqrt(v64 + 1e-5),
                               rtol=tol, atol=tol)


def test_swapped_epilogues_invariant_index_and_ints(rt):
    """Epilogues that do not read along the axis at all (hoisted whole), that are the
    accumulator itself, that use the axis' Index, and an int sum, through the tile."""
    shape = (2, 40, 29)
    x = _swapped(shape, np.float32, 4)
    vx, _ = view(x)
    L, A = ir.Load(0, dt.f32), ir.Acc(dt.f32)
    kpos = np.arange(29, dtype=np.float32)
    lane = np.arange(40, dtype=np.float32)[:, None]
    mx = x.max(2, keepdims=True)
    cases = [
        (A * 2.0 + ir.Cast(ir.Index(1), dt.f32), np.broadcast_to(mx * 2 + lane, shape)),
        (A, np.broadcast_to(mx, shape)),
        (L - A + ir.Cast(ir.Index(2), dt.f32) * 0.25, (x - mx) + kpos * np.float32(0.25)),
    ]
    for epi, ref in cases:
        k = ir.Reduce(shape, 2, (vx,), L, "max", epi, dt.f32, broadcast=True)
        p = rt.compile(k)
        assert p.mode == "column" and "tile_" in p.source
        (out,) = rt.launch(p, [x])
        bits_equal(out, np.ascontiguousarray(ref, np.float32))
    xi = (x * 10).astype(np.int32)
    vi, _ = view(xi)
    Li = ir.Load(0, dt.i32)
    k = ir.Reduce(shape, 2, (vi,), Li, "sum", Li * 3 - ir.Acc(dt.i32), dt.i32, broadcast=True)
    p = rt.compile(k)
    assert "tile_" in p.source
    (out,) = rt.launch(p, [xi])
    np.testing.assert_array_equal(out, xi * 3 - xi.sum(2, keepdims=True))


def test_threads_and_chunks_give_the_same_bits(rt):
    from ember.kernel.autotune import Variant
    shape = (4, 300, 50)
    x = _swapped(shape, np.float32, 5)
    vx, _ = view(x)
    L = ir.Load(0, dt.f32)
    k = ir.Reduce(shape, 2, (vx,), L * L, "sum", L / ir.Acc(dt.f32), dt.f32, broadcast=True)
    outs = []
    for th in (1, 2, 3):
        p = rt.compile(k, Variant(th, 0))
        out = np.empty(shape, np.float32)
        rt.launch_into(p, [x], [], [out])
        outs.append(out)
    (ref,) = replay(rt, k, [x], [])
    for o in outs:
        bits_equal(o, ref)


@pytest.mark.parametrize("lanes", [64, 512, 1024, 4096])
def test_column_lanes_variant_keeps_results(rt, lanes):
    """The ``lanes`` variant (accumulator bytes per work item, autotuned) changes how the
    lanes are cut into work items, not the results: a swapped max-normalize is exact, and a
    column sum is the same pairwise tree, for every width."""
    from ember.kernel.autotune import Variant
    shape = (16, 1030, 20)          # enough lane blocks that no width is cut down
    x = _swapped(shape, np.float32, 3)
    vx, _ = view(x)
    L = ir.Load(0, dt.f32)
    epi = L - ir.Acc(dt.f32)
    k = ir.Reduce(shape, 2, (vx,), L, "max", epi, dt.f32, (), broadcast=True)
    p = rt.compile(k, Variant(lanes=lanes))
    assert p.mode == "column"
    (out,) = rt.launch(p, [x], [])
    bits_equal(out, x - x.max(2, keepdims=True))
    s = ir.Reduce(shape, 2, (vx,), L, "sum", ir.Acc(dt.f32), dt.f32, ())
    (got,) = rt.launch(rt.compile(s, Variant(lanes=lanes)), [x], [])
    (ref,) = rt.launch(rt.compile(s), [x], [])
    bits_equal(got, ref)
    w = max(16, lanes // 4)
    assert f"* {w};" in p.source          # the lane block of this width
