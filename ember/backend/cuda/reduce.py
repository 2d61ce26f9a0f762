"""Eager reductions (``sum``, ``prod``, ``max``, ``min`` over dims) as ember's own kernels,
launched directly.

A training step of a small model reduces small tensors a few times per step (bias
gradients: a sum over the leading dims; a loss's mean). CuPy's reductions cost tens of µs of
host time each, far more than the work; here a reduction is the kernel runtime's `ir.Reduce`
kernel (the one Fusion(Cuda) would run for it: same IR, same renderer), compiled once per
input layout (shape, strides, dtype) and dims (NVRTC, disk-cached), then launched with
``cuLaunchKernel`` on the calling thread's stream.

Which calls take it: a CuPy input of at most `MAX_WORK` elements whose reduced dims (those
of size > 1) merge into one axis of the input's memory (one dim; or dims that are adjacent
in memory, such as ``N, H, W`` of a channels-last conv output), of any dtype but bf16 (bool
only for ``sum``/``prod``, which count in i64). Accumulation follows the registry: f16 sums
and products in f32, rounded once; ints wrap in their own dtype. Anything else (and large
reductions, which CuPy's tuned reductions serve well) takes the CuPy path.
"""
from __future__ import annotations

import threading

import numpy as np

from ... import dtype as dt
from ...kernel import ir
from ...kernel.strides import element_strides
from ..fusion.lower import collapse, load_expr

__all__ = ["EagerReduce", "reduce_kernel", "OPS", "MAX_WORK", "MAX_PLANS"]

#: the registry reductions this path runs
OPS = frozenset({"sum", "prod", "max", "min"})
#: inputs of more elements take the CuPy path (below the autotuner's threshold, so the
#: default variant is the one the runtime would pick too)
MAX_WORK = 1 << 20
#: layouts remembered before the table starts over
MAX_PLANS = 1024
_HALF = (dt.float16, dt.bfloat16)


def eligible(op) -> bool:
    return op.name in OPS and op.nout == 1


def reduce_kernel(name, shape, strides, xd, dims, od):
    """The `ir.Reduce` of registry reduction ``name`` over ``dims`` of an input of
    ``shape``, element ``strides`` and dtype ``xd``, giving ``od``; None where the path does
    not apply (reduced dims that do not merge into one axis, bf16, bool max/min, nothing to
    reduce). Its output is the kept dims in order, contiguous: the op's result (keepdim or
    not) in C order."""
    if xd is dt.bfloat16 or od is dt.bfloat16 or (xd is dt.bool_ and name in ("max", "min")):
        return None
    red = [d for d in dims if shape[d] != 1]
    if not red:
        return None
    if len(red) > 1:
        # dims adjacent in memory: ordered by stride, each steps over the next one's extent
        red.sort(key=lambda d: strides[d], reverse=True)
        for a, b in zip(red, red[1:]):
            if strides[b] <= 0 or strides[a] != strides[b] * shape[b]:
                return None
    size = 1
    for d in red:
        size *= shape[d]
    kept = [d for d in range(len(shape)) if d not in dims]
    ishape = tuple(shape[d] for d in kept) + (size,)
    istrides = tuple(strides[d] for d in kept) + (strides[red[-1]],)
    cshape, (cstrides,), caxis = collapse(ishape, [istrides], len(kept))
    if name in ("sum", "prod") and (xd in _HALF or xd is dt.bool_):
        acc = dt.float32 if xd in _HALF else dt.int64
    else:
        acc = xd
    acd = ir.compute_dtype(acc)
    pro = ir.cast(load_expr(0, xd), acd)
    epi = ir.cast(ir.Acc(acd), od)
    return ir.Reduce(cshape, caxis, (ir.BufferView(xd, cstrides, 0),), pro, name, epi, od, ())


class _Plan:
    __slots__ = ("program", "calls", "fmt", "scratch", "od", "nbytes")

    def __init__(self, program, calls, fmt, scratch, od, nbytes):
        self.program = program          # (kept alive: its module holds the functions)
        self.calls = calls
        self.fmt = fmt
        self.scratch = scratch
        self.od = od
        self.nbytes = nbytes            # the output's


class EagerReduce:
    """The eager reductions of one Cuda backend (``runtime()``: its kernel runtime or None;
    ``direct``: the `DirectLauncher` it launches with)."""

    def __init__(self, cp, runtime, direct):
        self.cp = cp
        self._runtime = runtime
        self._direct = direct
        self._ndarray = cp.ndarray
        self._u8 = np.dtype(np.uint8)
        self._get_device = cp.cuda.runtime.getDevice
        self._plans: dict = {}
        self._lock = threading.Lock()
        self.launches = 0

    def run(self, op, x, attrs, meta, scope, device: int):
        """The reduction's output (a new CuPy array), or None: this call goes the CuPy way.
        ``scope``: the calling thread's stream scope on ``device``."""
        if type(x) is not self._ndarray:
            return None
        key = (op, x.shape, x.strides, x.dtype, attrs["dims"], device)
        plan = self._plans.get(key, False)
        if plan is False:
            plan = self._build(key, op, x, attrs, meta)
        if plan is None or self._get_device() != device:
            return None
        nd = self._ndarray
        outs = scope.outputs
        out = outs.take(meta[0], plan.od, plan.nbytes) if outs is not None else None
        if out is None:
            out = nd(meta[0], plan.od)
        stream_ptr = scope.stream_ptr
        direct = self._direct
        if plan.scratch:
            scratch = nd((plan.scratch,), self._u8)
            kp = direct.pack(plan.fmt, x.data.ptr, out.data.ptr, scratch.data.ptr)
        else:
            kp = direct.pack(plan.fmt, x.data.ptr, out.data.ptr)
        launch = direct.launch
        for fptr, grid, block in plan.calls:
            launch(fptr, grid, block, stream_ptr, kp)
        self.launches += 1
        return out

    def _build(self, key, op, x, attrs, meta):
        with self._lock:
            plan = self._plans.get(key, False)
            if plan is not False:
                return plan
            plan = None
            if self._get_device() == key[-1]:
                plan = self._plan(op, x, attrs, meta)
            if len(self._plans) >= MAX_PLANS:
                self._plans.clear()
            self._plans[key] = plan
            return plan

    def _plan(self, op, x, attrs, meta):
        if x.size == 0 or x.size > MAX_WORK or 0 in meta[0]:
            return None
        st = element_strides(x)
        if st is None:
            return None
        rt = self._runtime()
        if rt is None:
            return None
        try:
            xd = dt.from_numpy(x.dtype)
            kernel = reduce_kernel(op.name, x.shape, st, xd,
                                   attrs["dims"], meta[1])
            if kernel is None:
                return None
            prog = rt.compile(kernel)
            lp = rt.launch_plan(prog)
        except Exception:  # noqa: BLE001  (a kernel the runtime cannot build: CuPy runs it)
            return None
        if lp is None:
            return None
        calls, fmt, scratch = lp
        n = 1
        for v in meta[0]:
            n *= v
        return _Plan(prog, calls, fmt, scratch, meta[1].np, n * meta[1].np.itemsize)
