"""`Tensor`: an n-d array on a device. Ops come from the family mixins (one module each);
this module holds the core: identity, metadata, conversion, interop, autodiff entry points."""
from __future__ import annotations

import numpy as np

from .. import dtype as dt
from ..errors import DeviceError, DTypeError, ShapeError
from ..backend.base import Device
from . import dispatch
from .device import as_device
from .activation import ActivationMethods
from .elementwise import ElementwiseMethods, cast as _cast
from .indexing import IndexingMethods
from .linalg import LinalgMethods
from .nn_ops import NNMethods
from .reduce import ReduceMethods
from .shape import Shape
from .shape_ops import ShapeMethods

_as_shape = tuple.__new__


class Tensor(ElementwiseMethods, ReduceMethods, ShapeMethods, IndexingMethods, LinalgMethods,
             NNMethods, ActivationMethods):
    """An immutable n-d array on a device. Every op returns a new tensor; gradients are
    tracked when the device is an autodiff device."""

    __slots__ = ("_prim", "_device", "_shape", "_dtype", "__weakref__")

    def __init__(self, data, dtype=None, device=None):
        from .creation import tensor as _tensor
        t = _tensor(data, dtype=dtype, device=device)
        self._prim, self._device, self._shape, self._dtype = t._prim, t._device, t._shape, t._dtype

    # -- constructors (Burn spells them as associated functions) ---------------------------
    @staticmethod
    def random(shape, distribution=None, dtype=None, device=None) -> "Tensor":
        from .creation import random
        return random(shape, distribution, dtype=dtype, device=device)

    @staticmethod
    def zeros(shape, dtype=None, device=None) -> "Tensor":
        from .creation import zeros
        return zeros(shape, dtype=dtype, device=device)

    @staticmethod
    def ones(shape, dtype=None, device=None) -> "Tensor":
        from .creation import ones
        return ones(shape, dtype=dtype, device=device)

    @staticmethod
    def full(shape, value, dtype=None, device=None) -> "Tensor":
        from .creation import full
        return full(shape, value, dtype=dtype, device=device)

    @staticmethod
    def from_data(data, dtype=None, device=None) -> "Tensor":
        from .creation import tensor
        return tensor(data, dtype=dtype, device=device)

    @staticmethod
    def from_numpy(array, device=None) -> "Tensor":
        from .creation import from_numpy
        return from_numpy(array, device=device)

    # -- metadata -------------------------------------------------------------------------
    @property
    def shape(self) -> Shape:
        return _as_shape(Shape, self._shape)   # _shape holds ints already: no conversion

    @property
    def dtype(self) -> dt.DType:
        return self._dtype

    @property
    def device(self):
        return self._device

    @property
    def ndim(self) -> int:
        return len(self._shape)

    def dim(self) -> int:
        return len(self._shape)

    def numel(self) -> int:
        n = 1
        for s in self._shape:
            n *= s
        return n

    def size(self, dim: int | None = None):
        if dim is None:
            return self.shape
        from ..ops.rules import canonical_dim
        return self._shape[canonical_dim("size", dim, len(self._shape))]

    @property
    def kind(self) -> str:
        return self._dtype.kind

    # -- host data ------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The values as a NumPy array (a copy for device memory; may share CPU memory)."""
        return np.asarray(self._device.backend.to_numpy(self._prim)).reshape(self._shape)

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        if dtype is not None and a.dtype != np.dtype(dtype):
            if copy is False:
                raise ValueError(f"__array__: converting {self._dtype.short} to {dtype} "
                                 f"needs a copy, but copy=False")
            return a.astype(dtype)
        return a.copy() if copy else a

    def to_data(self):
        from .data import TensorData
        return TensorData.from_numpy(self.numpy())

    def tolist(self):
        return self.numpy().tolist()

    def item(self):
        if self.numel() != 1:
            raise ShapeError(f"item: needs a tensor of exactly one element, got shape "
                             f"{self._shape}")
        return self.numpy().reshape(()).item()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self._dtype.kind != "int":
            raise DTypeError(f"__index__: only int tensors can be used as an index, got "
                             f"{self._dtype.short}")
        return int(self.item())

    def __bool__(self):
        if self.numel() != 1:
            raise ShapeError(f"bool: the truth value of a tensor of shape {self._shape} is "
                             f"ambiguous; use .any() or .all()")
        return bool(self.item())

    def __len__(self):
        if not self._shape:
            raise ShapeError("len: a 0-d tensor has no length")
        return self._shape[0]

    def __iter__(self):
        if not self._shape:
            raise ShapeError("iter: cannot iterate over a 0-d tensor")
        for i in range(self._shape[0]):
            yield self.select(0, i)

    __hash__ = object.__hash__

    # -- devices and dtypes ---------------------------------------------------------------
    def to_device(self, device) -> "Tensor":
        """This tensor's values on ``device`` (a copy through the host for different hardware;
        gradients do not flow across the move)."""
        if device.__class__ is not Device:
            device = as_device(device)
        if device is self._device:
            return self
        src, dst = self._device.backend, device.backend
        if src.is_autodiff and dst is src.inner:
            return dispatch.wrap(src.unwrap(self._prim), device, self._shape, self._dtype)
        if dst.is_autodiff and dst.inner is src:
            return dispatch.wrap(dst.wrap_inner(self._prim, (self._shape, self._dtype)),
                                 device, self._shape, self._dtype)
        arr = np.ascontiguousarray(self.numpy())
        return dispatch.wrap(dst.from_numpy(arr, device), device, self._shape, self._dtype)

    def cast(self, dtype) -> "Tensor":
        return _cast(self, dtype)

    def float(self):
        return self.cast(dt.float32)

    def double(self):
        return self.cast(dt.float64)

    def half(self):
        return self.cast(dt.float16)

    def bfloat16(self):
        return self.cast(dt.bfloat16)

    def int(self):
        return self.cast(dt.int64)

    def long(self):
        return self.cast(dt.int64)

    def bool(self):
        return self.cast(dt.bool_)

    # -- interop --------------------------------------------------------------------------
    @property
    def primitive(self):
        """The backend's own buffer (a NumPy array on NdArray) for custom kernels."""
        return self._device.backend.native(self._prim)

    def __dlpack__(self, *args, **kwargs):
        from .interop import to_dlpack
        return to_dlpack(self, *args, **kwargs)

    def __dlpack_device__(self):
        from .interop import dlpack_device
        return dlpack_device(self)

    @property
    def __cuda_array_interface__(self):
        """Numba's and CuPy's protocol, for tensors on a CUDA device (an AttributeError
        elsewhere, so that ``hasattr`` tells them apart)."""
        from .interop import cuda_array_interface
        return cuda_array_interface(self)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        # NumPy scalars combine with tensors like Python scalars (np.float64(2) * t is a
        # tensor of t's dtype); see ember/tensor/interop.py
        from .interop import array_ufunc
        return array_ufunc(self, ufunc, method, inputs, kwargs)

    # -- autodiff -------------------------------------------------------------------------
    def require_grad(self) -> "Tensor":
        """This tensor, marked as a leaf whose gradient `backward` returns (a no-op on a
        device that does not track gradients)."""
        b = self._device.backend
        return dispatch.wrap(b.require_grad(self._prim, (self._shape, self._dtype)),
                             self._device, self._shape, self._dtype)

    requires_grad_ = require_grad

    def set_require_grad(self, flag: bool) -> "Tensor":
        return self.require_grad() if flag else self.detach()

    def detach(self) -> "Tensor":
        """The same values, cut from the graph."""
        return dispatch.wrap(self._device.backend.detach(self._prim), self._device,
                             self._shape, self._dtype)

    def is_require_grad(self) -> bool:
        return self._device.backend.is_tracked(self._prim)

    def backward(self):
        """Gradients of this tensor (seeded with ones) for every leaf that requires grad."""
        return self._device.backend.backward(self._prim, (self._shape, self._dtype),
                                             self._device)

    def _leaf_id(self, op):
        b = self._device.backend
        if not b.is_autodiff:
            from ..errors import AutodiffError
            raise AutodiffError(f"{op}: the tensor lives on {self._device}, which tracks no "
                                f"gradients")
        return b.leaf_id(self._prim)

    def grad(self, grads):
        """This tensor's gradient in ``grads`` (on the inner device), or None."""
        key = self._leaf_id("grad")
        return None if key is None else grads.get(key)

    def grad_remove(self, grads):
        key = self._leaf_id("grad_remove")
        return None if key is None else grads.remove(key)

    def grad_replace(self, grads, grad):
        key = self._leaf_id("grad_replace")
        if key is None:
            from ..errors import AutodiffError
            raise AutodiffError("grad_replace: the tensor does not require grad")
        if tuple(grad._shape) != self._shape:
            raise ShapeError(f"grad_replace: gradient shape {grad._shape} does not match the "
                             f"tensor's {self._shape}")
        grads.replace(key, grad)

    def id(self):
        """The stable id of a tensor that requires grad (None otherwise)."""
        b = self._device.backend
        return b.leaf_id(self._prim) if b.is_autodiff else None

    # -- display --------------------------------------------------------------------------
    def __repr__(self):
        from .display import tensor_repr
        return tensor_repr(self)

    def __str__(self):
        return self.__repr__()

    def __reduce__(self):
        # values, dtype and device; a leaf that requires grad comes back as one (a new leaf)
        if self.id() is not None:
            return (_rebuild, (self.numpy(), self._dtype.name, self._device, True))
        return (_rebuild, (self.numpy(), self._dtype.name, self._device))

    def __copy__(self):
        # A new Tensor object sharing the primitive: `x[...] = v` rebinds only the object
        # it is applied to, so copies must be distinct objects (the storage is immutable).
        return dispatch.wrap(self._prim, self._device, self._shape, self._dtype)

    def __deepcopy__(self, memo):
        return dispatch.wrap(self._prim, self._device, self._shape, self._dtype)


def _rebuild(array, dtype_name, device, require_grad=False):
    from .creation import tensor as _tensor
    t = _tensor(array, dtype=dt.from_name(dtype_name), device=device)
    return t.require_grad() if require_grad else t


dispatch.Tensor = Tensor
