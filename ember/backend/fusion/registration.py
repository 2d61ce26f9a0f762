"""The Fusion stacks of the conformance suite and `ember info`: every fusable op recorded and
fused (``min_numel=0``), whatever its size, so the suite exercises the kernels."""
from __future__ import annotations

from ..stacks import register_stack


def _fusion_device():
    from ..ndarray import NdArray
    from .backend import Fusion
    return Fusion(NdArray(), "auto", 0).device(0)


def _ad_fusion_device():
    from ..autodiff import Autodiff
    from ..ndarray import NdArray
    from .backend import Fusion
    return Autodiff(Fusion(NdArray(), "auto", 0)).device(0)


def _fusion_cuda_device():
    from ..cuda import Cuda
    from .backend import Fusion
    return Fusion(Cuda(), "auto", 0).device(0)


def _ad_fusion_cuda_device():
    from ..autodiff import Autodiff
    from ..cuda import Cuda
    from .backend import Fusion
    return Autodiff(Fusion(Cuda(), "auto", 0)).device(0)


def fusion_cuda_reason() -> str | None:
    """Why Fusion(Cuda) cannot fuse here (the Cuda backend's reason, else the CUDA kernel
    runtime's), or None."""
    from ..cuda import unavailable_reason
    why = unavailable_reason()
    if why:
        return why
    from ...kernel.cuda.runtime import default_runtime
    rt = default_runtime()
    if not rt.available():
        return f"the CUDA kernel runtime cannot run here: {rt.why_unavailable()}"
    return None


def register() -> None:
    register_stack("fusion(ndarray)", _fusion_device)
    register_stack("autodiff(fusion(ndarray))", _ad_fusion_device, autodiff=True)
    register_stack("fusion(cuda)", _fusion_cuda_device, fusion_cuda_reason)
    register_stack("autodiff(fusion(cuda))", _ad_fusion_cuda_device, fusion_cuda_reason,
                   autodiff=True)
