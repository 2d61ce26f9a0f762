"""How the Cuda backend runs each registry op on CuPy arrays.

Every op has one implementation, found once per op (`resolve`):

1. ``CUDA_IMPLS[op.name]``: where a CuPy-specific form is better (matmul on cuBLAS) or the
   reference cannot run on a device (erf's table lookup);
2. an op whose reference is a NumPy ufunc runs the CuPy ufunc of the same name;
3. otherwise the registry's reference, written against an array namespace, runs with
   ``xp`` = the CuPy namespace (``op.numpy(*arrays, xp=cupy, **attrs)``).

bf16: CuPy 14 stores bf16 arrays (through ml_dtypes) but computes with few of them, so an op
given bf16 inputs computes in f32 and rounds once to bf16 -- what the NumPy references (and
ml_dtypes' own bf16 arithmetic) do. Views and matmul (cuBLAS runs bf16) take bf16 as it is
(`BF16_NATIVE`).
"""
from __future__ import annotations

import inspect
import math
import struct
import threading
import types

import ml_dtypes
import numpy as np

from ...kernel.strides import with_element_strides

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)

#: ops that take bf16 arrays as they are (views, and cuBLAS's bf16 matmul); every other op
#: computes bf16 inputs in f32. (CuPy 14 also copies, concatenates, takes and selects bf16
#: natively; adding such data-movement ops here saves two conversions each, once a GPU run
#: of the conformance suite has checked them.)
BF16_NATIVE = frozenset({"reshape", "expand", "permute", "slice", "unfold", "matmul",
                         "adam_update", "adam_update_many"})   # (adam rounds to bf16 per
#                                                                 operation itself)


def namespace(cupy, **overrides):
    """The ``xp`` the references get: CuPy's namespace with ``overrides`` (matmul on cuBLAS
    with the compute type ember chooses), built once."""
    ns = types.ModuleType("ember_cupy", "CuPy as the Cuda backend's op references see it")
    ns.__dict__.update({k: v for k, v in vars(cupy).items() if not k.startswith("__")})
    ns.__dict__.update(overrides)
    ns.__getattr__ = lambda name: getattr(cupy, name)   # what CuPy loads lazily
    return ns


def _erf_impl(cp, xp):
    kernel = cp.ElementwiseKernel("T x", "T y", "y = erf(x)", "ember_erf")

    def erf(x):
        if x.dtype.itemsize < 4:      # f16 (bf16 arrives as f32): through f32, one rounding
            return kernel(x.astype(F32)).astype(x.dtype)
        return kernel(x)
    return erf


def _gelu_impl(cp, xp):
    """gelu and gelu_backward where ember's eager kernels do not run them (no NVRTC): one
    CuPy ElementwiseKernel each, the references' formulas in the input's float type (f16
    through f32, rounded once; bf16 arrives as f32)."""
    from ...ops.activation import INV_SQRT_2PI, SQRT1_2
    cdf = f"(T)0.5 * (erf(x * (T){SQRT1_2!r}) + (T)1)"
    pdf = f"exp((x * x) * (T)-0.5) * (T){INV_SQRT_2PI!r}"
    fwd = cp.ElementwiseKernel("T x", "T y", f"y = (x * (T)0.5) * (erf(x * (T){SQRT1_2!r}) "
                               f"+ (T)1)", "ember_gelu")
    bwd = cp.ElementwiseKernel("T g, T x", "T y", f"y = g * ({cdf} + x * ({pdf}))",
                               "ember_gelu_backward")

    def through_f32(kernel):
        def run(*xs):
            if xs[-1].dtype.itemsize < 4:
                return kernel(*(a.astype(F32) for a in xs)).astype(xs[-1].dtype)
            return kernel(*xs)
        return run
    return through_f32(fwd), through_f32(bwd)


def _matmul_impl(cp, xp):
    return xp.matmul


def contiguous_of(xp):
    """``copy(x)``: a C-contiguous copy where ``x`` needs one -- the backend's `StridedCopy`
    given in its namespace (``xp.ember_contiguous``), else the namespace's own."""
    return getattr(xp, "ember_contiguous", None) or xp.ascontiguousarray


def copies(contiguous, arrays) -> list:
    """C-contiguous copies of ``arrays``: one kernel for those of one layout where
    ``contiguous`` is ember's `StridedCopy` (its ``many``), else one call each."""
    many = getattr(contiguous, "many", None)
    return many(arrays) if many is not None else [contiguous(a) for a in arrays]


def _reshape_impl(cp, xp):
    """reshape: a view where NumPy's rule allows one, else a copy made by
    `copy.StridedCopy` (CuPy's own is several times slower on a strided layout), reshaped."""
    from .copy import reshape_strides
    contiguous = contiguous_of(xp)
    views: dict = {}                   # (layout, new shape) -> whether a view does

    def reshape(x, shape):
        if x._c_contiguous:
            return x.reshape(shape)
        key = (x.shape, x.strides, x.itemsize, shape)
        ok = views.get(key)
        if ok is None:
            if len(views) > 4096:
                views.clear()
            ok = views[key] = reshape_strides(x.shape, x.strides, x.itemsize,
                                              shape) is not None
        return x.reshape(shape) if ok else contiguous(x).reshape(shape)
    return reshape


# -- adam_update: one kernel, three outputs ---------------------------------------------------
# The operations of the registry's reference (ember/ops/optim.py), in its order, each rounded
# to the tensors' dtype (EMBER_RND) as NumPy rounds each ufunc's result: f32/f64 compute in
# their own type, f16 in f32 rounded to f16 after each operation, bf16 (passed as f32) in f32
# rounded to bf16 after each operation. The scalars arrive as f64 values already rounded to
# the type the NumPy ufuncs take them in (`_adam_scalar`), so the casts below are exact.
# Compiled with --fmad=false: a fused multiply-add would round once where NumPy rounds twice.
_ADAM_PREAMBLE = r"""
template <typename T> struct ember_adam_ct { typedef T type; };
template <> struct ember_adam_ct<float16> { typedef float type; };
"""
_ADAM_PLAIN = _ADAM_PREAMBLE + r"""
#define EMBER_RND(x) ((C)(T)(x))
"""
_ADAM_BF16 = _ADAM_PREAMBLE + r"""
__device__ __forceinline__ float ember_bf16_round(float x) {
  unsigned int u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return __uint_as_float((u | 0x00400000u) & 0xffff0000u);   // NaN stays (quiet) NaN
  }
  u += 0x7fffu + ((u >> 16) & 1u);                               // round half to even
  return __uint_as_float(u & 0xffff0000u);
}
#define EMBER_RND(x) ember_bf16_round((float)(x))
"""
ADAM_IN = ("T w, T g, T m, T v, float64 beta1, float64 beta2, float64 k1, float64 k2, "
           "float64 step, float64 eps, float64 decay, float64 l2, int32 first, int32 use_l2, "
           "int32 use_decay")
ADAM_OUT = "T w_out, T m_out, T v_out"
ADAM_OP = r"""
typedef typename ember_adam_ct<T>::type C;
const C wv = (C)w;
C gv = (C)g;
if (use_l2) gv = EMBER_RND(gv + EMBER_RND(wv * (C)l2));
const C gg = EMBER_RND(gv * gv);
C mv, vv;
if (first) {
  mv = EMBER_RND(gv * (C)k1);
  vv = EMBER_RND(gg * (C)k2);
} else {
  mv = EMBER_RND(EMBER_RND((C)m * (C)beta1) + EMBER_RND(gv * (C)k1));
  vv = EMBER_RND(EMBER_RND((C)v * (C)beta2) + EMBER_RND(gg * (C)k2));
}
const C den = EMBER_RND(EMBER_RND(sqrt(vv)) + (C)eps);
const C upd = EMBER_RND(EMBER_RND(mv / den) * (C)step);
const C wd = use_decay ? EMBER_RND(wv * (C)decay) : wv;
w_out = (T)EMBER_RND(wd - upd);
m_out = (T)mv;
v_out = (T)vv;
"""
_F16 = np.dtype(np.float16)


#: taken while a kernel module is loaded for a device and its functions are recorded
_LOAD_LOCK = threading.Lock()


