"""The C target: render kernels to C (`render`), compile and cache them (`compiler`), run them
on NumPy arrays (`runtime.CpuKernelRuntime`)."""
from .runtime import CpuKernelRuntime, Program, default_runtime

__all__ = ["CpuKernelRuntime", "Program", "default_runtime"]
