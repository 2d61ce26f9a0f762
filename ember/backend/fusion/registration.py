"""The Fusion stacks of the conformance suite and `ember info`."""
from __future__ import annotations

from ..stacks import register_stack


def _fusion_device():
    from ..ndarray import NdArray
    from .backend import Fusion
    return Fusion(NdArray()).device(0)


def _ad_fusion_device():
    from ..autodiff import Autodiff
    from ..ndarray import NdArray
    from .backend import Fusion
    return Autodiff(Fusion(NdArray())).device(0)


def register() -> None:
    register_stack("fusion(ndarray)", _fusion_device)
    register_stack("autodiff(fusion(ndarray))", _ad_fusion_device, autodiff=True)
