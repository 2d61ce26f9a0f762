"""`Param`: a tensor owned by a module, with a stable id and a require-grad flag.

A Param *is* a Tensor (``x @ self.weight`` just works); ops on it return plain Tensors.
Params are values: nothing mutates one after construction, so `with_tensor` makes a new
Param carrying the same id and flag."""
from __future__ import annotations

import os

from ..tensor import Tensor
from ..tensor.dispatch import wrap


def new_param_id() -> str:
    """A fresh param id: 16 hex digits, random (unique in practice, thread-safe)."""
    return os.urandom(8).hex()


def _as_tensor(value) -> Tensor:
    if isinstance(value, Tensor):
        return value
    from ..tensor.creation import tensor as _tensor
    return _tensor(value)


class Param(Tensor):
    """A module's parameter (or buffer, when ``require_grad=False``).

    ``Param(tensor, id=None, require_grad=True)``: ``id`` is a stable string kept across
    optimizer steps and saved in records (a fresh one when None). On an autodiff device a
    Param whose flag is set is a leaf that requires grad, so ``param.grad(grads)`` works;
    one whose flag is unset is detached."""

    __slots__ = ("_param_id", "_require_grad_flag")

    def __new__(cls, tensor, *, id: str | None = None, require_grad: bool = True):
        t = _as_tensor(tensor)
        flag = bool(require_grad)
        return _new_param(cls, t, new_param_id() if id is None else str(id), flag)

    def __init__(self, tensor=None, *, id=None, require_grad=True):  # noqa: A002
        pass  # everything happens in __new__ (Tensor.__init__ must not run)

    # -- identity -------------------------------------------------------------------------
    @property
    def id(self) -> str:  # type: ignore[override]
        """The stable param id (a str). The autodiff leaf id is ``param.leaf_id()``."""
        return self._param_id

    def leaf_id(self):
        """The autodiff leaf id of this param's tensor (None off an autodiff device)."""
        return Tensor.id(self)

    @property
    def require_grad_flag(self) -> bool:
        return self._require_grad_flag

    @property
    def is_buffer(self) -> bool:
        return not self._require_grad_flag

    @property
    def tensor(self) -> Tensor:
        """The value as a plain Tensor (same storage, same autodiff leaf)."""
        return wrap(self._prim, self._device, self._shape, self._dtype)

    val = tensor  # Burn's name

    # -- new params -----------------------------------------------------------------------
    def with_tensor(self, tensor) -> "Param":
        """A new Param with this id and flag holding ``tensor`` (made a leaf that requires
        grad on an autodiff device iff the flag is set)."""
        cls = type(self)
        if cls.__new__ is Param.__new__ and cls.__init__ is Param.__init__:
            # what the constructor does, without its call (optimizers run this per param)
            return _new_param(cls, tensor, self._param_id, self._require_grad_flag)
        return cls(tensor, id=self._param_id, require_grad=self._require_grad_flag)

    def with_require_grad(self, flag: bool) -> "Param":
        """The same values and id with the require-grad flag set to ``flag``."""
        return type(self)(self.tensor, id=self._param_id, require_grad=flag)

    def to_device(self, device) -> "Param":
        """This param on ``device`` (same id and flag)."""
        return self.with_tensor(self.tensor.to_device(device))

    # -- values: copy, pickle, display ---------------------------------------------------
    def __copy__(self):
        p = object.__new__(type(self))
        p._prim, p._device, p._shape, p._dtype = self._prim, self._device, self._shape, self._dtype
        p._param_id, p._require_grad_flag = self._param_id, self._require_grad_flag
        return p

    def __deepcopy__(self, memo):
        # storage is immutable, so it is shared; a tracked leaf becomes a fresh leaf, so the
        # copy's gradients never mix with the original's
        t = self.tensor
        if t.id() is not None:
            t = t.detach().require_grad()
        p = object.__new__(type(self))
        p._prim, p._device, p._shape, p._dtype = t._prim, t._device, t._shape, t._dtype
        p._param_id, p._require_grad_flag = self._param_id, self._require_grad_flag
        return p

    def __reduce__(self):
        return (_rebuild_param, (type(self), self.tensor, self._param_id,
                                 self._require_grad_flag))

    def __repr__(self):
        body = Tensor.__repr__(self)
        if body.startswith("Tensor("):
            body = body[len("Tensor("):]
        else:  # pragma: no cover - display format changed
            body = body + ")"
        flag = "" if self._require_grad_flag else "require_grad=False, "
        return f"Param(id={self._param_id!r}, {flag}{body}"

    def describe(self) -> str:
        """One line: shape, dtype, and flag (used by module reprs)."""
        flag = "" if self._require_grad_flag else ", require_grad=False"
        return f"Param(shape={list(self._shape)}, dtype={self._dtype.short}{flag})"


def _new_param(cls, tensor, pid: str, flag: bool) -> Param:
    """A ``cls`` Param with id ``pid`` and flag ``flag`` holding ``tensor``."""
    t = tensor if isinstance(tensor, Tensor) else _as_tensor(tensor)
    if t._device.backend.is_autodiff:
        t = t.require_grad() if flag else t.detach()
    p = object.__new__(cls)
    p._prim, p._device, p._shape, p._dtype = t._prim, t._device, t._shape, t._dtype
    p._param_id = pid
    p._require_grad_flag = flag
    return p


def _rebuild_param(cls, tensor, pid, flag):
    return cls(tensor, id=pid, require_grad=flag)
