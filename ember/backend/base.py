"""What every backend provides, and the devices that name where tensors live.

Backends and devices are interned: ``Autodiff(NdArray()) is Autodiff(NdArray())``, and a
device is the same object however it is obtained, so the per-op device check is identity.
"""
from __future__ import annotations

import threading

import numpy as np

from ..errors import AutodiffError, DeviceError


# Set by ``em.seed(n)``: devices of base backends created afterwards start from this seed.
GLOBAL_SEED: int | None = None


class _Interned(type):
    """Backends built with equal arguments are one object."""

    _lock = threading.Lock()

    def __call__(cls, *args):
        key = (cls, args)
        inst = cls._instances.get(key) if "_instances" in cls.__dict__ else None
        if inst is None:
            with _Interned._lock:
                if "_instances" not in cls.__dict__:
                    cls._instances = {}
                inst = cls._instances.get(key)
                if inst is None:
                    inst = super().__call__(*args)
                    inst._intern_args = args
                    cls._instances[key] = inst
        return inst


class Backend(metaclass=_Interned):
    """A base backend or a decorator. Subclasses implement ``execute`` and the data movers."""

    name = "backend"
    kind = "cpu"             # the hardware family a device of this backend lives on
    inner: "Backend | None" = None
    is_autodiff = False
    #: names of registry ops with a ``decompose`` that this backend runs as a fused kernel
    #: of its own, faster than Fusion's kernels for the decomposition: a Fusion over this
    #: backend runs them here (inputs materialized) rather than decomposing them
    fused_ops: frozenset = frozenset()

    def __init__(self):
        self._devices = {}

    # -- devices --------------------------------------------------------------------------
    def device(self, index: int = 0) -> "Device":
        d = self._devices.get(index)
        if d is None:
            d = Device(self, index)
            self._devices[index] = d
            if GLOBAL_SEED is not None and self.inner is None:
                self.seed(d, GLOBAL_SEED)  # em.seed(n) also covers devices made after it
        return d

    # -- the op path ----------------------------------------------------------------------
    def execute(self, op, prims, attrs, meta, device):
        """Run ``op`` on primitives; ``meta`` is the inferred ``(shape, dtype)`` of the
        output (a list of them for several outputs)."""
        raise NotImplementedError

    # -- data -----------------------------------------------------------------------------
    def from_numpy(self, array: np.ndarray, device: "Device"):
        raise NotImplementedError

    def to_numpy(self, prim) -> np.ndarray:
        raise NotImplementedError

    def seed(self, device: "Device", seed: int) -> None:
        raise NotImplementedError

    def sync(self, device: "Device") -> None:
        """Wait for all queued work on ``device``."""

    def flush(self, device: "Device") -> None:
        """Start the work a lazy backend holds for ``device`` (Fusion's recorded ops still
        wanted) without waiting for it: one planning of all of it, where reads one by one
        would each plan a part. Eager backends hold nothing."""

    def dlpack_source(self, prim):
        """An object with ``__dlpack__`` sharing the primitive's memory."""
        raise NotImplementedError

    def from_dlpack(self, capsule_owner, device: "Device"):
        raise NotImplementedError

    def native(self, prim):
        """The backend's own buffer behind a primitive (``tensor.primitive``)."""
        return prim

    # -- what a decorator (Fusion) needs to handle primitives of any array library ---------
    def as_array(self, prim):
        """``prim`` as this backend's array type (NdArray: a NumPy scalar becomes a 0-d
        array); ops already return arrays, so by default ``prim`` itself."""
        return prim

    def ascontiguous(self, prim):
        """A C-contiguous array of this backend with ``prim``'s values: ``prim`` itself when
        it is one, else a copy queued where this backend's ops go."""
        raise NotImplementedError(f"{self.describe()}: no ascontiguous (Fusion needs it)")

    # -- autodiff hooks; a plain backend tracks nothing -----------------------------------
    def require_grad(self, prim, meta):
        return prim

    def detach(self, prim):
        return prim

    def is_tracked(self, prim) -> bool:
        return False

    def backward(self, prim, meta, device):
        raise AutodiffError(
            f"backward: the tensor lives on {device}, which does not track gradients; "
            f"create it on device.autodiff() (e.g. em.device('cpu').autodiff())")

    def describe(self) -> str:
        return self.name

    def __reduce__(self):
        # a backend pickles as its constructor call, which returns the interned instance
        return (type(self), self._intern_args)

    def __repr__(self):
        return self.describe()


class Device:
    """Where a tensor lives: a backend (possibly decorated) and an index on its hardware."""

    __slots__ = ("backend", "index", "_execute", "inner", "__weakref__")

    def __init__(self, backend: Backend, index: int):
        self.backend = backend
        self.index = index
        self._execute = backend.execute
        self.inner = backend.inner.device(index) if backend.inner is not None else None

    @property
    def kind(self) -> str:
        return self.backend.kind

    def autodiff(self) -> "Device":
        """The same device with gradients tracked."""
        from .autodiff import Autodiff
        if self.backend.is_autodiff:
            return self
        return Autodiff(self.backend).device(self.index)

    def without_autodiff(self) -> "Device":
        return self.inner if self.backend.is_autodiff else self

    def seed(self, seed: int) -> None:
        """Reseed this device's random stream: the same seed gives the same tensors."""
        self.backend.seed(self, int(seed))

    def sync(self) -> None:
        self.backend.sync(self)

    def __repr__(self):
        return f"Device({self.backend.describe()}, {self.kind}:{self.index})"

    def __str__(self):
        return f"{self.backend.describe()} {self.kind}:{self.index}"

    def __reduce__(self):
        return (_device_from, (self.backend, self.index))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


def _device_from(backend, index):
    return backend.device(index)


def check_same_device(op: str, a: Device, b: Device) -> None:
    if a is not b:
        raise DeviceError(f"{op}: tensors are on different devices, {a} and {b}; "
                          f"move one with .to_device(...) first")