def _adam_scalar(x, scalar_type):
    """``x`` rounded to the type a NumPy ufunc takes a Python float in, for tensors of the
    dtype: the dtype itself (f16, f32, f64); f32 for bf16 (ml_dtypes computes bf16 ufuncs
    with a Python scalar in f32)."""
    return float(scalar_type(float(x)))


_ADAM_RAW = r"""
extern "C" __global__ void __launch_bounds__(256) ember_adam_raw(
    const T *__restrict__ pw, const T *__restrict__ pg, const T *__restrict__ pm,
    const T *__restrict__ pv, T *__restrict__ pw_out, T *__restrict__ pm_out,
    T *__restrict__ pv_out, const double beta1, const double beta2, const double k1,
    const double k2, const double step, const double eps, const double decay, const double l2,
    const int first, const int use_l2, const int use_decay, const long long n) {
  for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n;
       i += (long long)gridDim.x * 256) {
    const T w = pw[i], g = pg[i], m = pm[i], v = pv[i];
    T w_out, m_out, v_out;
    {
""" + ADAM_OP + r"""
    }
    pw_out[i] = w_out;
    pm_out[i] = m_out;
    pv_out[i] = v_out;
  }
}
"""


def adam_raw_source(ctype: str) -> str:
    """The f32 (``float``) or f64 (``double``) adam_update kernel launched directly: the
    ElementwiseKernel's arithmetic (`ADAM_OP`) over contiguous operands, without CuPy's
    per-call processing of fifteen arguments."""
    # (CuPy's headers define float16; here the specialization only needs the name)
    return f"struct float16;\ntypedef {ctype} T;\n" + _ADAM_PLAIN + _ADAM_RAW


def _direct_function(cache: dict, key, source_of, arg, name):
    """``(module, function pointer)`` of kernel ``name`` in ``source_of(arg)``, compiled by
    ember's NVRTC runtime and loaded once per ``key`` (a device among its parts) into
    ``cache``; None where it cannot be built (no NVRTC, a failed compile: the caller's other
    path runs). The module is kept with the pointer, so the function stays loaded."""
    f = cache.get(key, False)
    if f is False:
        with _LOAD_LOCK:
            f = cache.get(key, False)
            if f is False:
                try:
                    from ...kernel.cuda.runtime import default_runtime
                    rt = default_runtime()
                    f = rt.function(source_of(arg), name) if rt.available() else None
                except Exception:  # noqa: BLE001  (no NVRTC, a failed compile)
                    f = None
                cache[key] = f
    return f


#: parameters one ember_adam_many launch takes (its table is a kernel parameter: < 4 KiB)
ADAM_MANY_SLOTS = 32
#: blocks of 256 threads a parameter gets at most in one launch (more loop)
ADAM_MANY_BLOCKS = 2048

_ADAM_MANY = r"""
#define EMBER_SLOTS """ + str(ADAM_MANY_SLOTS) + r"""
struct EmberAdamMany {
  const T *w[EMBER_SLOTS], *g[EMBER_SLOTS], *m[EMBER_SLOTS], *v[EMBER_SLOTS];
  T *w_out[EMBER_SLOTS], *m_out[EMBER_SLOTS], *v_out[EMBER_SLOTS];
  long long n[EMBER_SLOTS];
  long long first_block[EMBER_SLOTS + 1];
  int count;
};
// a block's parameter: the last slot whose first block is at most blockIdx.x
extern "C" __global__ void __launch_bounds__(256) ember_adam_many(
    const EmberAdamMany a, const double beta1, const double beta2, const double k1,
    const double k2, const double step, const double eps, const double decay, const double l2,
    const int first, const int use_l2, const int use_decay) {
  int s = 0;
  while (s + 1 < a.count && a.first_block[s + 1] <= (long long)blockIdx.x) ++s;
  const long long n = a.n[s];
  const long long blocks = a.first_block[s + 1] - a.first_block[s];
  const T *__restrict__ pw = a.w[s], *__restrict__ pg = a.g[s];
  const T *__restrict__ pm = a.m[s], *__restrict__ pv = a.v[s];
  T *__restrict__ pw_out = a.w_out[s], *__restrict__ pm_out = a.m_out[s];
  T *__restrict__ pv_out = a.v_out[s];
  for (long long i = ((long long)blockIdx.x - a.first_block[s]) * 256 + threadIdx.x; i < n;
       i += blocks * 256) {
    const T w = pw[i], g = pg[i], m = pm[i], v = pv[i];
    T w_out, m_out, v_out;
    {
""" + ADAM_OP + r"""
    }
    pw_out[i] = w_out;
    pm_out[i] = m_out;
    pv_out[i] = v_out;
  }
}
"""
#: the table's layout: 7 pointer arrays, the sizes, the first blocks, the count (+ padding)
_MANY_TABLE = struct.Struct("=" + "Q" * (7 * ADAM_MANY_SLOTS) + "q" * ADAM_MANY_SLOTS +
                            "q" * (ADAM_MANY_SLOTS + 1) + "i4x")
_MANY_SCALARS = struct.Struct("=8d" + "i4x" * 3)


def adam_many_source(ctype: str) -> str:
    """``ember_adam_many``: `_ADAM_RAW`'s update for up to `ADAM_MANY_SLOTS` parameters of
    one dtype in one launch, their pointers and sizes in a table passed by value."""
    return f"struct float16;\ntypedef {ctype} T;\n" + _ADAM_PLAIN + _ADAM_MANY


