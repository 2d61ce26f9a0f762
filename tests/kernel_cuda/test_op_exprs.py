"""Every elementwise registry op's expression as CUDA C: rendered always, compiled by NVRTC
where it is installed, and run on the GPU where there is one -- the same bits as the IR
interpreter (as the C kernels must give), through a grid of special values, scalar Args on
either side and casts to every dtype."""
from __future__ import annotations

import concurrent.futures
import os

import numpy as np
import pytest

import ember  # noqa: F401  (registers the ops)
from ember import dtype as dt
from ember.kernel import ir
from ember.kernel.cuda.render import render
from ember.ops.registry import OPS
from tests.kernel.test_op_exprs import (BINARY, UNARY, ZERO_SIGN_FREE, arg_value, infer,
                                        supported, values)
from tests.kernel_cuda._util import (assert_same, compile_only, gpu_or_skip, nvrtc_or_skip,
                                     run_gpu)
from ember.kernel.interpret import evaluate


def op_kernels(d: dt.DType) -> list:
    """``(label, kernel, inputs, [args per run], output names)`` of dtype ``d``: every unary
    op in one kernel, every binary op on the value grid, every binary op with an Arg on
    either side, and casts to every dtype."""
    x = values(d)
    cdt = ir.compute_dtype(d)
    un = [n for n in UNARY if supported(OPS[n], d, 1)]
    bi = [n for n in BINARY if supported(OPS[n], d, 2)]
    z1, z2 = [np.zeros(1, d.np)], [np.zeros(1, d.np)] * 2
    out = []
    if un:
        k = ir.Elementwise(x.shape, (ir.BufferView(d, (1,)),),
                           tuple(OPS[n].expr(ir.Load(0, d)) for n in un),
                           tuple(infer(OPS[n], z1, {})[1] for n in un))
        out.append(("unary", k, [x], [[]], un))
    if bi:
        n_ = len(x)
        k = ir.Elementwise((n_, n_), (ir.BufferView(d, (1, 0)), ir.BufferView(d, (0, 1))),
                           tuple(OPS[n].expr(ir.Load(0, d), ir.Load(1, d)) for n in bi),
                           tuple(infer(OPS[n], z2, {})[1] for n in bi))
        out.append(("grid", k, [x, x], [[]], bi))
        k = ir.Elementwise(x.shape, (ir.BufferView(d, (1,)),),
                           tuple(OPS[n].expr(ir.Load(0, d), ir.Arg(0, cdt)) for n in bi)
                           + tuple(OPS[n].expr(ir.Arg(0, cdt), ir.Load(0, d)) for n in bi),
                           tuple(infer(OPS[n], z2, {})[1] for n in bi) * 2, (cdt,))
        runs = [[arg_value(s, d)] for s in x[:: max(1, len(x) // 6)].tolist()]
        out.append(("arg", k, [x], runs, bi * 2))
    xc = x
    if d.is_float:
        xf = x.astype(np.float64)
        xc = x[~(np.isfinite(xf) & (np.abs(xf) >= 2.0 ** 63))]
    k = ir.Elementwise(xc.shape, (ir.BufferView(d, (1,)),),
                       tuple(OPS["cast"].expr(ir.Load(0, d), dtype=t) for t in dt.ALL), dt.ALL)
    out.append(("casts", k, [xc], [[]], ["cast"] * len(dt.ALL)))
    return out


@pytest.mark.parametrize("d", dt.ALL, ids=lambda d: d.short)
def test_op_exprs_render(d):
    """Without NVRTC or a GPU: every op's expression renders to a CUDA kernel."""
    for label, k, _, _, _ in op_kernels(d):
        rd = render(k)
        assert 'extern "C" __global__' in rd.source and "ember_kernel" in rd.source, label
        assert rd.launches and rd.launches[0].name == "ember_kernel"


@pytest.mark.parametrize("d", dt.ALL, ids=lambda d: d.short)
def test_op_exprs_compile(d, tmp_path_factory):
    """Where the NVRTC wheel is installed: they compile (for sm_90, no GPU needed)."""
    comp = nvrtc_or_skip(tmp_path_factory.getbasetemp() / "cuda-cache")
    kernels = [k for _, k, _, _, _ in op_kernels(d)]
    # (one compiler builds different sources at once: NVRTC runs outside the GIL)
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(lambda k: compile_only(comp, k), kernels))


@pytest.mark.parametrize("d", dt.ALL, ids=lambda d: d.short)
def test_op_exprs_gpu_match_interpreter(d, tmp_path_factory):
    """On a GPU: the same bits as the interpreter (zero signs free only where NumPy's own
    are: maximum, minimum, clamp, relu)."""
    rt = gpu_or_skip(tmp_path_factory.getbasetemp() / "cuda-cache")
    with np.errstate(all="ignore"):
        for label, k, inputs, runs, names in op_kernels(d):
            for args in runs:
                got = run_gpu(rt, k, inputs, args)
                want = evaluate(k, inputs, args)
                for n, g, w in zip(names, got, want, strict=True):
                    assert_same(g, w, f"{n} {d.short} {label} {args}",
                                zero_sign_free=n in ZERO_SIGN_FREE)
