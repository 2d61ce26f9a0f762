"""Eager elementwise ops as ember's own kernels, launched directly.

An op with an IR ``expr`` (arithmetic, math, comparisons, ``where``, ``cast`` ...) whose array
inputs are C-contiguous and of the output's shape (or broadcast along leading dims only, as a
bias is: read with a period) -- in C order, or all in the memory order of the first
full-shape input, as a channels-last activation and its bias are -- runs as a `render_flat`
kernel: compiled once
per op, dtypes and attrs (NVRTC, disk-cached), for every size after that, and launched with
``cuLaunchKernel`` (CuPy's binding) on the calling thread's stream, its parameters packed into
a reused buffer, its output an array the thread's stream reuses once dropped
(`memory.Outputs`). The
kernel is the op's IR lowered as Fusion lowers it, so results are those of Fusion(Cuda)'s
kernels and of NdArray.

Why: a CuPy ufunc call costs 13-14 µs of host time on an H100 machine; an allocation (about
3.7 µs) and a direct launch (about 4.5 µs) are what remains here. Small-tensor steps (the
training steps of small models) are host-bound, one such call per op.

Anything else runs the CuPy way: other broadcasting, strided inputs, bf16 (CuPy has no bf16
arithmetic; the backend computes it in f32), an op whose attrs keep changing (a compile per
distinct value would not pay: after `MAX_VARIANTS` attr sets an op stays on CuPy), a user
kernel registered for the op, a thread whose device is not the tensor's, or a kernel that
does not compile. ``EMBER_CUDA_EAGER=0`` turns the path off.
"""
from __future__ import annotations

import math
import os
import threading

import numpy as np

from ... import dtype as dt
from ...kernel import ir
from ...kernel.cuda.launch import MAX_PARAMS, DirectLauncher
from ...kernel.cuda import scalars as scalar_abi
from ...kernel.cuda.render import FLAT_NAME, arg_kinds, render_flat
from ..fusion.lower import load_expr

__all__ = ["EagerKernels", "flat_kernel", "eligible", "enabled", "MAX_VARIANTS", "BLOCK"]

#: distinct attr sets an op may compile kernels for before it stays on the CuPy path
MAX_VARIANTS = 16
#: threads per block of the flat kernels
BLOCK = 256
_CATEGORIES = frozenset({"unary", "binary", "cast", "other"})
_SCALARS = (int, float, bool)
_prod = math.prod


def eligible(op) -> bool:
    """Whether ``op`` can take this path at all (per call, its operands decide)."""
    return op.expr is not None and op.nout == 1 and op.category in _CATEGORIES


def enabled(env=None) -> bool:
    env = os.environ if env is None else env
    return env.get("EMBER_CUDA_EAGER", "1") != "0"


def _attrs_key(attrs) -> tuple | None:
    """A hashable key of an op's attrs (None: some attr is not hashable)."""
    try:
        key = tuple(sorted(attrs.items()))
        hash(key)
    except TypeError:
        return None
    return key


class _Kernel:
    """One compiled flat kernel: the module (kept alive), its function pointer, the
    parameter layout and how scalar operands are passed."""

    __slots__ = ("module", "fptr", "fmt", "scalars", "npd", "itemsize", "cap")

    def __init__(self, module, fptr, fmt, scalars, npd, cap):
        self.module = module
        self.fptr = fptr
        self.fmt = fmt
        self.scalars = scalars       # per scalar operand: its value as the kernel takes it
        self.npd = npd               # the output's NumPy dtype
        self.itemsize = npd.itemsize
        self.cap = cap               # blocks that fill the device once (grid-stride loops)