def adam_many_blocks(sizes, slots: int = ADAM_MANY_SLOTS) -> list:
    """The table's first blocks for parameters of ``sizes`` elements: parameter j's blocks
    are ``first[j]`` to ``first[j + 1]`` (256 threads each, at most `ADAM_MANY_BLOCKS`),
    padded to ``slots + 1`` entries; ``first[-1]`` is the grid."""
    first, total = [], 0
    for n in sizes:
        first.append(total)
        total += min(-(-n // 256), ADAM_MANY_BLOCKS) if n else 0
    return first + [total] * (slots + 1 - len(first))


class _AdamDirect:
    """adam_update on contiguous f32/f64 operands of one shape through ``cuLaunchKernel``
    (None from `__call__`: another path runs)."""

    def __init__(self, cp):
        from ...kernel.cuda.launch import DirectLauncher
        self.cp = cp
        self._direct = DirectLauncher()
        self._fns = {}
        self._last = (None, None)

    def _fn(self, ctype, dev):
        return _direct_function(self._fns, (ctype, dev), adam_raw_source, ctype,
                                "ember_adam_raw")

    def __call__(self, w, g, m, v, scalars, flags, stream=None, outputs=None):
        """The three outputs, or None (another path runs). ``stream``: the handle to launch
        on (default: CuPy's current stream); ``outputs``: the `memory.Outputs` the output
        arrays may come from."""
        ctype = _CTYPES.get(w.dtype.char)
        if ctype is None:
            return None
        shape, dtype = w.shape, w.dtype
        for a in (w, g, m, v):
            if a.shape != shape or a.dtype != dtype or not a._c_contiguous:
                return None
        dev = self.cp.cuda.runtime.getDevice()
        f = self._fn(ctype, dev)
        if f is None:
            return None
        nd = self.cp.ndarray
        n = w.size
        if outputs is not None and n:
            nb = n * dtype.itemsize
            outs = []
            for _ in range(3):
                o = outputs.take(shape, dtype, nb)
                outs.append(nd(shape, dtype) if o is None else o)
            outs = tuple(outs)
        else:
            outs = (nd(shape, dtype), nd(shape, dtype), nd(shape, dtype))
        if n == 0:
            return outs
        direct = self._direct
        kp = direct.pack("=7Q8d4q", w.data.ptr, g.data.ptr, m.data.ptr, v.data.ptr,
                         *[o.data.ptr for o in outs], *scalars, *flags, n)
        direct.launch(f[1], min((n + 255) // 256, direct.grid_cap(dev, 256)), 256,
                      self.cp.cuda.get_current_stream().ptr if stream is None else stream,
                      kp)
        return outs

    def args(self, st, beta1, beta2, k1, k2, step, eps, decay, l2, first):
        """(scalars, flags) of the kernel for tensors of scalar type ``st``; the last
        call's are kept (a step updates every parameter with the same values)."""
        key = (st, beta1, beta2, k1, k2, step, eps, decay, l2, first)
        last = self._last
        if last[0] == key:
            return last[1]
        l2, decay = float(l2), float(decay)
        res = ([_adam_scalar(x, st) for x in (beta1, beta2, k1, k2, step, eps, decay, l2)],
               (int(bool(first)), int(l2 != 0.0), int(decay != 1.0)))
        self._last = (key, res)
        return res

    def run(self, prims, attrs, meta, scope, device):
        """The Cuda backend's direct path (no stream switch; outputs reused per stream):
        the outputs, or None (the op's implementation runs)."""
        w = prims[0]
        if type(w) is not self.cp.ndarray or w.dtype.char not in _CTYPES:
            return None
        scalars, flags = self.args(w.dtype.type, **attrs)
        return self(*prims, scalars, flags, scope.stream_ptr, scope.outputs)


_CTYPES = {"f": "float", "d": "double"}


def _adam_impl(cp, xp):
    kernels = {}
    try:
        direct = _AdamDirect(cp)
    except ImportError:                    # a CuPy without the driver binding
        direct = None

    def kernel(bf16):
        k = kernels.get(bf16)
        if k is None:
            k = kernels[bf16] = cp.ElementwiseKernel(
                ADAM_IN, ADAM_OUT, ADAM_OP,
                "ember_adam_update_bf16" if bf16 else "ember_adam_update",
                preamble=_ADAM_BF16 if bf16 else _ADAM_PLAIN, options=("--fmad=false",))
        return k

    def adam_update(w, g, m, v, *, beta1, beta2, k1, k2, step, eps, decay, l2, first):
        bf16 = w.dtype == BF16
        if bf16:   # computed in f32, rounded to bf16 per operation; outputs cast back
            w, g, m, v = (a.astype(F32) for a in (w, g, m, v))
        st = np.float32 if bf16 else w.dtype.type
        if direct is not None:
            scalars, flags = direct.args(st, beta1, beta2, k1, k2, step, eps, decay, l2, first)
        else:
            l2, decay = float(l2), float(decay)
            scalars = [_adam_scalar(x, st) for x in (beta1, beta2, k1, k2, step, eps, decay,
                                                       l2)]
            flags = (int(bool(first)), int(l2 != 0.0), int(decay != 1.0))
        if direct is not None and not bf16:
            outs = direct(w, g, m, v, scalars, flags)
            if outs is not None:
                return outs
        outs = kernel(bf16)(w, g, m, v, *scalars, *flags)
        if bf16:
            return tuple(o.astype(BF16) for o in outs)
        return outs
    return adam_update


def _adam_many_impl(cp, xp):
    """``adam_update_many``: `_adam_impl`'s update per parameter (the direct path below
    launches them without the op path between)."""
    from ...ops.optim import adam_many_split
    one = []

    def adam_update_many(*xs, **attrs):
        if not one:
            one.append(_adam_impl(cp, xp))
        out = []
        for quad in adam_many_split(xs):
            out += one[0](*quad, **attrs)
        return tuple(out)
    return adam_update_many


class _AdamManyDirect:
    """adam_update_many on the thread's stream: `ADAM_MANY_SLOTS` parameters a launch of
    ``ember_adam_many`` (their outputs from the stream's reused arrays), where every
    parameter is contiguous f32 or f64 of one dtype; one `_AdamDirect` launch per parameter
    where that kernel cannot be built; else None (the op's implementation runs)."""

    def __init__(self, cp, contiguous=None):
        import ctypes

        from ...ops.optim import adam_many_split
        self.cp = cp
        #: copies of strided gradients (the backend's `StridedCopy`: one kernel a layout)
        self._contiguous = contiguous or cp.ascontiguousarray
        self._split = adam_many_split
        self._one = _AdamDirect(cp)
        self._fns = {}
        self._tls = threading.local()
        self._ctypes = ctypes

    def _fn(self, ctype, dev):
        return _direct_function(self._fns, (ctype, dev), adam_many_source, ctype,
                                "ember_adam_many")

    def _params(self):
        """This thread's launch buffers: the table, the scalars, the parameter pointers."""
        p = getattr(self._tls, "params", None)
        if p is None:
            ct = self._ctypes
            table = ct.create_string_buffer(_MANY_TABLE.size)
            scalars = ct.create_string_buffer(_MANY_SCALARS.size)
            base = ct.addressof(scalars)
            ptrs = (ct.c_void_p * 12)(ct.addressof(table), *[base + 8 * i for i in range(11)])
            p = self._tls.params = (table, scalars, ct.addressof(ptrs), ptrs)
        return p

    def _launch_many(self, f, quads, outs, st_scalars, flags, stream):
        table, scalars, params, _ = self._params()
        _MANY_SCALARS.pack_into(scalars, 0, *st_scalars, *flags)
        slots = ADAM_MANY_SLOTS
        one = self._one._direct
        for lo in range(0, len(quads), slots):
            part = quads[lo:lo + slots]
            k = len(part)
            cols = [[0] * slots for _ in range(7)]
            sizes = [0] * slots
            for j, (w, g, m, v) in enumerate(part):
                for c, a in enumerate((w, g, m, v, *outs[lo + j])):
                    cols[c][j] = a.data.ptr
                sizes[j] = w.size
            first = adam_many_blocks(sizes[:k], slots)
            total = first[-1]
            if not total:
                continue
            _MANY_TABLE.pack_into(table, 0, *[p for col in cols for p in col], *sizes,
                                  *first, k)
            one.raw_launch(f[1], total, 1, 1, 256, 1, 1, 0, stream, params, 0)

    def run(self, prims, attrs, meta, scope, device):
        nd = self.cp.ndarray
        quads = self._split(prims)
        st = None
        strided = []        # gradients that are views (a packed q/k/v weight's column block)
        for i, (w, g, m, v) in enumerate(quads):
            if type(w) is not nd or w.dtype.char not in _CTYPES:
                return None
            if st is None:
                st = w.dtype.type
            elif w.dtype.type is not st:
                return None
            shape = w.shape
            for a in (g, m, v):
                if type(a) is not nd or a.dtype.type is not st or a.shape != shape:
                    return None
            if not (w._c_contiguous and m._c_contiguous and v._c_contiguous):
                return None
            if not g._c_contiguous:
                strided.append(i)
        if strided:                    # copied on the op's stream, then read as any other
            quads = list(quads)
            with scope:
                done = copies(self._contiguous, [quads[i][1] for i in strided])
            for i, g in zip(strided, done):
                w, _, m, v = quads[i]
                quads[i] = (w, g, m, v)
        one = self._one
        scalars, flags = one.args(st, **attrs)
        stream, outputs = scope.stream_ptr, scope.outputs
        f = self._fn(_CTYPES[np.dtype(st).char], device)
        if f is None:
            out = []
            for w, g, m, v in quads:
                res = one(w, g, m, v, scalars, flags, stream, outputs)
                if res is None:            # (no NVRTC: the implementation runs them all)
                    return None
                out += res
            return tuple(out)
        nd_ = self.cp.ndarray
        outs = []
        for w, _, _, _ in quads:
            shape, dtype = w.shape, w.dtype
            nb = w.size * dtype.itemsize
            trio = []
            for _ in range(3):
                o = outputs.take(shape, dtype, nb) if outputs is not None and nb else None
                trio.append(nd_(shape, dtype) if o is None else o)
            outs.append(tuple(trio))
        self._launch_many(f, quads, outs, scalars, flags, stream)
        return tuple(a for trio in outs for a in trio)


# -- raw kernels: cross entropy rows, max pooling -------------------------------------------
# One launch each where the NumPy-style references take a dozen CuPy calls (each ~13 us of
# host time). Sources are module-level strings (compiled by ember's NVRTC runtime on first use
# and launched directly, `_Kernels`; tests/backend_cuda compiles them without a GPU). f16 arrives as its bits
# (unsigned short) and is computed in f32; bf16 arrives as f32 (`Cuda._runner` upcasts it:
# these ops are not in BF16_NATIVE); f64 is computed in f64. Sizes and strides are 64-bit.
_KERNEL_HELPERS = r"""
typedef long long ember_i64;

template <typename T> struct ember_ct { typedef float type; };
template <> struct ember_ct<double> { typedef double type; };

// f16 as bits <-> f32 (PTX conversions: no header needed)
__device__ __forceinline__ float ember_f(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ float ember_f(float v) { return v; }
__device__ __forceinline__ double ember_f(double v) { return v; }
__device__ __forceinline__ void ember_st(unsigned short* p, float v) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
  *p = h;
}
__device__ __forceinline__ void ember_st(float* p, float v) { *p = v; }
__device__ __forceinline__ void ember_st(double* p, double v) { *p = v; }

__device__ __forceinline__ float ember_exp(float v) { return expf(v); }
__device__ __forceinline__ double ember_exp(double v) { return exp(v); }
__device__ __forceinline__ float ember_log(float v) { return logf(v); }
__device__ __forceinline__ double ember_log(double v) { return log(v); }

template <typename F> __device__ __forceinline__ F ember_neg_inf();
template <> __device__ __forceinline__ float ember_neg_inf<float>() {
  return __uint_as_float(0xff800000u);
}
template <> __device__ __forceinline__ double ember_neg_inf<double>() {
  return __longlong_as_double((long long)0xfff0000000000000ull);
}
// -inf in the storage type
__device__ __forceinline__ void ember_neg_inf_raw(unsigned short* r) { *r = 0xfc00u; }
__device__ __forceinline__ void ember_neg_inf_raw(float* r) { *r = ember_neg_inf<float>(); }
__device__ __forceinline__ void ember_neg_inf_raw(double* r) { *r = ember_neg_inf<double>(); }

// the max propagating NaN (as NumPy's and CuPy's max)
template <typename F> __device__ __forceinline__ F ember_nanmax(F a, F b) {
  return (b > a || b != b) ? b : a;
}

// sums over a warp (every lane gets the same bits) and over a block (through ``sh``, one
// double per warp)
template <typename F> __device__ __forceinline__ F ember_warp_sum(F v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;   // (the butterfly gives every lane the same bits)
}
template <typename F> __device__ __forceinline__ F ember_block_sum(F v, double* sh) {
  v = ember_warp_sum(v);
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = (double)v;
  __syncthreads();
  F r = (F)sh[0];
  for (int i = 1, nw = (int)(blockDim.x >> 5); i < nw; ++i) r += (F)sh[i];
  __syncthreads();
  return r;
}
"""

CE_SOURCE = _KERNEL_HELPERS + r"""
// Each row of logits x [M, C] (strides sxr, sxc in elements) is reduced by a group of G
// threads: one warp (BLOCK false: blockDim.x / 32 rows per block) or the whole block (BLOCK
// true: one row per block). The steps are the reference's (`_ce_rows` in ember/ops/nn.py):
// m = max of the row, replaced by 0 when not finite; lse = log(sum(exp(x - m))) + m.
template <typename F> __device__ __forceinline__ F ember_warp_max(F v) {
  for (int o = 16; o > 0; o >>= 1) v = ember_nanmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <typename F> __device__ __forceinline__ F ember_block_max(F v, double* sh) {
  v = ember_warp_max(v);
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = (double)v;
  __syncthreads();
  F r = (F)sh[0];
  for (int i = 1, nw = (int)(blockDim.x >> 5); i < nw; ++i) r = ember_nanmax(r, (F)sh[i]);
  __syncthreads();
  return r;
}

template <typename T, bool BLOCK>
__device__ __forceinline__ typename ember_ct<T>::type ember_row_lse(
    const T* xr, ember_i64 C, ember_i64 sxc, ember_i64 lane, ember_i64 G, double* sh) {
  typedef typename ember_ct<T>::type F;
  F m = ember_neg_inf<F>();
  for (ember_i64 j = lane; j < C; j += G) m = ember_nanmax(m, (F)ember_f(xr[j * sxc]));
  m = BLOCK ? ember_block_max(m, sh) : ember_warp_max(m);
  if (!(m - m == (F)0)) m = (F)0;          // rows of -inf / inf / NaN: no inf - inf
  F s = (F)0;
  for (ember_i64 j = lane; j < C; j += G) s += ember_exp((F)ember_f(xr[j * sxc]) - m);
  s = BLOCK ? ember_block_sum(s, sh) : ember_warp_sum(s);
  return ember_log(s) + m;
}

// The same with the group's share of the row held in registers, ``v[i]`` the value at
// ``j = lane + i * G`` (-inf past the row): one read of the row where the loops above read
// it twice, the loads all issued before the first is used (202 -> 142 us on [8192, 8192]
// f32 logits on an H200). The same operations in the same order as `ember_row_lse`: the
// same bits. For rows of at most ``K * G`` classes (`ember_ce_cached`; the launch sizes G
// to that up to 16 * 1024).
template <typename F> struct ember_ce_k { enum { value = 16 }; };
template <> struct ember_ce_k<double> { enum { value = 8 }; };

template <typename T, bool BLOCK>
__device__ __forceinline__ typename ember_ct<T>::type ember_row_lse_cached(
    const T* xr, ember_i64 C, ember_i64 sxc, ember_i64 lane, ember_i64 G, double* sh) {
  typedef typename ember_ct<T>::type F;
  enum { K = ember_ce_k<F>::value };
  F v[K];
#pragma unroll
  for (int i = 0; i < K; ++i) {
    const ember_i64 j = lane + (ember_i64)i * G;
    v[i] = j < C ? (F)ember_f(xr[j * sxc]) : ember_neg_inf<F>();
  }
  F m = ember_neg_inf<F>();
#pragma unroll
  for (int i = 0; i < K; ++i) m = ember_nanmax(m, v[i]);
  m = BLOCK ? ember_block_max(m, sh) : ember_warp_max(m);
  if (!(m - m == (F)0)) m = (F)0;
  F s = (F)0;
#pragma unroll
  for (int i = 0; i < K; ++i)
    if (lane + (ember_i64)i * G < C) s += ember_exp(v[i] - m);
  s = BLOCK ? ember_block_sum(s, sh) : ember_warp_sum(s);
  return ember_log(s) + m;
}

template <typename F>
__device__ __forceinline__ bool ember_ce_cached(ember_i64 C, ember_i64 G) {
  return C <= (ember_i64)ember_ce_k<F>::value * G;
}

// the class of a row: targets wrap around C as CuPy's integer-array indexing does
__device__ __forceinline__ ember_i64 ember_wrap(ember_i64 t, ember_i64 C) {
  ember_i64 k = t % C;
  return k < 0 ? k + C : k;
}

#define EMBER_ROWS(BLOCK)                                                         \
  ember_i64 lane, G, r, step;                                                     \
  if (BLOCK) {                                                                    \
    lane = threadIdx.x; G = blockDim.x; r = blockIdx.x; step = gridDim.x;         \
  } else {                                                                        \
    const ember_i64 rows = blockDim.x >> 5;                                       \
    lane = threadIdx.x & 31; G = 32;                                              \
    r = (ember_i64)blockIdx.x * rows + (threadIdx.x >> 5);                        \
    step = (ember_i64)gridDim.x * rows;                                           \
  }

template <typename T, typename I, bool BLOCK>
__device__ __forceinline__ void ember_ce_fwd(
    const T* __restrict__ x, const I* __restrict__ t, T* __restrict__ loss,
    T* __restrict__ valid, ember_i64 M, ember_i64 C, ember_i64 sxr, ember_i64 sxc,
    ember_i64 st, ember_i64 ignore) {
  typedef typename ember_ct<T>::type F;
  __shared__ double sh[32];
  EMBER_ROWS(BLOCK)
  for (; r < M; r += step) {                 // (uniform over each warp / block)
    const T* xr = x + r * sxr;
    const F lse = ember_ce_cached<F>(C, G) ?
        ember_row_lse_cached<T, BLOCK>(xr, C, sxc, lane, G, sh) :
        ember_row_lse<T, BLOCK>(xr, C, sxc, lane, G, sh);
    if (lane == 0) {
      const ember_i64 tv = (ember_i64)t[r * st];
      const bool ok = tv != ignore;
      F out = (F)0;
      if (ok) out = lse - (F)ember_f(xr[ember_wrap(tv, C) * sxc]);
      ember_st(loss + r, out);
      ember_st(valid + r, ok ? (F)1 : (F)0);
    }
  }
}

template <typename T, typename I, bool BLOCK>
__device__ __forceinline__ void ember_ce_bwd(
    const T* __restrict__ g, const T* __restrict__ x, const I* __restrict__ t,
    T* __restrict__ out, ember_i64 M, ember_i64 C, ember_i64 sg, ember_i64 sxr,
    ember_i64 sxc, ember_i64 st, ember_i64 ignore) {
  typedef typename ember_ct<T>::type F;
  __shared__ double sh[32];
  EMBER_ROWS(BLOCK)
  for (; r < M; r += step) {
    const T* xr = x + r * sxr;
    // (the row is read again below rather than kept in registers as in the forward pass:
    // on an H200 that ran 309 us on [8192, 8192] f32 logits, the registers 343)
    const F lse = ember_row_lse<T, BLOCK>(xr, C, sxc, lane, G, sh);
    const ember_i64 tv = (ember_i64)t[r * st];
    const bool ok = tv != ignore;
    const ember_i64 k = ok ? ember_wrap(tv, C) : 0;      // the reference's `safe`
    const F gr = ok ? (F)ember_f(g[r * sg]) : (F)0;      // (NaN * 0 stays NaN, as there)
    T* orow = out + r * C;
    for (ember_i64 j = lane; j < C; j += G) {
      F p = ember_exp((F)ember_f(xr[j * sxc]) - lse);
      if (j == k) p -= (F)1;
      ember_st(orow + j, p * gr);
    }
  }
}

#define EMBER_CE(TN, T, IN, I)                                                            \
  extern "C" __global__ void __launch_bounds__(256)                                       \
  ember_ce_fwd_##TN##_##IN##_w(                                                           \
      const T* x, const I* t, T* loss, T* valid, ember_i64 M, ember_i64 C,                \
      ember_i64 sxr, ember_i64 sxc, ember_i64 st, ember_i64 ignore) {                     \
    ember_ce_fwd<T, I, false>(x, t, loss, valid, M, C, sxr, sxc, st, ignore);             \
  }                                                                                       \
  extern "C" __global__ void __launch_bounds__(1024)                                      \
  ember_ce_fwd_##TN##_##IN##_b(                                                           \
      const T* x, const I* t, T* loss, T* valid, ember_i64 M, ember_i64 C,                \
      ember_i64 sxr, ember_i64 sxc, ember_i64 st, ember_i64 ignore) {                     \
    ember_ce_fwd<T, I, true>(x, t, loss, valid, M, C, sxr, sxc, st, ignore);              \
  }                                                                                       \
  extern "C" __global__ void __launch_bounds__(256)                                       \
  ember_ce_bwd_##TN##_##IN##_w(                                                           \
      const T* g, const T* x, const I* t, T* out, ember_i64 M, ember_i64 C, ember_i64 sg, \
      ember_i64 sxr, ember_i64 sxc, ember_i64 st, ember_i64 ignore) {                     \
    ember_ce_bwd<T, I, false>(g, x, t, out, M, C, sg, sxr, sxc, st, ignore);              \
  }                                                                                       \
  extern "C" __global__ void __launch_bounds__(1024)                                      \
  ember_ce_bwd_##TN##_##IN##_b(                                                           \
      const T* g, const T* x, const I* t, T* out, ember_i64 M, ember_i64 C, ember_i64 sg, \
      ember_i64 sxr, ember_i64 sxc, ember_i64 st, ember_i64 ignore) {                     \
    ember_ce_bwd<T, I, true>(g, x, t, out, M, C, sg, sxr, sxc, st, ignore);               \
  }

EMBER_CE(f16, unsigned short, i32, int)
EMBER_CE(f16, unsigned short, i64, long long)
EMBER_CE(f32, float, i32, int)
EMBER_CE(f32, float, i64, long long)
EMBER_CE(f64, double, i32, int)
EMBER_CE(f64, double, i64, long long)
"""

MAX_POOL_SOURCE = _KERNEL_HELPERS + r"""
// 2-d max pooling, one thread per output (grid-stride over `total`), PyTorch's scan: the
// window in row-major order, the first strictly larger value wins and so does every NaN
// (the last NaN of a window); positions outside the input never win. A window whose max is
// -inf reports its first in-bounds position (per dim: the first tap at or after 0), as the
// reference (`_max_pool_idx_np`) does. Outputs are written in the order of `cl`: channels
// innermost ([N, OH, OW, C] memory) or [N, C, OH, OW].
template <typename T, bool IDX>
__device__ __forceinline__ void ember_max_pool2d(
    const T* __restrict__ x, T* __restrict__ out, ember_i64* __restrict__ idx,
    ember_i64 total, ember_i64 C, ember_i64 H, ember_i64 W, ember_i64 OH, ember_i64 OW,
    ember_i64 sn, ember_i64 sc, ember_i64 sh, ember_i64 sw, int kh, int kw, int sth,
    int stw, int ph, int pw, int dh, int dw, int cl) {
  typedef typename ember_ct<T>::type F;
  const ember_i64 step = (ember_i64)gridDim.x * blockDim.x;
  for (ember_i64 e = (ember_i64)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += step) {
    ember_i64 n, c, oh, ow, q;
    if (cl) {
      c = e % C; q = e / C; ow = q % OW; q /= OW; oh = q % OH; n = q / OH;
    } else {
      ow = e % OW; q = e / OW; oh = q % OH; q /= OH; c = q % C; n = q / C;
    }
    const T* xp = x + n * sn + c * sc;
    const ember_i64 hs = oh * sth - ph, ws = ow * stw - pw;
    F best = ember_neg_inf<F>();
    T raw;
    ember_neg_inf_raw(&raw);
    ember_i64 at = 0;
    for (int i = 0; i < kh; ++i) {
      const ember_i64 h = hs + (ember_i64)i * dh;
      if (h < 0 || h >= H) continue;
      for (int j = 0; j < kw; ++j) {
        const ember_i64 w = ws + (ember_i64)j * dw;
        if (w < 0 || w >= W) continue;
        const T rv = xp[h * sh + w * sw];
        const F v = (F)ember_f(rv);
        if (v > best || v != v) {
          best = v;
          raw = rv;
          at = h * W + w;
        }
      }
    }
    out[e] = raw;
    if (IDX) {
      if (best == ember_neg_inf<F>()) {    // the window's first in-bounds position
        const ember_i64 fh = hs < 0 ? hs + (-hs + dh - 1) / dh * dh : hs;
        const ember_i64 fw = ws < 0 ? ws + (-ws + dw - 1) / dw * dw : ws;
        at = fh * W + fw;
      }
      idx[e] = at;
    }
  }
}

#define EMBER_POOL(TN, T)                                                                 \
  extern "C" __global__ void __launch_bounds__(256)                                       \
  ember_max_pool2d_##TN(                                                                  \
      const T* x, T* out, ember_i64* idx, ember_i64 total, ember_i64 C, ember_i64 H,      \
      ember_i64 W, ember_i64 OH, ember_i64 OW, ember_i64 sn, ember_i64 sc, ember_i64 sh,  \
      ember_i64 sw, int kh, int kw, int sth, int stw, int ph, int pw, int dh, int dw,     \
      int cl) {                                                                           \
    ember_max_pool2d<T, true>(x, out, idx, total, C, H, W, OH, OW, sn, sc, sh, sw, kh,    \
                              kw, sth, stw, ph, pw, dh, dw, cl);                          \
  }                                                                                       \
  extern "C" __global__ void __launch_bounds__(256)                                       \
  ember_max_pool2d_values_##TN(                                                           \
      const T* x, T* out, ember_i64 total, ember_i64 C, ember_i64 H, ember_i64 W,         \
      ember_i64 OH, ember_i64 OW, ember_i64 sn, ember_i64 sc, ember_i64 sh, ember_i64 sw, \
      int kh, int kw, int sth, int stw, int ph, int pw, int dh, int dw, int cl) {         \
    ember_max_pool2d<T, false>(x, out, (ember_i64*)0, total, C, H, W, OH, OW, sn, sc, sh, \
                               sw, kh, kw, sth, stw, ph, pw, dh, dw, cl);                 \
  }

EMBER_POOL(f16, unsigned short)
EMBER_POOL(f32, float)
EMBER_POOL(f64, double)

// The input gradient of max pooling with disjoint windows: each output gradient g[n, c, oh,
// ow] (any strides) stored at its window's argmax idx (a flat position in the input plane
// of `plane` values; positions outside it are skipped) of `out`, which the host zeroed:
// [N, C, plane] memory, or [N, plane, C] when `cl` (channels innermost, as the indices of a
// channels-last input are). Disjoint windows never share a position: plain stores.
template <typename T>
__device__ __forceinline__ void ember_max_pool_scatter(
    const T* __restrict__ g, const ember_i64* __restrict__ idx, T* __restrict__ out,
    ember_i64 total, ember_i64 C, ember_i64 OH, ember_i64 OW, ember_i64 plane,
    ember_i64 gn, ember_i64 gc, ember_i64 gh, ember_i64 gw, ember_i64 in_, ember_i64 ic,
    ember_i64 ih, ember_i64 iw, int cl) {
  const ember_i64 step = (ember_i64)gridDim.x * blockDim.x;
  for (ember_i64 e = (ember_i64)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += step) {
    const ember_i64 ow = e % OW, t = e / OW;
    const ember_i64 oh = t % OH, u = t / OH;
    const ember_i64 c = u % C, n = u / C;
    const ember_i64 p = idx[n * in_ + c * ic + oh * ih + ow * iw];
    if (p < 0 || p >= plane) continue;
    out[cl ? (n * plane + p) * C + c : (n * C + c) * plane + p] =
        g[n * gn + c * gc + oh * gh + ow * gw];
  }
}

#define EMBER_POOL_BWD(TN, T)                                                             \
  extern "C" __global__ void __launch_bounds__(256)                                       \
  ember_max_pool_scatter_##TN(                                                            \
      const T* g, const ember_i64* idx, T* out, ember_i64 total, ember_i64 C,            \
      ember_i64 OH, ember_i64 OW, ember_i64 plane, ember_i64 gn, ember_i64 gc,            \
      ember_i64 gh, ember_i64 gw, ember_i64 in_, ember_i64 ic, ember_i64 ih,              \
      ember_i64 iw, int cl) {                                                             \
    ember_max_pool_scatter<T>(g, idx, out, total, C, OH, OW, plane, gn, gc, gh, gw, in_,  \
                              ic, ih, iw, cl);                                            \
  }

EMBER_POOL_BWD(f16, unsigned short)
EMBER_POOL_BWD(f32, float)
EMBER_POOL_BWD(f64, double)
"""

#: the kernels' names for each storage dtype (bf16 is computed as f32: see above)
KERNEL_DTYPES = {np.dtype(np.float16): "f16", F32: "f32", np.dtype(np.float64): "f64"}
_INDEX_DTYPES = {np.dtype(np.int32): "i32", np.dtype(np.int64): "i64"}
CE_WARP_MAX_CLASSES = 1024      # rows of at most this many classes: one warp each
_GRID_CAP = 1 << 24             # blocks per launch (the kernels loop over the rest)


def ce_kernel_names():
    """Every entry point of `CE_SOURCE`."""
    return [f"ember_ce_{d}_{t}_{i}_{m}" for d in ("fwd", "bwd")
            for t in KERNEL_DTYPES.values() for i in _INDEX_DTYPES.values() for m in "wb"]


def max_pool_kernel_names():
    """Every entry point of `MAX_POOL_SOURCE`."""
    return [f"ember_max_pool2d_{v}{t}" for t in KERNEL_DTYPES.values()
            for v in ("", "values_")] + \
        [f"ember_max_pool_scatter_{t}" for t in KERNEL_DTYPES.values()]


class _Kernels:
    """The functions of one CUDA source, launched directly: compiled by ember's NVRTC runtime
    (its options and disk cache) and loaded once per device, launched with
    ``cuLaunchKernel`` on CuPy's current stream (the op's: `Cuda.execute` makes it current),
    the parameters packed into a reused buffer -- about half the host cost of a CuPy
    ``RawKernel`` call. Where ember's runtime cannot compile (no NVRTC library of its own) or
    CuPy has no driver binding, the source runs as a ``cupy.RawModule`` as before.

    ``launch(name, grid, block, arrays, i64s, i32s, smem)``: the kernel's parameters are the
    arrays' data pointers, then the 64-bit and the 32-bit integers, in that order; ``smem``
    bytes of dynamic shared memory (above 48 KiB the function is opted in to that much
    first: ``cudaFuncSetAttribute``, up to the device's ``sharedMemPerBlockOptin``)."""

    def __init__(self, cp, source):
        self.cp, self.source = cp, source
        self._module = None            # the RawModule fallback
        self._fns = {}
        self._direct = None            # (DirectLauncher, current-stream pointer getter)
        self._mods = {}                # device -> loaded module, or None (the fallback)
        self._ptrs = {}                # (device, name) -> function pointer

    def __getitem__(self, name):
        """The RawModule function ``name`` (the fallback path)."""
        fn = self._fns.get(name)
        if fn is None:
            if self._module is None:
                self._module = self.cp.RawModule(code=self.source)
            fn = self._fns[name] = self._module.get_function(name)
        return fn

    def _fptr(self, name):
        dev = self.cp.cuda.runtime.getDevice()
        f = self._ptrs.get((dev, name))
        if f is not None:
            return f
        with _LOAD_LOCK:       # one module per device: a second one loaded by another
            return self._load(dev, name)     # thread would unload the first's functions

    def _load(self, dev, name):
        f = self._ptrs.get((dev, name))
        if f is not None:
            return f
        mod = self._mods.get(dev, False)
        if mod is False:
            mod = None
            try:
                from ...kernel.cuda.launch import DirectLauncher
                from ...kernel.cuda.runtime import default_runtime
                rt = default_runtime()
                if rt.available():
                    if self._direct is None:
                        st = self.cp.cuda.stream
                        self._direct = (DirectLauncher(), getattr(
                            st, "get_current_stream_ptr", None) or
                            (lambda: st.get_current_stream().ptr))
                    mod = rt.function(self.source, name)[0]
            except Exception:  # noqa: BLE001  (no NVRTC, no driver binding: the RawModule)
                mod = None
            self._mods[dev] = mod
        if mod is None:
            return None
        f = self._ptrs[(dev, name)] = int(mod.get_function(name).ptr)
        return f

    def launch(self, name, grid: int, block: int, arrays, i64s=(), i32s=(), smem: int = 0):
        fptr = self._fptr(name)
        if fptr is None:
            np_ = np
            fn = self[name]
            if smem > 48 * 1024 and fn.max_dynamic_shared_size_bytes < smem:
                fn.max_dynamic_shared_size_bytes = smem
            fn((grid,), (block,), (*arrays, *[np_.int64(v) for v in i64s],
                                   *[np_.int32(v) for v in i32s]), shared_mem=smem)
            return
        direct, stream = self._direct
        fmt = _fmt(len(arrays), len(i64s), len(i32s))
        kp = direct.pack(fmt, *[a.data.ptr for a in arrays], *i64s, *i32s)
        direct.launch(fptr, grid, block, stream(), kp, smem)


_FMTS: dict = {}


def _fmt(n_ptr, n_i64, n_i32):
    """The parameter layout of `_Kernels.launch` (each parameter in its own 8 bytes)."""
    f = _FMTS.get((n_ptr, n_i64, n_i32))
    if f is None:
        f = _FMTS[(n_ptr, n_i64, n_i32)] = "=" + "Q" * n_ptr + "q" * n_i64 + "i4x" * n_i32
    return f


def f64_bits(v) -> int:
    """A double parameter as `_Kernels.launch` passes it: its bits in a 64-bit slot (the
    kernel reads them back with ``__longlong_as_double``)."""
    return struct.unpack("<q", struct.pack("<d", float(v)))[0]


def _ce_operands(cp, x, t):
    """(x with whole-element strides, t as int32/int64, their strides): what the kernels
    read (no copies for the usual operands)."""
    x, sx = with_element_strides(x, cp.ascontiguousarray)
    if t.dtype not in _INDEX_DTYPES:
        t = t.astype(np.int64)
    t, st = with_element_strides(t, cp.ascontiguousarray)
    return x, sx, t, st[0]


def _ce_launch(M, C):
    """(mode suffix, grid, block) for M rows of C classes."""
    if C <= CE_WARP_MAX_CLASSES:
        threads = 256
        return "w", min(-(-M // (threads // 32)), _GRID_CAP), threads
    threads = 128
    while threads < 1024 and threads * 16 < C:
        threads *= 2
    return "b", min(M, _GRID_CAP), threads


def _ce_empty_classes(M, C):
    if C == 0 and M > 0:   # the reference picks class 0 of an empty row (CuPy raises too)
        from ...errors import IndexError_
        raise IndexError_(f"cross_entropy: logits of {M} rows have no classes (shape "
                          f"[{M}, 0]); a row needs at least one")


def _ce_impl(cp, xp):
    from ...ops._xp import check_indices
    from ...ops.nn import _ce_numpy, ce_target_message
    kernels = _Kernels(cp, CE_SOURCE)

    def cross_entropy_rows(x, t, *, ignore_index):
        kd = KERNEL_DTYPES.get(x.dtype)
        if kd is None:          # (no other float reaches a device; the reference as before)
            return _ce_numpy(x, t, ignore_index=ignore_index, xp=xp)
        M, C = x.shape
        loss = cp.empty((M,), x.dtype)
        valid = cp.empty((M,), x.dtype)
        if M == 0:
            return loss, valid
        _ce_empty_classes(M, C)
        x, sx, t, st = _ce_operands(cp, x, t)
        # the reference's target check (on Cuda queued on the device, raised at the next read)
        check_indices(t, C, lambda bad: ce_target_message(bad, C, ignore_index), xp,
                      ignore=ignore_index)
        mode, grid, block = _ce_launch(M, C)
        kernels.launch(f"ember_ce_fwd_{kd}_{_INDEX_DTYPES[t.dtype]}_{mode}", grid, block,
                       (x, t, loss, valid), (M, C, sx[0], sx[1], st, int(ignore_index)))
        return loss, valid
    return cross_entropy_rows


def _ce_bwd_impl(cp, xp):
    from ...ops.nn import _ce_bwd_numpy
    kernels = _Kernels(cp, CE_SOURCE)

    def cross_entropy_rows_backward(g, x, t, *, ignore_index):
        kd = KERNEL_DTYPES.get(x.dtype)
        if kd is None or g.dtype != x.dtype:
            return _ce_bwd_numpy(g, x, t, ignore_index=ignore_index, xp=xp)
        M, C = x.shape
        out = cp.empty((M, C), x.dtype)
        if M == 0 or out.size == 0:
            _ce_empty_classes(M, C)
            return out
        x, sx, t, st = _ce_operands(cp, x, t)
        g, sg = with_element_strides(g, cp.ascontiguousarray)
        mode, grid, block = _ce_launch(M, C)
        kernels.launch(f"ember_ce_bwd_{kd}_{_INDEX_DTYPES[t.dtype]}_{mode}", grid, block,
                       (g, x, t, out), (M, C, sg[0], sx[0], sx[1], st, int(ignore_index)))
        return out
    return cross_entropy_rows_backward


def _max_pool_impl(nd, with_indices):
    """Builder of ``max_pool{nd}d[_with_indices]`` (1-d runs as 2-d pooling of [N, C, 1, L]
    with a 1-tap window along the added dim: the same windows, and the same flat indices)."""
    def build(cp, xp):
        from ...ops import nn as N
        ref = (N._max_pool_idx_np if with_indices else N._max_pool_np)(nd)
        kernels = _Kernels(cp, MAX_POOL_SOURCE)

        def max_pool(x, *, kernel, stride, padding, dilation, ceil_mode):
            kd = KERNEL_DTYPES.get(x.dtype)
            if kd is None:
                return ref(x, kernel, stride, padding, dilation, ceil_mode, xp=xp)
            if nd == 1:
                x4 = x[:, :, None, :]
                k4, s4 = (1,) + tuple(kernel), (1,) + tuple(stride)
                p4, d4 = (0,) + tuple(padding), (1,) + tuple(dilation)
            else:
                x4, k4, s4, p4, d4 = x, tuple(kernel), tuple(stride), tuple(padding), \
                    tuple(dilation)
            n, c, h, w = x4.shape
            oh, ow = (N.pool_out_size(f"max_pool{nd}d", size, k, s, p, d, ceil_mode)
                      for size, k, s, p, d in zip((h, w), k4, s4, p4, d4))
            # the reference's layout: channels innermost when the input's are
            cl = N.pool_channels_last(x4)
            shape = (n, oh, ow, c) if cl else (n, c, oh, ow)
            vals = cp.empty(shape, x4.dtype)
            idx = cp.empty(shape, np.int64) if with_indices else None
            total = n * c * oh * ow
            if total:
                x4, sx = with_element_strides(x4, cp.ascontiguousarray)
                threads = 256
                grid = min(-(-total // threads), _GRID_CAP)
                i64s = (total, c, h, w, oh, ow, *sx)
                i32s = (*k4, *s4, *p4, *d4, int(cl))
                if with_indices:
                    kernels.launch(f"ember_max_pool2d_{kd}", grid, threads, (x4, vals, idx),
                                   i64s, i32s)
                else:
                    kernels.launch(f"ember_max_pool2d_values_{kd}", grid, threads,
                                   (x4, vals), i64s, i32s)
            outs = (vals, idx) if with_indices else (vals,)
            if cl:
                outs = tuple(o.transpose(0, 3, 1, 2) for o in outs)
            if nd == 1:
                outs = tuple(o[:, :, 0, :] for o in outs)
            return outs if with_indices else outs[0]
        return max_pool
    return build


def _max_pool_backward_impl(cp, xp):
    """``max_pool{1,2}d_backward`` with disjoint windows (a pooling whose stride covers its
    window, LeNet's 2x2 say): the gradient zeroed (``cudaMemsetAsync``) and one scatter
    kernel, where the reference takes about ten CuPy calls; overlapping windows (a sum per
    position) run the reference."""
    from ...ops import nn as N
    kernels = _Kernels(cp, MAX_POOL_SOURCE)
    i64 = np.dtype(np.int64)

    def max_pool_backward(g, indices, *, input_size, disjoint=False):
        kd = KERNEL_DTYPES.get(g.dtype)
        nd = g.ndim - 2
        if kd is None or not disjoint or nd not in (1, 2):
            return N._max_pool_backward_np(g, indices, input_size, disjoint, xp=xp)
        n, c = g.shape[:2]
        plane = 1
        for s_ in input_size:
            plane *= s_
        # the reference's layout: channels innermost when the indices' are
        cl = N.pool_channels_last(indices)
        shape = (n,) + tuple(input_size) + (c,) if cl else (n, c) + tuple(input_size)
        out = cp.ndarray(shape, g.dtype)
        if out.size:
            cp.cuda.runtime.memsetAsync(out.data.ptr, 0, out.nbytes,
                                        cp.cuda.get_current_stream().ptr)
        total = g.size
        if total:
            if indices.dtype != i64:
                indices = indices.astype(i64)
            g, sg = with_element_strides(g, cp.ascontiguousarray)
            indices, si = with_element_strides(indices, cp.ascontiguousarray)
            if nd == 1:
                sg, si = (sg[0], sg[1], 0, sg[2]), (si[0], si[1], 0, si[2])
            oh, ow = (1,) + g.shape[2:] if nd == 1 else g.shape[2:]
            kernels.launch(f"ember_max_pool_scatter_{kd}", min(-(-total // 256), _GRID_CAP),
                           256, (g, indices, out), (total, c, oh, ow, plane, *sg, *si),
                           (int(cl),))
        if cl:
            return out.transpose((0, nd + 1) + tuple(range(1, nd + 1)))
        return out
    return max_pool_backward


# -- full: one fill kernel of the value's bit pattern ----------------------------------------
FILL_SOURCE = r"""
#define EMBER_FILL(B, T)                                                                    \
  extern "C" __global__ void ember_fill_b##B(T* out, long long n, long long bits) {        \
    const T v = (T)(unsigned long long)bits;                                              \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;           \
         i += (long long)gridDim.x * blockDim.x) out[i] = v;                              \
  }
EMBER_FILL(1, unsigned char)
EMBER_FILL(2, unsigned short)
EMBER_FILL(4, unsigned int)
EMBER_FILL(8, unsigned long long)
"""
_UINTS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def fill_bits(value, npd) -> int | None:
    """The bit pattern `FILL_SOURCE` writes for ``value`` as NumPy dtype ``npd`` (a signed
    64-bit int, as the kernel parameter takes it), or None where NumPy will not convert it."""
    width = npd.itemsize
    if width not in _UINTS:
        return None
    try:
        bits = int(np.asarray(value, npd).reshape(1).view(_UINTS[width])[0])
    except (OverflowError, TypeError, ValueError):
        return None
    return bits - (1 << 64) if bits >= 1 << 63 else bits


class _FullDirect:
    """``full`` as one fill kernel on the thread's stream, its output from the stream's
    reused arrays: a CuPy ``full`` (an allocation and CuPy's fill kernel) costs 50 µs of
    host time or more, and every backward pass makes one (its seed gradient)."""

    def __init__(self, cp):
        from ...kernel.cuda.launch import DirectLauncher
        self.cp = cp
        self._direct = DirectLauncher()
        self._fns = {}
        self._bits = {}

    def _fn(self, width, dev):
        return _direct_function(self._fns, (width, dev), lambda _: FILL_SOURCE, None,
                                f"ember_fill_b{width}")

    def run(self, prims, attrs, meta, scope, device):
        shape, dtype = meta
        npd = dtype.np
        width = npd.itemsize
        if width not in _UINTS:
            return None
        key = (attrs["value"], npd)
        bits = self._bits.get(key)
        if bits is None:
            bits = fill_bits(attrs["value"], npd)
            if bits is None:
                return None                        # (CuPy's full decides)
            if len(self._bits) > 256:
                self._bits.clear()
            self._bits[key] = bits
        f = self._fn(width, device)
        if f is None:
            return None
        n = math.prod(shape)
        outs = scope.outputs
        out = outs.take(shape, npd, n * width) if outs is not None and n else None
        if out is None:
            out = self.cp.ndarray(shape, npd)
        if n:
            direct = self._direct
            direct.launch(f[1], min((n + 255) // 256, direct.grid_cap(device, 256)), 256,
                          scope.stream_ptr, direct.pack("=Qqq", out.data.ptr, n, bits))
        return out


class _ViewDirect:
    """The view ops, which queue no work, without the stream switch (a few µs of each of
    the ~250 views a GPT step makes): reshape only of a C-contiguous array (another may
    need a copy: the op path runs it)."""

    def __init__(self, cp, name):
        from ...ops.view import np_slices
        self.run = getattr(self, "_" + name)
        self._broadcast = cp.broadcast_to
        self._np_slices = np_slices

    @staticmethod
    def _reshape(prims, attrs, meta, scope, device):
        x = prims[0]
        return x.reshape(attrs["shape"]) if x._c_contiguous else None

    @staticmethod
    def _permute(prims, attrs, meta, scope, device):
        return prims[0].transpose(attrs["dims"])

    def _expand(self, prims, attrs, meta, scope, device):
        return self._broadcast(prims[0], attrs["shape"])

    def _slice(self, prims, attrs, meta, scope, device):
        return prims[0][self._np_slices(attrs["slices"])]


def direct_path(name, cp, contiguous=None, concatenate=None):
    """``run(prims, attrs, meta, scope, device)`` of an op the Cuda backend may launch
    without switching streams (its outputs, or None: the op's implementation runs), or
    None when the op has no such path. ``contiguous``: the backend's copy of a strided
    array (`StridedCopy`), for the paths that copy; ``concatenate``: its
    `concat.Concatenate`, for ``cat``."""
    if name in ("reshape", "permute", "expand", "slice"):
        return _ViewDirect(cp, name).run
    try:
        if name == "cat":
            if concatenate is None:
                from .concat import Concatenate
                concatenate = Concatenate(cp)
            return concatenate.run
        if name == "adam_update_many":
            return _AdamManyDirect(cp, contiguous).run
        impl = {"adam_update": _AdamDirect, "full": _FullDirect}.get(name)
        return None if impl is None else impl(cp).run
    except ImportError:                # a CuPy without the driver binding
        return None


def _builder(module: str, name: str):
    """A builder ``(cupy, xp) -> fn`` of ember/backend/cuda/``module``.py's ``name``, imported
    on first use (those modules import this one)."""
    def build(cp, xp):
        from importlib import import_module
        return getattr(import_module(f"{__package__}.{module}"), name)(cp, xp)
    return build


def _conv_builder(kind, nd):
    """A builder from ember/backend/cuda/conv.py (imported on first use: it imports this
    module)."""
    def build(cp, xp):
        from . import conv
        return getattr(conv, f"{kind}_impl")(nd)(cp, xp)
    return build


#: op name -> builder(cupy, xp) -> fn(*arrays, **attrs)
CUDA_IMPLS = {
    "erf": _erf_impl,
    "gelu": lambda cp, xp: _gelu_impl(cp, xp)[0],
    "gelu_backward": lambda cp, xp: _gelu_impl(cp, xp)[1],
    "matmul": _matmul_impl,
    "reshape": _reshape_impl,
    "adam_update": _adam_impl,
    "adam_update_many": _adam_many_impl,
    "cross_entropy_rows": _ce_impl,
    "cross_entropy_rows_backward": _ce_bwd_impl,
    "max_pool1d": _max_pool_impl(1, False),
    "max_pool2d": _max_pool_impl(2, False),
    "max_pool1d_with_indices": _max_pool_impl(1, True),
    "max_pool2d_with_indices": _max_pool_impl(2, True),
    "layer_norm": _builder("norm", "layer_norm_impl"),
    "layer_norm_backward": _builder("norm_backward", "layer_norm_backward_impl"),
    "attention": _builder("attention", "attention_impl"),  # (cuBLAS + a softmax kernel)
    "attention_backward": _builder("attention", "attention_backward_impl"),
    "linear_backward": _builder("linear", "linear_backward_impl"),  # (cuBLAS + a column sum)
    "embedding": _builder("embedding", "embedding_impl"),     # (a gather kernel)
    "embedding_backward": _builder("embedding", "embedding_backward_impl"),
    "max_pool1d_backward": _max_pool_backward_impl,
    "max_pool2d_backward": _max_pool_backward_impl,
    "conv1d": _conv_builder("conv", 1),
    "conv2d": _conv_builder("conv", 2),
    "conv1d_weight_backward": _conv_builder("conv_weight_backward", 1),
    "conv2d_weight_backward": _conv_builder("conv_weight_backward", 2),
    "conv_transpose1d": _conv_builder("conv_transpose", 1),
    "conv_transpose2d": _conv_builder("conv_transpose", 2),
}


def takes_xp(fn) -> bool:
    """Whether an op reference is written against an array namespace (has an ``xp``
    keyword)."""
    try:
        return "xp" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def ufunc_of(fn):
    """The NumPy ufunc an op reference is (possibly under an np.errstate wrapper), or None."""
    base = getattr(fn, "__wrapped__", fn)
    return base if isinstance(base, np.ufunc) else None


def how(op) -> str:
    """Which of the three ways above runs ``op`` ("impl", "ufunc", "xp"), or "none"."""
    if op.name in CUDA_IMPLS:
        return "impl"
    if ufunc_of(op.numpy) is not None:
        return "ufunc"
    if takes_xp(op.numpy):
        return "xp"
    return "none"


def resolve(op, cp, xp):
    """``fn(*arrays, **attrs)`` running ``op`` on CuPy arrays (random ops: ``fn(rng,
    **attrs)``)."""
    way = how(op)
    if way == "impl":
        return CUDA_IMPLS[op.name](cp, xp)
    if way == "ufunc":
        return getattr(cp, ufunc_of(op.numpy).__name__)
    if way == "xp":
        ref = op.numpy

        def run(*args, **attrs):
            return ref(*args, xp=xp, **attrs)
        return run
    raise NotImplementedError(
        f"Cuda: op {op.name!r} has no implementation: its reference is neither a NumPy "
        f"ufunc nor written against an array namespace (an 'xp' keyword), and "
        f"ember.backend.cuda.ops.CUDA_IMPLS has no entry for it")
