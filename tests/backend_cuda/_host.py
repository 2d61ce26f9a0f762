"""The Cuda backend's op implementations run on the host, for the tests without a GPU: NumPy
standing in for CuPy in the namespace the backend gives them, and the CPU kernel runtimes
(the IR interpreter; generated C where a compiler is usable) standing in for NVRTC's for the
kernels of ember's renderer that they launch."""
from __future__ import annotations

import numpy as np

from ember.backend.cuda import ops as cuda_ops
from ember.backend.fusion.runtime import InterpretRuntime
from ember.kernel.c.runtime import CpuKernelRuntime


def cpu_kernel_runtimes() -> list:
    """``(name, runtime)`` pairs: the interpreter, and the C runtime where it runs."""
    rts = [("interpret", InterpretRuntime())]
    c = CpuKernelRuntime(autotune=False)
    if c.available():
        rts.append(("c", c))
    return rts


def host_namespace(runtime):
    """The ``xp`` the Cuda backend's implementations get, over NumPy, with ``runtime`` (or
    None: no kernel runtime) as its kernel runtime."""
    return cuda_ops.namespace(np, ember_kernel_runtime=lambda: runtime,
                              ember_contiguous=np.ascontiguousarray)
