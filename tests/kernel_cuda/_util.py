"""Shared helpers of the CUDA kernel tests: what is available (NVRTC to compile, a GPU to
run), compile-only checks, running a kernel on the GPU and comparing it with the IR
interpreter (`ember.kernel.interpret`), and recording the kernels fusion plans emit."""
from __future__ import annotations

import ctypes
import dataclasses

import ml_dtypes
import numpy as np
import pytest

from ember import dtype as dt
from ember.kernel import ir
from ember.kernel.cuda.compiler import CudaCompiler, default_arch
from ember.kernel.cuda.device import cupy_or_reason
from ember.kernel.cuda.render import Options, render
from ember.kernel.interpret import evaluate

BF16 = np.dtype(ml_dtypes.bfloat16)


#: C that lets CUDA device helpers compile as plain C on the CPU (their headers and the two
#: bit casts CUDA provides)
C_PRELUDE = r"""
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
static inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t __float_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
"""


def nvrtc_or_skip(cache_root) -> CudaCompiler:
    c = CudaCompiler(cache_root=cache_root)
    if not c.available:
        pytest.skip(f"NVRTC unavailable (compile-only checks skipped): {c.reason}")
    return c


def gpu_or_skip(cache_root, autotune=False):
    """A CudaKernelRuntime on the GPU, or a skip naming why there is none."""
    cp, why = cupy_or_reason()
    if cp is None:
        pytest.skip(f"no CUDA GPU: {why}")
    from ember.kernel.cuda.runtime import CudaKernelRuntime
    rt = CudaKernelRuntime(cache_root=cache_root, autotune=autotune)
    if not rt.available():
        pytest.skip(f"CUDA kernels unavailable: {rt.why_unavailable()}")
    return rt


def compile_only(compiler: CudaCompiler, kernel, options: Options = Options()):
    """Render ``kernel`` and compile it for the default architecture (sm_90)."""
    rd = render(kernel, options)
    c = compiler.build(rd.source, default_arch())
    assert c.binary, "empty binary"
    return rd


# -- host <-> device ------------------------------------------------------------------------
def to_gpu(a: np.ndarray):
    cp, _ = cupy_or_reason()
    a = np.ascontiguousarray(a)
    if a.dtype == BF16:
        return cp.asarray(a.view(np.uint16))
    return cp.asarray(a)


def to_host(a, want: np.dtype) -> np.ndarray:
    h = a.get()
    if want == BF16 and h.dtype == np.uint16:
        h = h.view(BF16)
    return h


def run_gpu(rt, kernel, inputs, args=(), variant=None):
    prog = rt.compile(kernel, variant)
    outs = rt.launch(prog, [to_gpu(x) for x in inputs], list(args))
    return [to_host(o, d) for o, d in zip(outs, prog.out_dtypes)]


