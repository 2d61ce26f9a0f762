"""Matrix products through cuBLASLt, with a plan per product shape.

A ``cublasGemmStridedBatchedEx`` call costs 20-30 µs of host time on an H100 machine, most
of it cuBLAS choosing a kernel again for every call (and CuPy's handle fetch setting the
stream, which resets cuBLAS's workspace); a small model's training step makes a dozen such
products and is host-bound. cuBLASLt separates the choice from the call: here the choice
(``cublasLtMatmulAlgoGetHeuristic``'s first answer, what cuBLAS itself would run) is made
once per key -- dtype, compute type, transposes, sizes, leading dimensions, batch count and
strides, and the operands' pointer alignment -- and kept with its descriptors; a call is
then one ``cublasLtMatmul`` through ctypes on the caller's stream, with a workspace per
stream (two streams never share one).

The library is the one CuPy's cuBLAS loaded (found in the process's mappings), so no other
CUDA library is pulled in. Where it cannot be loaded, a key has no algorithm, or a call
fails, the product goes through ``cublasGemmStridedBatchedEx`` as before (`matmul.py`).
``EMBER_CUDA_CUBLASLT=0`` turns this path off.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading

__all__ = ["Lt", "load", "enabled", "WORKSPACE_BYTES", "MAX_PLANS"]

#: workspace a product may use (cuBLAS's own default on Hopper), one per stream that runs
#: products
WORKSPACE_BYTES = 32 << 20
#: plans kept (products of further keys take the legacy path)
MAX_PLANS = 4096

# cublasLt.h
_DESC_TRANSA, _DESC_TRANSB = 3, 4
_LAYOUT_BATCH_COUNT, _LAYOUT_BATCH_STRIDE = 5, 6
_PREF_MAX_WORKSPACE = 1
_PREF_ALIGN_A, _PREF_ALIGN_B, _PREF_ALIGN_C, _PREF_ALIGN_D = 5, 6, 7, 8


class _Heuristic(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspaceSize", ctypes.c_size_t),
                ("state", ctypes.c_int), ("wavesCount", ctypes.c_float),
                ("reserved", ctypes.c_int * 4)]


def enabled(env=None) -> bool:
    env = os.environ if env is None else env
    return env.get("EMBER_CUDA_CUBLASLT", "1") != "0"


_LOCK = threading.Lock()
_LIB: list = []


def load():
    """The cuBLASLt library CuPy's cuBLAS uses (a ctypes CDLL with its signatures), or None."""
    with _LOCK:
        if _LIB:
            return _LIB[0]
        lib = None
        try:
            lib = _open()
            if lib is not None:
                _declare(lib)
        except (OSError, AttributeError):
            lib = None
        _LIB.append(lib)
        return lib


def _open():
    path = None
    try:
        with open("/proc/self/maps") as f:          # the copy already loaded, by path
            for line in f:
                if "libcublasLt.so" in line:
                    path = line.split()[-1]
                    break
    except OSError:
        pass
    for name in ([path] if path else []) + ["libcublasLt.so.13", "libcublasLt.so.12",
                                            ctypes.util.find_library("cublasLt")]:
        if name:
            try:
                return ctypes.CDLL(name)
            except OSError:
                continue
    return None


def _declare(lib):
    p, i, u64, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_size_t
    pp = ctypes.POINTER(ctypes.c_void_p)
    sig = {
        "cublasLtCreate": [pp],
        "cublasLtMatmulDescCreate": [pp, i, i],
        "cublasLtMatmulDescSetAttribute": [p, i, p, sz],
        "cublasLtMatrixLayoutCreate": [pp, i, u64, u64, ctypes.c_int64],
        "cublasLtMatrixLayoutSetAttribute": [p, i, p, sz],
        "cublasLtMatmulPreferenceCreate": [pp],
        "cublasLtMatmulPreferenceSetAttribute": [p, i, p, sz],
        "cublasLtMatmulPreferenceDestroy": [p],
        "cublasLtMatmulAlgoGetHeuristic": [p, p, p, p, p, p, p, i,
                                           ctypes.POINTER(_Heuristic), ctypes.POINTER(i)],
        "cublasLtMatmul": [p, p, p, p, p, p, p, p, p, p, p, p, p, p, sz, p],
    }
    for name, args in sig.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = ctypes.c_int


class _Plan:
    """A product's descriptors and algorithm (kept alive with it)."""

    __slots__ = ("desc", "a", "b", "c", "algo", "ws", "_algo")

    def __init__(self, desc, a, b, c, algo, ws):
        self.desc, self.a, self.b, self.c, self.ws = desc, a, b, c, ws
        self._algo = algo                                 # (the 64 bytes the pointer names)
        self.algo = ctypes.cast(algo, ctypes.c_void_p)


def _alignment(ptr: int) -> int:
    for a in (16, 8, 4):
        if ptr % a == 0:
            return a
    return 2


