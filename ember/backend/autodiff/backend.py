"""Autodiff(inner): runs ops on ``inner`` and records, for tracked inputs, a graph node."""
from __future__ import annotations

from ...errors import AutodiffError
from ..base import Backend
from . import grad_mode
from .graph import LeafNode, Node


class ADPrim:
    """An autodiff primitive: the inner backend's primitive, its graph node (None when not
    tracked) and its meta (shape, dtype), which derivative rules need."""

    __slots__ = ("inner", "node", "meta")

    def __init__(self, inner, node, meta):
        self.inner = inner
        self.node = node
        self.meta = meta


_state = grad_mode._state


class Autodiff(Backend):
    is_autodiff = True

    def __init__(self, inner: Backend):
        if inner.is_autodiff:
            raise AutodiffError(f"Autodiff: {inner.describe()} already tracks gradients")
        super().__init__()
        self.inner = inner
        self.kind = inner.kind

    def describe(self):
        return f"autodiff({self.inner.describe()})"

    @property
    def name(self):
        return self.describe()

    def execute(self, op, prims, attrs, meta, device):
        inner_prims = tuple(p.inner if type(p) is ADPrim else p for p in prims)
        out = self.inner.execute(op, inner_prims, attrs, meta, device.inner)
        tracked = False
        if op.vjp is not None and getattr(_state, "enabled", True):
            for p in prims:
                if type(p) is ADPrim and p.node is not None:
                    tracked = True
                    break
        if op.nout == 1:
            if not tracked:
                return ADPrim(out, None, meta)
            node = Node(op, tuple(p.node if type(p) is ADPrim else None for p in prims),
                        inner_prims, tuple(p.meta if type(p) is ADPrim else None for p in prims),
                        out, meta, attrs)
            return ADPrim(out, node, meta)
        node = None
        if tracked:
            node = Node(op, tuple(p.node if type(p) is ADPrim else None for p in prims),
                        inner_prims, tuple(p.meta if type(p) is ADPrim else None for p in prims),
                        out, meta, attrs)
        return tuple(ADPrim(o, node if i == 0 else None, m)
                     for i, (o, m) in enumerate(zip(out, meta)))

    # -- data -----------------------------------------------------------------------------
    def from_numpy(self, array, device):
        from ...dtype import from_numpy
        prim = self.inner.from_numpy(array, device.inner)
        return ADPrim(prim, None, (tuple(array.shape), from_numpy(array.dtype)))

    def wrap_inner(self, prim, meta):
        return ADPrim(prim, None, meta)

    def to_numpy(self, prim):
        return self.inner.to_numpy(prim.inner)

    def native(self, prim):
        return self.inner.native(prim.inner)

    def dlpack_source(self, prim):
        return self.inner.dlpack_source(prim.inner)

    def from_dlpack(self, obj, device):
        raise NotImplementedError  # handled by wrapping the inner result (see tensor.interop)

    def seed(self, device, seed):
        self.inner.seed(device.inner, seed)

    def sync(self, device):
        self.inner.sync(device.inner)

    # -- autodiff -------------------------------------------------------------------------
    def require_grad(self, prim, meta):
        if prim.node is not None and prim.node.is_leaf:
            return prim
        if not meta[1].is_float:
            raise AutodiffError(f"require_grad: only float tensors can require grad, "
                                f"got {meta[1].short}")
        return ADPrim(prim.inner, LeafNode(meta), meta)

    def detach(self, prim):
        return ADPrim(prim.inner, None, prim.meta) if prim.node is not None else prim

    def is_tracked(self, prim):
        return prim.node is not None

    def leaf_id(self, prim):
        node = prim.node
        return node.id if node is not None and node.is_leaf else None

    def unwrap(self, prim):
        return prim.inner

    def backward(self, prim, meta, device):
        from .engine import backward
        return backward(prim, meta, device)
