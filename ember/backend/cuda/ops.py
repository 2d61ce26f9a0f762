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
BF16_NATIVE = frozenset({"reshape", "expand", "permute", "slice", "unfold", "matmul"})


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


#: op name -> builder(cupy, xp) -> fn(*arrays, **attrs)
CUDA_IMPLS = {
    "erf": _erf_impl,
    "matmul": _matmul_impl,
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
