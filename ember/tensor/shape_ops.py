"""Shape functions of the Tensor API: reshape, expand, permute, cat, ..."""
from __future__ import annotations

from ..errors import ShapeError
from ..ops import view as V
from ..ops.rules import numel
from .dispatch import unary


def _resolve_shape(op, x, shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    shape = tuple(int(s) for s in shape)
    if shape.count(-1) > 1:
        raise ShapeError(f"{op}: at most one dim can be -1, got {shape}")
    if -1 in shape:
        known = numel(s for s in shape if s != -1)
        total = numel(x._shape)
        if known == 0 or total % known:
            raise ShapeError(f"{op}: cannot reshape {x._shape} ({total} elements) to {shape}")
        shape = tuple(total // known if s == -1 else s for s in shape)
    if any(s < 0 for s in shape):
        raise ShapeError(f"{op}: shape {shape} has a negative size; valid: sizes >= 0 and "
                         f"one -1")
    return shape


def reshape(x, *shape):
    """``x`` with a new shape of the same element count; one dim may be -1."""
    shape = _resolve_shape("reshape", x, shape)
    if shape == x._shape:
        return x
    return unary(V.RESHAPE, x, {"shape": shape})


def expand(x, *shape):
    """Broadcast ``x`` to ``shape`` without copying; -1 keeps a dim."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    lead = len(shape) - len(x._shape)
    shape = tuple(x._shape[i - lead] if s == -1 and i >= lead else int(s)
                  for i, s in enumerate(shape))
    if shape == x._shape:
        return x
    return unary(V.EXPAND, x, {"shape": shape})


class ShapeMethods:
    __slots__ = ()
    reshape = reshape
    expand = expand
