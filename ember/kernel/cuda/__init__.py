"""The CUDA target: render kernels to CUDA C (`render`), compile them with NVRTC and cache
the binaries (`nvrtc`, `compiler`), run them on CuPy arrays (`runtime.CudaKernelRuntime`),
autotune their launches (`tune`), and user kernels (`custom`). Importing this package does
not import CuPy."""
from .custom import (CustomKernel, has_kernel, lookup, register_kernel, registered,
                     unregister)

__all__ = ["CudaKernelRuntime", "CudaProgram", "default_runtime", "CustomKernel",
           "register_kernel", "unregister", "lookup", "has_kernel", "registered"]


def __getattr__(name):
    if name in ("CudaKernelRuntime", "CudaProgram", "default_runtime"):
        from . import runtime
        return getattr(runtime, name)
    raise AttributeError(f"module 'ember.kernel.cuda' has no attribute {name!r}")
