"""NdArray: runs every registry op through its NumPy reference, on the CPU."""
from __future__ import annotations

import threading

import numpy as np

from ..base import Backend


class NdArray(Backend):
    name = "ndarray"
    kind = "cpu"
    #: ops with a decomposition that Fusion(NdArray) runs here as one op: a linear layer's
    #: gradients are two NumPy products and a sum either way, and one op spares the
    #: decomposition's dispatch (bench/train_cpu.py: the digits MLP's step 0.99x -> 1.11x
    #: torch's time through the decomposition)
    fused_ops = frozenset({"linear_backward"})

    def __init__(self):
        super().__init__()
        self._rngs = {}
        self._rng_lock = threading.Lock()

    def execute(self, op, prims, attrs, meta, device):
        if op.category == "random":
            return op.numpy(self._rng(device), **attrs)
        out = op.numpy(*prims, **attrs)
        if op.nout == 1:
            want = meta[1].np
            if out.dtype is not want and out.dtype != want:
                out = np.asarray(out).astype(want)
            return out
        return tuple(o if o.dtype == m[1].np else np.asarray(o).astype(m[1].np)
                     for o, m in zip(out, meta))

    # -- kernel runtime (what Fusion(NdArray) runs generated kernels on) -------------------
    @property
    def kernel_runtime(self):
        """The generated-C kernel runtime, created on first use; None when no C compiler is
        usable here (ember then says so once, and Fusion runs unfused)."""
        rt = self.__dict__.get("_kernel_runtime", False)
        if rt is False:
            try:
                from ...kernel.c.runtime import default_runtime
                r = default_runtime()
                if r.available():
                    rt = r
                else:
                    r.warn_once()
                    self.kernel_runtime_warned = True
                    self.kernel_runtime_reason = r.why_unavailable()
                    rt = None
            except ImportError as e:
                self.kernel_runtime_reason = f"the C kernel runtime cannot be imported ({e})"
                rt = None
            self._kernel_runtime = rt
        return rt

    # -- data -----------------------------------------------------------------------------
    def from_numpy(self, array, device):
        return array

    def to_numpy(self, prim):
        return np.asarray(prim)

    def native(self, prim):
        return np.asarray(prim)

    as_array = staticmethod(np.asarray)
    ascontiguous = staticmethod(np.ascontiguousarray)

    def dlpack_source(self, prim):
        return np.asarray(prim)

    def from_dlpack(self, obj, device):
        return np.from_dlpack(obj)

    # -- random streams -------------------------------------------------------------------
    def _rng(self, device):
        g = self._rngs.get(device.index)
        if g is None:
            with self._rng_lock:
                g = self._rngs.get(device.index)
                if g is None:
                    g = self._rngs[device.index] = np.random.default_rng()
        return g

    def seed(self, device, seed):
        with self._rng_lock:
            self._rngs[device.index] = np.random.default_rng(seed)