class EagerKernels:
    """The eager path of one Cuda backend (``runtime()``: its kernel runtime or None)."""

    def __init__(self, cp, runtime):
        self.cp = cp
        self._runtime = runtime
        self._ndarray = cp.ndarray
        self._get_device = cp.cuda.runtime.getDevice
        self._direct = DirectLauncher()
        self._pack = self._direct.pack
        self._launch = self._direct.raw_launch
        self._kernels: dict = {}       # key -> _Kernel, or None where it cannot run
        self._variants: dict = {}      # op -> set of attr keys compiled
        self._lock = threading.Lock()
        self.launches = 0

    # -- the op path ----------------------------------------------------------------------
    def run(self, op, prims, attrs, meta, scope, device: int, permuted: bool = False):
        """The op's output (a new CuPy array), or None: this call goes the CuPy way.
        ``scope``: the calling thread's stream scope on ``device`` (its stream, and the
        output arrays it reuses)."""
        shape, od = meta
        ndarray = self._ndarray
        sig = []
        ptrs = []
        scalars = None
        periods = None
        for p in prims:
            if type(p) is ndarray:
                if not p._c_contiguous:
                    return None if permuted else \
                        self._run_permuted(op, prims, attrs, meta, scope, device)
                ps = p.shape
                if ps != shape:
                    if not _repeats(ps, shape):
                        return None if permuted else \
                            self._run_permuted(op, prims, attrs, meta, scope, device)
                    if periods is None:
                        periods = []
                    periods.append(p.size)
                    sig.append((p.dtype, True))
                else:
                    sig.append(p.dtype)
                ptrs.append(p.data.ptr)
            elif type(p) in _SCALARS:
                sig.append(type(p))
                if scalars is None:
                    scalars = []
                scalars.append(p)
            else:
                return None
        if not ptrs or od is dt.bfloat16 or self._get_device() != device:
            return None
        if attrs:
            akey = _attrs_key(attrs)
            if akey is None:
                return None
        else:
            akey = ()
        key = (op, tuple(sig), od, akey, device)
        k = self._kernels.get(key, False)
        if k is False:
            k = self._build(key, op, prims, attrs, od, shape)
        if k is None:
            return None
        n = _prod(shape)
        if n == 0:
            return ndarray(shape, k.npd)
        outs = scope.outputs
        out = outs.take(shape, k.npd, n * k.itemsize) if outs is not None else None
        if out is None:
            out = ndarray(shape, k.npd)
        if scalars is not None:
            scalars = [c(v) for v, c in zip(scalars, k.scalars)]
            if periods is None:
                kp = self._pack(k.fmt, *ptrs, out.data.ptr, *scalars, n)
            else:
                kp = self._pack(k.fmt, *ptrs, out.data.ptr, *scalars, n, *periods)
        elif periods is None:
            kp = self._pack(k.fmt, *ptrs, out.data.ptr, n)
        else:
            kp = self._pack(k.fmt, *ptrs, out.data.ptr, n, *periods)
        grid = (n + BLOCK - 1) // BLOCK
        self._launch(k.fptr, grid if grid < k.cap else k.cap, 1, 1, BLOCK, 1, 1, 0,
                     scope.stream_ptr, kp, 0)
        self.launches += 1
        return out

    def _run_permuted(self, op, prims, attrs, meta, scope, device):
        """The op run in the memory order of its first full-shape operand (a channels-last
        activation and its bias, say), where every operand is C-contiguous in that order;
        the output is that order's array, permuted back (so it keeps the layout)."""
        shape = meta[0]
        nd = len(shape)
        ndarray = self._ndarray
        lead = None
        for p in prims:
            if type(p) is ndarray and p.shape == shape:
                lead = p
                break
        if lead is None or nd < 2:
            return None
        st = lead.strides
        perm = sorted(range(nd), key=lambda d: -st[d])
        if perm == list(range(nd)):
            return None
        moved = []
        for p in prims:
            if type(p) is ndarray:
                if p.ndim < nd:
                    p = p.reshape((1,) * (nd - p.ndim) + p.shape)
                p = p.transpose(perm)
                if not p._c_contiguous:
                    return None
            moved.append(p)
        out = self.run(op, moved, attrs, (tuple(shape[d] for d in perm), meta[1]), scope,
                       device, permuted=True)
        if out is None:
            return None
        inverse = [0] * nd
        for i, d in enumerate(perm):
            inverse[d] = i
        return out.transpose(inverse)

    # -- building ---------------------------------------------------------------------------
    def _build(self, key, op, prims, attrs, od, shape):
        with self._lock:
            k = self._kernels.get(key, False)
            if k is not False:
                return k
            seen = self._variants.setdefault(op, set())
            if key[3] not in seen and len(seen) >= MAX_VARIANTS:
                return None              # not cached: a later attr set may be a known one
            k = self._compile(op, prims, attrs, od, shape)
            seen.add(key[3])
            self._kernels[key] = k
            return k

    def _compile(self, op, prims, attrs, od, meta_shape):
        """The flat kernel of ``op`` on these operands' dtypes (None: it cannot run here)."""
        rt = self._runtime()
        if rt is None:
            return None
        kinds = [dt.from_numpy(p.dtype) if type(p) is self._ndarray else type(p)
                 for p in prims]
        cyclic = tuple(p.shape != meta_shape for p in prims if type(p) is self._ndarray)
        try:
            kernel, convert = flat_kernel(op, kinds, attrs, od)
            if kernel is None:
                return None
            rd = render_flat(kernel, BLOCK, cyclic)
            module, fptr = rt.function(rd.source, FLAT_NAME)
        except Exception:  # noqa: BLE001  (an expr the renderer cannot take: CuPy runs it)
            return None
        fmt = "=" + "Q" * (len(kernel.inputs) + 1) + "".join(
            scalar_abi.FMT[k] for k in arg_kinds(kernel)) + "q" * (1 + sum(cyclic))
        return _Kernel(module, fptr, fmt, convert, od.np,
                       self._direct.grid_cap(self._get_device(), BLOCK))