# -- comparisons ----------------------------------------------------------------------------
def _bits(a: np.ndarray) -> np.ndarray:
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def assert_same(got, want, what="", zero_sign_free=False):
    """The same values: ints and bools equal; floats the same bits (any NaN for NaN; with
    ``zero_sign_free``, +0 == -0)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shapes {got.shape} vs {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtypes {got.dtype} vs {want.dtype}"
    if got.dtype.kind == "f" or got.dtype == BF16:
        gn = np.isnan(got.astype(np.float64))
        wn = np.isnan(want.astype(np.float64))
        if zero_sign_free:
            bad = (gn != wn) | (~wn & (got.astype(np.float64) != want.astype(np.float64)))
        else:
            bad = (gn != wn) | (~wn & (_bits(got) != _bits(want)))
    else:
        bad = got != want
    if bad.any():
        idx = tuple(np.argwhere(bad)[0]) if bad.ndim else ()
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.size} differ; first at {idx}: "
                             f"got {got[idx]!r}, want {want[idx]!r}")


def assert_close_sum(got, want, bound, what=""):
    """Float sums: within ``bound`` (an array or scalar of absolute error) of the reference,
    NaN where it is NaN, infinities equal."""
    g, w = np.asarray(got).astype(np.float64), np.asarray(want).astype(np.float64)
    assert g.shape == w.shape, f"{what}: shapes {g.shape} vs {w.shape}"
    gn, wn = np.isnan(g), np.isnan(w)
    fin = np.isfinite(w) & ~gn
    bad = (gn != wn) | (np.isinf(w) & (g != w)) | (fin & ~(np.abs(g - w) <= bound))
    if bad.any():
        idx = tuple(np.argwhere(bad)[0]) if bad.ndim else ()
        b = np.broadcast_to(bound, g.shape)[idx]
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.size} outside the bound; first "
                             f"at {idx}: got {g[idx]!r}, want {w[idx]!r}, bound {b!r}")


def exact_kernel(kernel) -> bool:
    """Whether the GPU must give the interpreter's bits: everything but float sums and
    products (whose association order differs)."""
    if isinstance(kernel, ir.Elementwise):
        return True
    d = ir.compute_dtype(kernel.prologue.dtype)
    return not (d.is_float and kernel.op in ("sum", "prod"))


def sum_bound(kernel, inputs, args):
    """A bound on the rounding error of a float sum/prod kernel: the interpreter run on
    |prologue| (sum) times (terms + 64) eps, through the epilogue's magnitude."""
    d = ir.compute_dtype(kernel.prologue.dtype)
    eps = float(np.finfo(d.np).eps)
    R = max(1, int(kernel.shape[kernel.axis]))
    absk = ir.Reduce(kernel.shape, kernel.axis, kernel.inputs,
                     ir.Unary("abs", kernel.prologue, kernel.prologue.dtype), kernel.op,
                     ir.Acc(d), d, kernel.args, kernel.broadcast)
    (mag,) = reference(absk, inputs, args)
    return mag.astype(np.float64) * (R + 64) * eps


def reference(kernel, inputs, args=()):
    """The interpreter's outputs; a reduce-then-broadcast kernel runs as its two halves
    (as the fusion tests' interpreted runtime runs it)."""
    if isinstance(kernel, ir.Reduce) and kernel.broadcast:
        from ember.backend.fusion.lower import split_broadcast
        red, ew = split_broadcast(kernel)
        (mid,) = evaluate(red, list(inputs), list(args))
        return evaluate(ew, list(inputs) + [mid], list(args))
    return evaluate(kernel, list(inputs), list(args))


def _epilogue_kernel(kernel):
    """The reduction's epilogue as an `Elementwise` over its output shape that reads the
    reduced value as its last input (where it read ``Acc``)."""
    from ember.backend.fusion.lower import subst_acc
    acc_d = kernel.prologue.dtype
    shape = tuple(kernel.shape) if kernel.broadcast else tuple(
        1 if d == kernel.axis else n for d, n in enumerate(kernel.shape))
    rshape = tuple(1 if d == kernel.axis else n for d, n in enumerate(kernel.shape))
    cs = [int(np.prod(rshape[d + 1:])) for d in range(len(rshape))]
    st = tuple(0 if (d == kernel.axis or rshape[d] == 1) else cs[d] for d in range(len(cs)))
    idx = len(kernel.inputs)
    return ir.Elementwise(shape, kernel.inputs + (ir.BufferView(acc_d, st, 0),),
                          (subst_acc(kernel.epilogue, ir.Load(idx, acc_d)),),
                          (kernel.out_dtype,), kernel.args)


