"""Generated CUDA kernels beyond single ops: views folded into strides (broadcast, flips,
permutations, offsets), the vectorized path and its fallbacks (tails, unaligned pointers,
unaligned views), 64-bit indexing, `Index`, multi-output kernels, and reductions in every
layout (row, column, split; reduce-then-broadcast) for every reduce op and dtype.

Each kernel is rendered always, compiled where NVRTC is installed, and run on the GPU where
there is one, against the IR interpreter: the same bits, except float sums and products
(another association order), which stay within their rounding bound."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ember import dtype as dt
from ember.kernel import ir
from ember.kernel.cuda.render import Options, render
from ember.kernel.cuda.tune import CudaVariant
from ember.kernel.interpret import evaluate
from tests.kernel_cuda._util import (BF16, assert_same, compare_with_interpreter,
                                     compile_only, gpu_or_skip, nvrtc_or_skip, to_gpu, to_host)

RNG = np.random.default_rng(7)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cuda-kernels")


@pytest.fixture(scope="module")
def comp(cache):
    return nvrtc_or_skip(cache)


@pytest.fixture(scope="module")
def rt(cache):
    return gpu_or_skip(cache)


def view(arr: np.ndarray, base: np.ndarray | None = None):
    """The BufferView of ``arr`` (its strides, any sign) addressed from ``base``'s first
    element (default: its own)."""
    item = arr.itemsize
    st = tuple(s // item for s in arr.strides)
    if base is None:
        return ir.BufferView(dt.from_numpy(arr.dtype), st, 0)
    off = (arr.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // item
    return ir.BufferView(dt.from_numpy(arr.dtype), st, off)


def floats(shape, d=np.float32, scale=3.0):
    return (RNG.standard_normal(shape) * scale).astype(d)


# -- the kernels ----------------------------------------------------------------------------
def ew_cases():
    """``(name, kernel, inputs, args, variant)``: elementwise kernels over views."""
    cases = []
    a = floats((5, 7, 33))
    b = floats((7, 1))
    c = floats(33)
    sh = (5, 7, 33)
    k = ir.Elementwise(sh, (view(a), ir.BufferView(dt.f32, (0, 1, 0)),
                            ir.BufferView(dt.f32, (0, 0, 1))),
                       ((ir.Load(0, dt.f32) + ir.Load(1, dt.f32)) * ir.Load(2, dt.f32)
                        - ir.Load(0, dt.f32) / (ir.Load(2, dt.f32) + ir.Arg(0, dt.f32)),),
                       (dt.f32,), (dt.f32,))
    cases.append(("broadcast chain", k, [a, b, c], [0.25], None))

    base = floats((6, 9, 10))
    x = base[::-1, :, ::-2]                                      # (6, 9, 5) flipped, step 2
    y = base.transpose(1, 2, 0)[:, 2:7, :].transpose(2, 0, 1)    # (6, 9, 5) permuted
    z = base[0:6, 0:9, 3:8]                                      # an offset
    k = ir.Elementwise((6, 9, 5), (view(x, base), view(y, base), view(z, base)),
                       (ir.Load(0, dt.f32) * ir.Load(1, dt.f32) - ir.Load(2, dt.f32),),
                       (dt.f32,))
    cases.append(("flips permutations offsets", k, [base, base, base], [], None))

    for n, d in ((1000003, np.float32), (4099, np.float16), (777, np.float64),
                 (1030, BF16), (4103, np.bool_), (1025, np.int8)):
        if d == np.bool_:
            arr = RNG.random(n) < 0.5
        elif d == np.int8:
            arr = RNG.integers(-128, 128, n).astype(np.int8)
        else:
            arr = floats(n, np.float32).astype(d)
        ddt = dt.from_numpy(arr.dtype)
        ld = ir.Load(0, ddt)
        if ddt.is_bool:
            e, od = (ir.unary("lnot", ld),), (dt.bool_,)
        elif ddt.is_int:
            e, od = (ir.cast(ld, dt.f64) * 0.5, ir.cast(ld, dt.i64)), (dt.f64, dt.i64)
        else:
            w = ir.cast(ld, ld.dtype)
            e, od = (w * w + 1.0, ir.cast(w, dt.f32)), (ddt, dt.f32)
        k = ir.Elementwise((n,), (ir.BufferView(ddt, (1,)),), e, od)
        cases.append((f"flat {ddt.short} n={n} (vector + tail)", k, [arr], [], None))
        cases.append((f"flat {ddt.short} n={n} scalar", k, [arr], [], CudaVariant(vec=1)))

    x = floats((64, 96))
    bias = floats(96)
    k = ir.Elementwise((64, 96), (view(x), ir.BufferView(dt.f32, (0, 1))),
                       (ir.Load(0, dt.f32) + ir.Load(1, dt.f32),), (dt.f32,))
    cases.append(("rows + broadcast bias (vector rows)", k, [x, bias], [], None))
    k = ir.Elementwise((64, 95), (ir.BufferView(dt.f32, (96, 1), 1),
                                  ir.BufferView(dt.f32, (0, 1), 1)),
                       (ir.Load(0, dt.f32) * ir.Load(1, dt.f32),), (dt.f32,))
    cases.append(("odd rows (no vectors)", k, [x, bias], [], None))
    k = ir.Elementwise((64, 96), (ir.BufferView(dt.f32, (96, 1), 2),
                                  ir.BufferView(dt.f32, (1, 64), 0)),
                       (ir.Load(0, dt.f32) - ir.Load(1, dt.f32),), (dt.f32,))
    xx = floats(64 * 96 + 2)
    cases.append(("an unaligned view and a transposed one", k, [xx, xx], [], None))

    k = ir.Elementwise((4, 6, 8), (), (ir.cast(ir.Index(0), dt.f32) * 100.0
                                       + ir.cast(ir.Index(1), dt.f32) * 10.0
                                       + ir.cast(ir.Index(2), dt.f32),
                                       ir.Index(2) * ir.Index(1)), (dt.f32, dt.i64))
    cases.append(("Index", k, [], [], None))
    k = ir.Elementwise((3, 1, 5), (ir.BufferView(dt.i32, (0, 0, 1)),),
                       (ir.Load(0, dt.i32) * ir.cast(ir.Index(0), dt.i32),), (dt.i32,))
    cases.append(("Index with size-1 dims", k, [np.arange(5, dtype=np.int32)], [], None))
    x = floats((33, 40))
    k = ir.Elementwise((33, 40), (view(x),), (ir.Load(0, dt.f32) * 3.0,), (dt.f32,))
    cases.append(("64-bit indexing", k, [x], [], CudaVariant(idx64=True)))
    cases.append(("block 1024 ept 4", k, [x], [], CudaVariant(block=1024, ept=4)))
    cases.append(("vec 16", k, [x], [], CudaVariant(vec=16)))
    # vectors wider than one access: U chunks of 16 bytes a block apart per thread (tails,
    # partial rows of chunks, broadcast and strided inputs, Index, narrow storage)
    n = 1000003
    xs, ys = floats(n), floats(2 * n)
    k = ir.Elementwise((n,), (ir.BufferView(dt.f32, (1,)), ir.BufferView(dt.f32, (0,)),
                              ir.BufferView(dt.f32, (2,), 1)),
                       (ir.Load(0, dt.f32) * ir.Load(1, dt.f32) + ir.Load(2, dt.f32),
                        ir.cast(ir.Load(0, dt.f32), dt.f16)), (dt.f32, dt.f16))
    for v in (8, 16):
        cases.append((f"chunks vec {v} flat + tail", k, [xs, np.float32([1.5]), ys], [],
                      CudaVariant(vec=v)))
        cases.append((f"chunks vec {v} block 128", k, [xs, np.float32([1.5]), ys], [],
                      CudaVariant(vec=v, block=128, ept=1)))
    rows = floats((64, 96))
    k = ir.Elementwise((64, 96), (view(rows), ir.BufferView(dt.f32, (0, 1))),
                       (ir.Load(0, dt.f32) + ir.Load(1, dt.f32),), (dt.f32,))
    cases.append(("chunks vec 8 rows + bias", k, [rows, bias], [], CudaVariant(vec=8)))
    h = floats(4099, np.float16)
    k = ir.Elementwise((4099,), (ir.BufferView(dt.f16, (1,)),),
                       (ir.cast(ir.Load(0, dt.f16), dt.f32) * 2.0,), (dt.f32,))
    cases.append(("chunks vec 16 f16 in f32 out", k, [h], [], CudaVariant(vec=16, block=32)))
    k = ir.Elementwise((4, 6, 8), (), (ir.cast(ir.Index(0), dt.f32) * 100.0
                                       + ir.cast(ir.Index(1), dt.f32) * 10.0
                                       + ir.cast(ir.Index(2), dt.f32),), (dt.f32,))
    cases.append(("chunks vec 8 Index", k, [], [], CudaVariant(vec=8, block=32)))
    # chunks that fill every step: no clamp, no store guard
    xw = floats(1 << 15)
    k = ir.Elementwise((xw.size,), (ir.BufferView(dt.f32, (1,)),),
                       (ir.Load(0, dt.f32) * 3.0 - 1.0,), (dt.f32,))
    for v, b in ((8, 128), (16, 32)):
        cases.append((f"chunks vec {v} block {b} whole steps", k, [xw], [],
                      CudaVariant(vec=v, block=b)))

    # f32 division by a kernel constant (an Arg, a Const; a multiply by the reciprocal and
    # a correction where the divisor and x are in range, else the division): the
    # division's bits, specials and a subnormal midpoint (3 * 2^-149 / 6) included
    sp = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3 * 2.0 ** -149,
                     1.1754942e-38, 1.1754944e-38, 3.4028235e38, -3.4028235e38, 1.0, 6.0, 7.0])
    dx = np.concatenate([sp, floats(4001), floats(3000) * np.float32(1e-37),
                         floats(3000) * np.float32(1e37),
                         RNG.integers(0, 1 << 32, 4000, dtype=np.uint64).astype(
                             np.uint32).view(np.float32)])
    k = ir.Elementwise((dx.size,), (ir.BufferView(dt.f32, (1,)),),
                       (ir.Load(0, dt.f32) / ir.Arg(0, dt.f32),
                        ir.Load(0, dt.f32) / ir.Const(6.0, dt.f32),
                        ir.Load(0, dt.f32) / ir.Const(1e-30, dt.f32),
                        ir.Load(0, dt.f32) / ir.Const(0.0, dt.f32),
                        # powers of two (through the multiply and correction too)
                        ir.Load(0, dt.f32) / ir.Const(2.0, dt.f32),
                        ir.Load(0, dt.f32) / ir.Const(-(2.0 ** -127), dt.f32),
                        ir.Load(0, dt.f32) / ir.Const(2.0 ** 127, dt.f32)), (dt.f32,) * 7,
                       (dt.f32,))
    for c in (math.sqrt(2.0), 6.0, -2.5, float.fromhex("0x1.fffffep0"), 2.0 ** -20,
              2.0 ** 20, 2.0 ** 21, 3e-39, -1e30, 0.0, math.inf, math.nan):
        cases.append((f"division by a constant ({c})", k, [dx], [c], None))
    dw = dx[:8192]          # the specials first; 2048 chunks: whole steps of 256
    kw = ir.Elementwise((dw.size,), (ir.BufferView(dt.f32, (1,)),),
                        (ir.Load(0, dt.f32) / ir.Arg(0, dt.f32),), (dt.f32,), (dt.f32,))
    for c in (math.sqrt(2.0), 3e-39, math.inf):
        cases.append((f"division by a constant, whole steps ({c})", kw, [dw], [c], None))
    k = ir.Elementwise((4099,), (ir.BufferView(dt.f16, (1,)),),
                       (ir.Load(0, dt.f16) / ir.Arg(0, dt.f16),), (dt.f16,), (dt.f16,))
    cases.append(("f16 division by an Arg", k, [h], [0.375], None))

    k = ir.Elementwise((0, 5), (ir.BufferView(dt.f32, (5, 1)),), (ir.Load(0, dt.f32),),
                       (dt.f32,))
    cases.append(("empty", k, [np.zeros(1, np.float32)], [], None))
    k = ir.Elementwise((), (ir.BufferView(dt.f64, ()),), (ir.Load(0, dt.f64) + 1.0,),
                       (dt.f64,))
    cases.append(("0-d", k, [np.array([2.5])], [], None))
    return cases


def red_values(d: dt.DType, shape):
    if d.is_bool:
        return RNG.random(shape) < 0.5
    if d.is_int:
        info = np.iinfo(d.np)
        return RNG.integers(max(info.min, -50), min(info.max, 50), shape).astype(d.np)
    v = RNG.standard_normal(shape) * 4
    if d.itemsize >= 4:
        flat = v.reshape(-1)
        if flat.size > 10:
            flat[3] = np.nan if d.is_float else 0
            flat[7] = np.inf
    return v.astype(d.np)


def red(shape, axis, d: dt.DType, op: str, strides=None, broadcast=False, epi=None,
        acc_d=None, out=None):
    strides = strides or tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
    ld = ir.Load(0, d)
    cd = acc_d or (dt.i64 if d.is_bool and op in ("sum", "prod") else ir.compute_dtype(d))
    pro = ir.cast(ld, cd) if ir.compute_dtype(d) is not cd or d in (dt.f16, dt.bf16) else ld
    e = epi(ir.Acc(cd), ld) if epi else ir.Acc(cd)
    return ir.Reduce(tuple(shape), axis, (ir.BufferView(d, strides),), pro, op, e,
                     out or e.dtype, (), broadcast)


RED_DTYPES = [dt.f32, dt.f64, dt.f16, dt.bf16, dt.i64, dt.i32, dt.i8, dt.u8, dt.bool_]


def red_cases():
    """``(name, kernel, inputs, args, variant)``: reductions in every layout."""
    cases = []
    for d in RED_DTYPES:
        ops = ("max", "min") if d.is_bool else ("sum", "prod", "max", "min")
        for op in ops:
            for shape, axis in (((9, 7), 1), ((3, 1000), 1), ((2, 5000), 1), ((1, 70000), 1),
                                ((300, 40), 0), ((4, 33, 16), 1), ((40000, 3), 0),
                                ((5, 0), 1), ((0, 4), 1)):
                if op == "prod" and shape[axis] > 40 and d.is_float:
                    continue    # products over long axes overflow: nothing to compare
                x = red_values(d, shape)
                k = red(shape, axis, d, op)
                cases.append((f"{op} {d.short} {shape} axis {axis}", k, [x], [], None))
    # reduce-then-broadcast (softmax-like, layer-norm-like), every layout
    for shape, axis in (((6, 50), 1), ((3, 3000), 1), ((2, 70000), 1), ((500, 64), 0),
                        ((64, 5, 40), 1), ((20000, 40), 0), ((7, 1), 1)):
        for d in (dt.f32, dt.f16):
            x = red_values(d, shape)
            x[np.isnan(x.astype(np.float64)) | np.isinf(x.astype(np.float64))] = 1
            k = red(shape, axis, d, "max", broadcast=True,
                    epi=lambda acc, ld: ir.cast(ld, dt.f32) - acc, out=d)
            cases.append((f"bc max {d.short} {shape} axis {axis}", k, [x], [], None))
            k = red(shape, axis, d, "sum", broadcast=True,
                    epi=lambda acc, ld: ir.cast(ld, dt.f32) * acc, out=d)
            cases.append((f"bc sum {d.short} {shape} axis {axis}", k, [x], [], None))
    # reduced along a swapped axis, written contiguous along it (layer norm after swap_dims):
    # the column layout's transposed sweep, direct and split
    for B, S, H in ((3, 40, 70), (2, 70000, 40)):
        x = red_values(dt.f32, (B, S, H))
        x[np.isnan(x) | np.isinf(x)] = 0.5
        for op in ("sum", "max"):
            k = red((B, H, S), 2, dt.f32, op, strides=(S * H, 1, H), broadcast=True,
                    epi=lambda acc, ld: ld - acc, out=dt.f32)
            cases.append((f"bc {op} swapped {(B, H, S)}", k, [x], [], None))
        xh = x.astype(np.float16)
        k = red((B, H, S), 2, dt.f16, "max", strides=(S * H, 1, H), broadcast=True,
                epi=lambda acc, ld: ir.cast(ld, dt.f32) - acc, out=dt.f16)
        cases.append((f"bc max f16 swapped {(B, H, S)}", k, [xh], [], None))
    # epilogues with loads at kept positions, Index and Args
    x = floats((12, 30))
    m = floats((12, 1))
    k = ir.Reduce((12, 30), 1, (ir.BufferView(dt.f32, (30, 1)), ir.BufferView(dt.f32, (1, 0))),
                  ir.Load(0, dt.f32) * ir.cast(ir.Index(1), dt.f32), "max",
                  ir.Acc(dt.f32) * ir.Arg(0, dt.f32) + ir.Load(1, dt.f32)
                  + ir.cast(ir.Index(0), dt.f32), dt.f32, (dt.f32,))
    cases.append(("epilogue loads, Index, Args", k, [x, m], [0.5], None))
    k = ir.Reduce((12, 30), 0, (ir.BufferView(dt.f32, (30, 1)),),
                  ir.cast(ir.Index(1) * ir.Index(0), dt.f32), "sum",
                  ir.Acc(dt.f32) + ir.cast(ir.Index(1), dt.f32), dt.f32)
    cases.append(("column Index", k, [x], [], None))
    # variants
    x = red_values(dt.f32, (40, 3000))
    for v in (CudaVariant(tpr=1), CudaVariant(tpr=4), CudaVariant(tpr=32),
              CudaVariant(tpr=64), CudaVariant(tpr=1024), CudaVariant(tpr=512, block=1024)):
        k = red((40, 3000), 1, dt.f32, "max")
        cases.append((f"row max {v}", k, [x], [], v))
        k = red((40, 3000), 1, dt.f32, "sum", broadcast=True,
                epi=lambda acc, ld: ld - acc, out=dt.f32)
        cases.append((f"row bc sum {v}", k, [x], [], v))
    xt = red_values(dt.i32, (3000, 40))
    for v in (CudaVariant(by=1), CudaVariant(by=2), CudaVariant(by=32)):
        k = red((3000, 40), 0, dt.i32, "sum")
        cases.append((f"column sum i32 {v}", k, [xt], [], v))
    k = red((40, 3000), 1, dt.f32, "min")
    cases.append(("64-bit indexing", k, [x], [], CudaVariant(idx64=True)))
    return cases


ALL = ew_cases() + red_cases()
IDS = [c[0] for c in ALL]


@pytest.mark.parametrize("case", ALL, ids=IDS)
def test_render(case):
    name, k, _, _, v = case
    opts = Options() if v is None else Options(block=v.block, vec=v.vec, idx32=not v.idx64,
                                               tpr=v.tpr, by=v.by)
    rd = render(k, opts)
    assert rd.source.count("__global__") == max(1, len(rd.launches)), name
    if v is not None and v.idx64:
        assert not rd.idx32


@pytest.mark.parametrize("case", ALL, ids=IDS)
def test_compile(case, comp):
    name, k, _, _, v = case
    opts = Options() if v is None else Options(block=v.block, vec=v.vec, idx32=not v.idx64,
                                               tpr=v.tpr, by=v.by)
    compile_only(comp, k, opts)


@pytest.mark.parametrize("case", ALL, ids=IDS)
def test_gpu_matches_interpreter(case, rt):
    name, k, inputs, args, v = case
    with np.errstate(all="ignore"):
        compare_with_interpreter(rt, k, inputs, args, name, variant=v)


def test_layouts_chosen():
    assert render(red((64, 300), 1, dt.f32, "sum")).mode == "row"
    assert render(red((300, 64), 0, dt.f32, "sum")).mode == "column"
    assert render(red((2, 1 << 20), 1, dt.f32, "sum")).mode == "row+split"
    assert render(red((1 << 20, 64), 0, dt.f32, "sum")).mode == "column+split"
    rd = render(red((2, 1 << 20), 1, dt.f32, "sum", broadcast=True,
                    epi=lambda acc, ld: ld - acc, out=dt.f32))
    assert [ln.name for ln in rd.launches] == ["ember_part", "ember_comb", "ember_sweep"]
    assert rd.scratch > 0 and "__shfl_down_sync" in rd.source


def test_vector_widths_and_alignment():
    k = ir.Elementwise((1 << 20,), (ir.BufferView(dt.f32, (1,)),),
                       (ir.Load(0, dt.f32) * 2.0,), (dt.f32,))
    rd = render(k)           # two chunks of 4 floats per thread and step
    assert rd.vec == 8 and rd.aligned == (16, 16) and "ember_v_float_4x2" in rd.source
    assert render(k, Options(vec=4)).vec == 4 and "uint4" in render(k, Options(vec=4)).source
    k16 = ir.Elementwise((1 << 20,), (ir.BufferView(dt.f16, (1,)),),
                         (ir.cast(ir.Load(0, dt.f16), dt.f32),), (dt.f32,))
    assert render(k16).aligned == (8, 16)           # 4 halfs in, 4 floats out
    assert render(k, Options(vec=1)).vec == 1 and "uint4" not in render(k, Options(vec=1)).source
    # wider: chunks of one 16-byte access, a block of chunks apart, all loaded first
    r8 = render(k, Options(vec=8, block=128))
    assert r8.vec == 8 and r8.aligned == (16, 16) and "ember_v_float_4x2" in r8.source
    assert r8.launches[0].items == (1 << 18) // 2 and "cb + 128" in r8.source
    # 2^20 fills every step of 2 x 128 chunks: no chunk past the end to clamp or skip;
    # 1000003 does not
    assert "NC - 1" not in r8.source and "< NC)" not in r8.source
    kt = ir.Elementwise((1000003,), (ir.BufferView(dt.f32, (1,)),),
                        (ir.Load(0, dt.f32) * 2.0,), (dt.f32,))
    rt8 = render(kt, Options(vec=8, block=128)).source
    assert "(c0 < NC ? c0 : NC - 1)" in rt8 and "if (c1 < NC)" in rt8
    # an offset that is not a multiple of the width: no vector loads from that input
    ko = ir.Elementwise((1 << 20,), (ir.BufferView(dt.f32, (1,), 1),),
                        (ir.Load(0, dt.f32) * 2.0,), (dt.f32,))
    assert render(ko).aligned == (0, 16)
    # a last dim the width does not divide (padded rows, not merged): narrower vectors
    k2 = ir.Elementwise((100, 6), (ir.BufferView(dt.f32, (8, 1)),),
                        (ir.Load(0, dt.f32) * 2.0,), (dt.f32,))
    assert render(k2).vec == 4 and render(k2).aligned == (8, 8)     # 2 chunks of 2 floats


def test_index_width():
    small = ir.Elementwise((1000,), (ir.BufferView(dt.f32, (1,)),), (ir.Load(0, dt.f32),),
                           (dt.f32,))
    big = ir.Elementwise((1 << 31,), (ir.BufferView(dt.u8, (1,)),), (ir.Load(0, dt.u8),),
                         (dt.u8,))
    assert render(small).idx32 and "int32_t tid" in render(small).source
    assert not render(big).idx32 and "int64_t tid" in render(big).source


def test_bad_kernels_raise():
    with pytest.raises(TypeError):
        render(ir.Elementwise((3,), (ir.BufferView(dt.f32, (1,)),),
                              (ir.Binary("add", ir.Load(0, dt.f32), ir.Const(1, dt.i32),
                                         dt.f32),), (dt.f32,)))
    with pytest.raises(ValueError):
        render(ir.Elementwise((3,), (ir.BufferView(dt.f32, (1, 1)),),
                              (ir.Load(0, dt.f32),), (dt.f32,)))
    with pytest.raises(ValueError):
        render(ir.Reduce((3, 4), 2, (ir.BufferView(dt.f32, (4, 1)),), ir.Load(0, dt.f32),
                         "sum", ir.Acc(dt.f32), dt.f32))
    with pytest.raises(TypeError):
        render("not a kernel")


def test_unaligned_pointer_takes_the_scalar_path(rt):
    """A CuPy array whose data pointer is not 16-byte aligned (a slice): same results."""
    base = floats(4099)
    k = ir.Elementwise((4096,), (ir.BufferView(dt.f32, (1,)),),
                       (ir.Load(0, dt.f32) * 3.0 + 1.0,), (dt.f32,))
    prog = rt.compile(k)
    g = to_gpu(base)
    for off in (0, 1, 2, 3):
        (out,) = rt.launch(prog, [g[off:off + 4096]])
        assert_same(to_host(out, np.float32), evaluate(k, [base[off:off + 4096]])[0],
                    f"offset {off}")


def test_launch_into_in_place(rt):
    x = floats(10000)
    k = ir.Elementwise((10000,), (ir.BufferView(dt.f32, (1,)),),
                       (ir.Load(0, dt.f32) * ir.Load(0, dt.f32) - 1.0,), (dt.f32,))
    prog = rt.compile(k)
    g = to_gpu(x)
    rt.launch_into(prog, [g], [], [g])
    assert_same(to_host(g, np.float32), evaluate(k, [x])[0], "in place")


def test_64bit_sizes(rt):
    """More than 2**31 elements: 64-bit indexing, spot-checked against NumPy."""
    cp = pytest.importorskip("cupy")
    free, _ = cp.cuda.runtime.memGetInfo()
    n = (1 << 31) + 37
    if free < 3 * n:
        pytest.skip(f"needs {3 * n / 2**30:.1f} GiB of free GPU memory, has "
                    f"{free / 2**30:.1f}")
    k = ir.Elementwise((n,), (ir.BufferView(dt.u8, (1,)),),
                       (ir.Load(0, dt.u8) + ir.cast(ir.Index(0), dt.u8),), (dt.u8,))
    prog = rt.compile(k)
    assert not prog.rendered.idx32
    x = cp.full(n, 3, dtype=np.uint8)
    (out,) = rt.launch(prog, [x])
    idx = np.array([0, 1, 255, 256, (1 << 31) - 1, 1 << 31, n - 1], dtype=np.int64)
    got = out[cp.asarray(idx)].get()
    assert (got == ((3 + idx) % 256).astype(np.uint8)).all(), got
    del x, out


def test_reduce_sums_are_accurate(rt):
    """A float32 sum of 2**24 terms stays close to the float64 sum (pairwise-ish)."""
    x = (RNG.random(1 << 24) + 0.5).astype(np.float32)
    k = red((1 << 24,), 0, dt.f32, "sum")
    (got,) = compare_with_interpreter(rt, k, [x], [], "long sum")
    exact = x.astype(np.float64).sum()
    assert abs(float(got[0]) - exact) < 1e-5 * exact
    assert math.isfinite(float(got[0]))