def flat_kernel(op, kinds, attrs, od):
    """``(ir.Elementwise, converters)``: ``op`` lowered as Fusion lowers it, over operands of
    ``kinds`` (an ember dtype per array, a Python type per scalar), for `render_flat`; the
    converters turn each scalar operand into the value the kernel takes. ``(None, ())``
    where the path does not apply (bf16, too many operands)."""
    dtypes = [k for k in kinds if isinstance(k, dt.DType)]
    if not dtypes or dt.bfloat16 in dtypes or od is dt.bfloat16 or \
            2 * len(kinds) + 2 > MAX_PARAMS:
        return None, ()
    # a scalar operand takes the dtype of the op's tensors (`where`: of its result), as
    # Fusion's lowering does; a f16 op rounds it to f16 first (NumPy's weak scalar)
    sdt = od if op.name == "where" else dtypes[0]
    views, ins, args = [], [], []
    for k in kinds:
        if isinstance(k, dt.DType):
            ins.append(load_expr(len(views), k))
            views.append(ir.BufferView(k, (1,), 0))
        else:
            cd = ir.compute_dtype(sdt)
            ins.append(ir.Arg(len(args), cd))
            args.append(cd)
    e = ir.cast(op.expr(*ins, **attrs), od)
    kernel = ir.Elementwise((1,), tuple(views), (e,), (od,), tuple(args))
    # each scalar as the kernel takes it (`scalars`), a f16 op's rounded to f16 first
    convert = tuple(scalar_abi.CONVERT[k] for k in arg_kinds(kernel))
    if sdt is dt.float16:
        convert = tuple(_half(c) for c in convert)
    return kernel, convert


def _repeats(part: tuple, shape: tuple) -> bool:
    """Whether an operand of shape ``part`` broadcasts to ``shape`` along leading dims only
    (its contiguous elements repeat with period ``prod(part)``: a bias)."""
    k = len(part)
    while k and part[len(part) - k] == 1:
        k -= 1                                     # leading 1s
    return k <= len(shape) and part[len(part) - k:] == shape[len(shape) - k:] and \
        len(part) <= len(shape)


def _half(convert):
    """``convert`` of the scalar rounded to f16 (NumPy's weak scalar next to f16 arrays)."""
    return lambda v: convert(float(np.float16(v)))
