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
import types

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)

#: ops that take bf16 arrays as they are (views, and cuBLAS's bf16 matmul); every other op
#: computes bf16 inputs in f32. (CuPy 14 also copies, concatenates, takes and selects bf16
#: natively; adding such data-movement ops here saves two conversions each, once a GPU run
#: of the conformance suite has checked them.)
BF16_NATIVE = frozenset({"reshape", "expand", "permute", "slice", "unfold", "matmul",
                         "adam_update"})   # (its kernel rounds to bf16 per operation itself)


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


def _matmul_impl(cp, xp):
    return xp.matmul


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


def _adam_scalar(x, scalar_type):
    """``x`` rounded to the type a NumPy ufunc takes a Python float in, for tensors of the
    dtype: the dtype itself (f16, f32, f64); f32 for bf16 (ml_dtypes computes bf16 ufuncs
    with a Python scalar in f32)."""
    return float(scalar_type(float(x)))


def _adam_impl(cp, xp):
    kernels = {}

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
        l2, decay = float(l2), float(decay)
        outs = kernel(bf16)(w, g, m, v, *[_adam_scalar(x, st) for x in (
            beta1, beta2, k1, k2, step, eps, decay, l2)], int(bool(first)), int(l2 != 0.0),
            int(decay != 1.0))
        if bf16:
            return tuple(o.astype(BF16) for o in outs)
        return outs
    return adam_update


#: op name -> builder(cupy, xp) -> fn(*arrays, **attrs)
CUDA_IMPLS = {
    "erf": _erf_impl,
    "matmul": _matmul_impl,
    "adam_update": _adam_impl,
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
