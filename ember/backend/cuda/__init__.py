"""The Cuda backend: CuPy arrays on NVIDIA GPUs (``pip install 'ember[cuda12]'``).

Importing this package does not import CuPy; ``Cuda()`` does, and raises
`ember.errors.BackendUnavailableError` saying why when it cannot run here.
"""
from __future__ import annotations

from ._cupy import reason as unavailable_reason  # noqa: F401

#: whether ``em.device("cuda")`` is Fusion(Cuda) (the design's default) or plain Cuda
#: (``em.device("cuda", fusion=False)`` asks for plain Cuda either way)
FUSION_BY_DEFAULT = True


def __getattr__(name):
    if name == "Cuda":
        from .backend import Cuda
        return Cuda
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def cuda_device(index: int = 0, fusion: bool | None = None):
    """The device behind ``em.device("cuda:<index>")``: Fusion(Cuda), or plain Cuda with
    ``fusion=False`` (``None``: `FUSION_BY_DEFAULT`)."""
    from .backend import Cuda
    backend = Cuda()
    if fusion is None:
        fusion = FUSION_BY_DEFAULT
    if fusion:
        from ..fusion import Fusion
        backend = Fusion(backend)
    return backend.device(index)
