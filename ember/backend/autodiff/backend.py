"""Autodiff(inner): runs ops on ``inner`` and records, for tracked inputs, a graph node.

The hot path (`Autodiff.execute`) does the least it can per op: unwrap the inputs, run the
inner op, and only when an input is tracked, the op is differentiable, the output is a float
and grad mode is on, build one `Node` that keeps the input primitives tuple as it came, and
the output and the input values only where the op's derivative rule reads them
(`Op.vjp_uses_out`, `Op.vjp_uses_inputs`; else the inputs' graph edges and metas alone).
"""
from __future__ import annotations

from ...dtype import from_numpy as _dtype_of
from ...errors import AutodiffError
from ..base import Backend
from .engine import backward as _backward
from .grad_mode import ACTIVE as _ACTIVE, _state
from .graph import ADPrim, LeafNode, Node


def _edges(prims) -> tuple:
    """``prims`` as a node of a rule that does not read its inputs keeps them: the graph edges
    and metas, without the values (`Op.vjp_uses_inputs`)."""
    return tuple([ADPrim(None, p.node, p.meta) if type(p) is ADPrim else p for p in prims])


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
        dev = device.inner
        n = len(prims)
        if n == 2:
            a, b = prims
            if type(a) is ADPrim:
                if type(b) is ADPrim:
                    out = dev._execute(op, (a.inner, b.inner), attrs, meta, dev)
                    track = a.node is not None or b.node is not None
                else:
                    out = dev._execute(op, (a.inner, b), attrs, meta, dev)
                    track = a.node is not None
            elif type(b) is ADPrim:
                out = dev._execute(op, (a, b.inner), attrs, meta, dev)
                track = b.node is not None
            else:
                out = dev._execute(op, prims, attrs, meta, dev)
                track = False
        elif n == 1 and type(prims[0]) is ADPrim:
            a = prims[0]
            out = dev._execute(op, (a.inner,), attrs, meta, dev)
            track = a.node is not None
        else:
            track = False
            inner = []
            for p in prims:
                if type(p) is ADPrim:
                    inner.append(p.inner)
                    if p.node is not None:
                        track = True
                else:
                    inner.append(p)
            out = dev._execute(op, tuple(inner), attrs, meta, dev)
        if op.nout == 1:
            if track and op.vjp is not None and meta[1].is_float and \
                    (_ACTIVE[0] == 0 or getattr(_state, "enabled", True)):
                return ADPrim(out, Node(op, prims if op.vjp_uses_inputs else _edges(prims),
                                        out if op.vjp_uses_out else None, meta, attrs), meta)
            return ADPrim(out, None, meta)
        node = None
        if track and op.vjp is not None and meta[0][1].is_float and \
                (_ACTIVE[0] == 0 or getattr(_state, "enabled", True)):
            node = Node(op, prims if op.vjp_uses_inputs else _edges(prims),
                        out if op.vjp_uses_out else None, meta, attrs)
        res = [ADPrim(o, None, m) for o, m in zip(out, meta)]
        res[0].node = node
        return tuple(res)

    # -- data -----------------------------------------------------------------------------
    def from_numpy(self, array, device):
        prim = self.inner.from_numpy(array, device.inner)
        return ADPrim(prim, None, (tuple(array.shape), _dtype_of(array.dtype)))

    def wrap_inner(self, prim, meta):
        """An untracked autodiff primitive around an inner one."""
        return ADPrim(prim, None, meta)

    def to_numpy(self, prim):
        return self.inner.to_numpy(prim.inner)

    def native(self, prim):
        return self.inner.native(prim.inner)

    def dlpack_source(self, prim):
        return self.inner.dlpack_source(prim.inner)

    def from_dlpack(self, obj, device):
        prim = self.inner.from_dlpack(obj, device.inner)
        return ADPrim(prim, None, (tuple(prim.shape), _dtype_of(prim.dtype)))

    def seed(self, device, seed):
        self.inner.seed(device.inner, seed)

    def sync(self, device):
        self.inner.sync(device.inner)

    def flush(self, device):
        self.inner.flush(device.inner)

    # -- autodiff -------------------------------------------------------------------------
    def require_grad(self, prim, meta):
        if prim.node is not None and prim.node.is_leaf:
            return prim
        if not meta[1].is_float:
            raise AutodiffError(f"require_grad: only float tensors can require grad, got a "
                                f"tensor of shape {meta[0]} and dtype {meta[1].short}; "
                                f"cast it first (e.g. x.float())")
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
        return _backward(prim, meta, device)