def _ulp(x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    if x.dtype == BF16:
        return np.maximum(x.astype(np.float64) * 2.0 ** -7, 2.0 ** -133)
    return np.spacing(x.astype(x.dtype)).astype(np.float64)


def compare_with_interpreter(rt, kernel, inputs, args=(), what="", variant=None,
                             zero_sign_free=False):
    """Run ``kernel`` on the GPU and with the interpreter: the same bits, except for float
    sums and products, whose reduced value may differ within its rounding bound ``B``
    (`sum_bound`): the output must then lie within the epilogue's values at ``acc +- B``
    (plus 2 ulp of the output dtype). Returns the GPU outputs."""
    want = reference(kernel, inputs, args)
    got = run_gpu(rt, kernel, inputs, args, variant)
    # (the interpreter returns 0-d outputs as shape (1,))
    want = [w.reshape(g.shape) if w.size == g.size else w for g, w in zip(got, want)]
    if exact_kernel(kernel):
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{what} output {i}", zero_sign_free)
        return got
    acc_d = kernel.prologue.dtype
    red = ir.Reduce(kernel.shape, kernel.axis, kernel.inputs, kernel.prologue, kernel.op,
                    ir.Acc(acc_d), acc_d, kernel.args)
    (acc,) = evaluate(red, list(inputs), list(args))
    if kernel.op == "sum":
        bound = sum_bound(kernel, inputs, args)
    else:    # products: relative error ~ (terms + 64) eps
        R = max(1, int(kernel.shape[kernel.axis]))
        bound = np.abs(acc.astype(np.float64)) * (R + 64) * float(np.finfo(acc_d.np).eps)
    ek = _epilogue_kernel(kernel)
    lo_hi = []
    for sgn in (-1.0, 1.0):
        shifted = (acc.astype(np.float64) + sgn * bound).astype(acc.dtype)
        (e,) = evaluate(ek, list(inputs) + [shifted], list(args))
        lo_hi.append(e.reshape(got[0].shape).astype(np.float64))
    w = want[0].astype(np.float64)
    tol = np.maximum(np.abs(lo_hi[0] - w), np.abs(lo_hi[1] - w))
    tol = np.where(np.isnan(tol), np.inf, tol) + 2 * _ulp(want[0])
    assert_close_sum(got[0], want[0], tol, what)
    return got


# -- fusion plans ---------------------------------------------------------------------------
def windowed(kernel, inputs, args):
    """``(kernel, inputs, args)`` with each input replaced by a contiguous copy of the memory
    its view reads (the views' offsets shifted to match): a view's strides address its
    array's memory, not the array's own layout, so a plain copy would scramble it."""
    from ember.kernel.launch_signature import input_ranges
    views, arrays = [], []
    for v, x, rng in zip(kernel.inputs, inputs, input_ranges(kernel)):
        x = np.asarray(x)
        if rng is None:
            views.append(v)
            arrays.append(np.zeros(1, x.dtype))
            continue
        lo, hi = rng
        addr = x.__array_interface__["data"][0] + lo * x.itemsize
        buf = (ctypes.c_char * ((hi - lo + 1) * x.itemsize)).from_address(addr)
        arrays.append(np.frombuffer(buf, dtype=x.dtype).copy())
        views.append(ir.BufferView(v.dtype, v.strides, int(v.offset) - lo))
    return dataclasses.replace(kernel, inputs=tuple(views)), arrays, list(args)


class Recorder:
    """A kernel runtime wrapping the IR interpreter that keeps every kernel it launches with
    copies of its inputs and args (the kernels a fusion plan emits)."""

    def __init__(self, inner):
        self.inner = inner
        self.launched: list = []
        self.name = getattr(inner, "name", "interpret")
        self.features = getattr(inner, "features", frozenset())

    def available(self):
        return True

    def compile(self, kernel):
        return self.inner.compile(kernel)

    def launch(self, program, inputs, args=()):
        k = program if isinstance(program, (ir.Elementwise, ir.Reduce)) else \
            getattr(program, "kernel", program)
        self.launched.append(windowed(k, inputs, args))
        return self.inner.launch(program, inputs, args)

    def source(self, program):
        return self.inner.source(program)


def recording_fusion_device():
    """``(device, recorder, restore)``: the interpreted Fusion(NdArray) device of the fusion
    tests with its runtime wrapped by a `Recorder`; ``restore()`` puts it back."""
    from tests.fusion._util import fusion_device
    dev = fusion_device("interpret")
    backend = dev.backend
    orig = backend.runtime
    rec = Recorder(orig)
    backend.runtime = rec
    if hasattr(backend, "plans") and hasattr(backend.plans, "clear"):
        backend.plans.clear()

    def restore():
        backend.runtime = orig
        if hasattr(backend, "plans") and hasattr(backend.plans, "clear"):
            backend.plans.clear()
    return dev, rec, restore
