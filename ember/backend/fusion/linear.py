"""`linear` (``x @ weight + bias``, ember/ops/linear.py) under Fusion: its two primitives run
as the Tensor API issued them before it was one op -- the product on the inner backend (an
op fusion cannot hold), the bias add recorded like any elementwise op, so it fuses with what
follows -- without the Tensor API's trip through the decomposition (`Fusion._decomposed`:
the inputs wrapped as Tensors, each op dispatched again), which cost a linear layer about as
much as the op it saves in the backward pass. What the primitive is for is its derivative,
one ``linear_backward`` op."""
from __future__ import annotations

from ...ops.registry import OPS as _REGISTRY

#: the ops this module runs (`Fusion._classify`'s kind SPLIT), unless the inner backend
#: lists them in ``fused_ops``
OPS = frozenset({"linear"})

_MATMUL, _ADD = _REGISTRY["matmul"], _REGISTRY["add"]
_EMPTY: dict = {}


def run(execute, prims, attrs, meta, device):
    """``linear``'s output through ``execute(op, prims, attrs, meta, device)`` (the Fusion
    backend's op path)."""
    out = execute(_MATMUL, (prims[0], prims[1]), _EMPTY, meta, device)
    if attrs["has_bias"]:
        out = execute(_ADD, (out, prims[2]), _EMPTY, meta, device)
    return out
