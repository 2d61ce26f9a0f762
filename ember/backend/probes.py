"""Which backends this machine can run, and why not (for `ember info` and the test suite)."""
from __future__ import annotations

import importlib.util

from .stacks import register_probe, register_stack


def _ndarray():
    return None


def _cuda():
    from .cuda import unavailable_reason
    return unavailable_reason()


def _cuda_detail():
    from .cuda._cupy import describe
    return describe()


def _wgpu():
    if importlib.util.find_spec("wgpu") is None:
        return "wgpu-py is not installed; the Wgpu backend is not part of ember yet"
    return "the Wgpu backend is not part of ember yet"


def _torch():
    if importlib.util.find_spec("torch") is None:
        return "PyTorch is not installed; the Torch backend is not part of ember yet"
    return "the Torch backend is not part of ember yet"


register_probe("ndarray", _ndarray)
register_probe("cuda", _cuda, detail=_cuda_detail)
register_probe("wgpu", _wgpu)
register_probe("torch", _torch)


def _nd_device():
    from .ndarray import NdArray
    return NdArray().device(0)


def _ad_nd_device():
    from .autodiff import Autodiff
    from .ndarray import NdArray
    return Autodiff(NdArray()).device(0)


def _cuda_device():
    from .cuda import Cuda
    return Cuda().device(0)


def _ad_cuda_device():
    from .autodiff import Autodiff
    from .cuda import Cuda
    return Autodiff(Cuda()).device(0)


register_stack("ndarray", _nd_device)
register_stack("autodiff(ndarray)", _ad_nd_device, autodiff=True)
register_stack("cuda", _cuda_device, _cuda)
register_stack("autodiff(cuda)", _ad_cuda_device, _cuda, autodiff=True)

from .fusion.registration import register as _register_fusion  # noqa: E402

_register_fusion()
