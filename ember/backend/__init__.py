"""Backends (NdArray) and decorators (Autodiff) that compose: ``Autodiff(NdArray())``."""
from .base import Backend, Device  # noqa: F401
from .ndarray import NdArray  # noqa: F401
from .autodiff import Autodiff  # noqa: F401
from .fusion import Fusion  # noqa: F401
from .cuda.backend import Cuda  # noqa: F401  (CuPy is imported by Cuda(), not here)
from . import probes as _probes  # noqa: F401  (registers stacks and backend probes)