class Lt:
    """cuBLASLt products of one process: a handle per device, plans by key, a workspace per
    (device, stream)."""

    def __init__(self, lib, cp):
        self.lib, self.cp = lib, cp
        self._handles: dict = {}
        self._plans: dict = {}
        self._ws: dict = {}
        self._lock = threading.Lock()
        self.calls = 0

    def _handle(self, dev):
        h = self._handles.get(dev)
        if h is None:
            h = ctypes.c_void_p()
            if self.lib.cublasLtCreate(ctypes.byref(h)):
                raise OSError("cublasLtCreate failed")
            self._handles[dev] = h
        return h

    def _workspace(self, dev, stream) -> int:
        """The workspace of (device, stream): device memory of its own (cudaMalloc, outside
        the memory pool, so it never pins a pool chunk), kept for the process."""
        w = self._ws.get((dev, stream))
        if w is None:
            w = self._ws[(dev, stream)] = self.cp.cuda.runtime.malloc(WORKSPACE_BYTES)
        return w

    def matmul(self, dev, stream, cuda_t, compute, scale_t, ta, tb, m, n, k,
               a_ptr, lda, sa, b_ptr, ldb, sb, c_ptr, ldc, sc, count, alpha, beta) -> bool:
        """Column-major ``C[m, n] = op(A) op(B)`` (``op``: transpose flag ``ta``/``tb``; A
        is m x k after op, B k x n), ``count`` matrices each with batch strides ``sa``,
        ``sb``, ``sc``; ``alpha``/``beta`` host pointers of the scale type. False: no plan
        for this key (the caller runs the legacy path)."""
        key = (dev, cuda_t, compute, ta, tb, m, n, k, lda, ldb, ldc, sa, sb, sc, count,
               _alignment(a_ptr), _alignment(b_ptr), _alignment(c_ptr))
        plan = self._plans.get(key, False)
        if plan is False:
            if len(self._plans) >= MAX_PLANS:
                return False               # (a table that full: new keys stay legacy)
            with self._lock:
                plan = self._plans.get(key, False)
                if plan is False:
                    try:
                        plan = self._plan(key, dev, scale_t)
                    except OSError:
                        plan = None
                    self._plans[key] = plan
        if plan is None:
            return False
        ws = self._workspace(dev, stream) if plan.ws else None
        lib = self.lib
        status = lib.cublasLtMatmul(
            self._handles[dev], plan.desc, alpha, a_ptr, plan.a, b_ptr, plan.b, beta,
            c_ptr, plan.c, c_ptr, plan.c, plan.algo, ws,
            plan.ws, stream)
        if status:
            self._plans[key] = None        # (this key takes the legacy path from now on)
            return False
        self.calls += 1
        return True

    def _plan(self, key, dev, scale_t):
        (_, cuda_t, compute, ta, tb, m, n, k, lda, ldb, ldc, sa, sb, sc, count,
         al_a, al_b, al_c) = key
        lib = self.lib
        handle = self._handle(dev)
        desc = ctypes.c_void_p()
        _ok(lib.cublasLtMatmulDescCreate(ctypes.byref(desc), compute, scale_t))
        for attr, v in ((_DESC_TRANSA, ta), (_DESC_TRANSB, tb)):
            v = ctypes.c_int32(v)
            _ok(lib.cublasLtMatmulDescSetAttribute(desc, attr, ctypes.byref(v), 4))

        def layout(rows, cols, ld, stride):
            lay = ctypes.c_void_p()
            _ok(lib.cublasLtMatrixLayoutCreate(ctypes.byref(lay), cuda_t, rows, cols, ld))
            if count > 1:
                c = ctypes.c_int32(count)
                s = ctypes.c_int64(stride)
                _ok(lib.cublasLtMatrixLayoutSetAttribute(lay, _LAYOUT_BATCH_COUNT,
                                                         ctypes.byref(c), 4))
                _ok(lib.cublasLtMatrixLayoutSetAttribute(lay, _LAYOUT_BATCH_STRIDE,
                                                         ctypes.byref(s), 8))
            return lay

        # the stored matrices: A is m x k (k x m when transposed), B k x n (n x k)
        a = layout(k if ta else m, m if ta else k, lda, sa)
        b = layout(n if tb else k, k if tb else n, ldb, sb)
        c = layout(m, n, ldc, sc)
        pref = ctypes.c_void_p()
        _ok(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)))
        try:
            ws = ctypes.c_uint64(WORKSPACE_BYTES)
            _ok(lib.cublasLtMatmulPreferenceSetAttribute(pref, _PREF_MAX_WORKSPACE,
                                                         ctypes.byref(ws), 8))
            for attr, al in ((_PREF_ALIGN_A, al_a), (_PREF_ALIGN_B, al_b),
                             (_PREF_ALIGN_C, al_c), (_PREF_ALIGN_D, al_c)):
                v = ctypes.c_uint32(al)
                _ok(lib.cublasLtMatmulPreferenceSetAttribute(pref, attr, ctypes.byref(v), 4))
            res = _Heuristic()
            found = ctypes.c_int(0)
            status = lib.cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, c, c, pref, 1,
                                                        ctypes.byref(res), ctypes.byref(found))
        finally:
            lib.cublasLtMatmulPreferenceDestroy(pref)
        if status or found.value < 1 or res.state:
            return None
        return _Plan(desc, a, b, c, (ctypes.c_uint64 * 8)(*res.algo), int(res.workspaceSize))


def _ok(status):
    if status:
        raise OSError(f"cuBLASLt call failed with status {status}")
