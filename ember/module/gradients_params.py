"""`GradientsParams`: gradients keyed by param id, what optimizers take (Burn's name)."""
from __future__ import annotations

from ..errors import ShapeError
from ..tensor import Tensor
from .param import Param


def _key(param_or_id) -> str:
    return param_or_id.id if isinstance(param_or_id, Param) else str(param_or_id)


class GradientsParams:
    """A mapping ``param.id -> gradient Tensor`` (gradients live on the inner, non-autodiff
    device). Build one with ``GradientsParams.from_grads(loss.backward(), model)``."""

    __slots__ = ("_grads",)

    def __init__(self, grads: dict | None = None):
        self._grads: dict[str, Tensor] = {}
        for k, v in (grads or {}).items():
            self.register(k, v)

    @classmethod
    def from_grads(cls, grads, module) -> "GradientsParams":
        """The gradients in ``grads`` (from ``backward()``) of ``module``'s params that
        require grad; params with no gradient (unused, frozen, buffers) are left out."""
        out = cls()
        into = out._grads
        for p in module.parameters():
            if not p._require_grad_flag or not p._device.backend.is_autodiff:
                continue
            g = p.grad(grads)
            if g is not None:
                into[p._param_id] = g
        return out

    @classmethod
    def from_params(cls, pairs) -> "GradientsParams":
        """From ``(param_or_id, gradient)`` pairs (e.g. hand-made gradients)."""
        out = cls()
        for k, g in pairs:
            out.register(k, g)
        return out

    def register(self, param_or_id, grad: Tensor) -> None:
        """Set the gradient of a param (or param id)."""
        if not isinstance(grad, Tensor):
            raise TypeError(f"GradientsParams.register: the gradient of {_key(param_or_id)!r} "
                            f"must be a Tensor, got {type(grad).__name__}")
        if isinstance(param_or_id, Param) and tuple(grad.shape) != tuple(param_or_id.shape):
            raise ShapeError(f"GradientsParams.register: gradient shape {list(grad.shape)} "
                             f"does not match param {param_or_id.id!r} of shape "
                             f"{list(param_or_id.shape)}")
        self._grads[_key(param_or_id)] = grad

    def get(self, param_or_id, default=None):
        """The gradient of a param (or param id), or ``default``."""
        return self._grads.get(_key(param_or_id), default)

    def remove(self, param_or_id):
        """Remove and return the gradient of a param (or param id), None if absent."""
        return self._grads.pop(_key(param_or_id), None)

    def items(self):
        return self._grads.items()

    def keys(self):
        return self._grads.keys()

    def values(self):
        return self._grads.values()

    def to_device(self, device) -> "GradientsParams":
        """A new GradientsParams with every gradient on ``device``."""
        out = type(self)()
        out._grads = {k: g.to_device(device) for k, g in self._grads.items()}
        return out

    def __iter__(self):
        return iter(self._grads)

    def __len__(self):
        return len(self._grads)

    def __contains__(self, param_or_id):
        return _key(param_or_id) in self._grads

    def __getitem__(self, param_or_id):
        return self._grads[_key(param_or_id)]

    def __repr__(self):
        return f"GradientsParams({len(self._grads)} params)"
