"""View ops: reshape, expand, permute, slicing, flips. They move no values, only index maps,
which is why fusion folds them into index arithmetic."""
from __future__ import annotations

import numpy as np

from .registry import declare
from .rules import numel
from ..errors import ShapeError


def _reshape_infer(x, shape):
    if numel(shape) != numel(x._shape):
        raise ShapeError(f"reshape: cannot reshape {x._shape} ({numel(x._shape)} elements) to "
                         f"{shape} ({numel(shape)} elements); the element counts must match")
    return (shape, x._dtype)


RESHAPE = declare(
    "reshape", "view", nin=1, attrs=("shape",), infer=_reshape_infer,
    numpy=lambda x, shape: np.reshape(x, shape),
    vjp=lambda g, i, o, shape: (g.reshape(i[0]._shape),))


def _expand_infer(x, shape):
    xs = x._shape
    if len(shape) < len(xs):
        raise ShapeError(f"expand: cannot expand {xs} to fewer dims {shape}")
    lead = len(shape) - len(xs)
    for i, s in enumerate(xs):
        if s != 1 and s != shape[lead + i]:
            raise ShapeError(f"expand: cannot expand {xs} to {shape}: dim {lead + i} is "
                             f"{s} vs {shape[lead + i]}; only size-1 dims can grow")
    return (shape, x._dtype)


EXPAND = declare(
    "expand", "view", nin=1, attrs=("shape",), infer=_expand_infer,
    numpy=lambda x, shape: np.broadcast_to(x, shape),
    # the engine sums a broadcast gradient back to the input's shape
    vjp=lambda g, i, o, shape: (g,))
