"""Primitives and graph nodes of the Autodiff decorator.

A node holds what its op's derivative needs: the op, the input primitives as they were passed
(`ADPrim`s, which carry the inner primitive, the parent node and the shape/dtype, or Python
scalars; without the inner values where the rule does not read them), the output (where the
rule reads it) and the static args. Nothing else is copied per op. Backward releases
all of it, so a graph lives exactly as long as its tensors, and a second backward through a
released graph is an error rather than a silent zero.
"""
from __future__ import annotations

import gc
import itertools

_leaf_ids = itertools.count(1)
#: nodes are numbered as they are recorded: an op's inputs are always recorded before it, so
#: the numbers order any graph topologically (backward walks them newest first)
_node_seq = itertools.count()


class ADPrim:
    """An autodiff primitive: the inner backend's primitive, its graph node (None when not
    tracked) and its meta ``(shape, dtype)``, which derivative rules need."""

    __slots__ = ("inner", "node", "meta")

    def __init__(self, inner, node, meta):
        self.inner = inner
        self.node = node
        self.meta = meta


class Node:
    """One recorded op. ``prims`` is None once backward has released the node."""

    __slots__ = ("op", "prims", "out", "meta", "attrs", "seq")
    is_leaf = False

    def __init__(self, op, prims, out, meta, attrs):
        self.seq = next(_node_seq)
        self.op = op
        self.prims = prims   # the op's inputs: ADPrim (tensors; inner None where the rule
        #                      does not read them: Op.vjp_uses_inputs) or Python scalars
        self.out = out       # inner primitive, a tuple of them for several outputs, or None
        #                      where the derivative rule does not read it (Op.vjp_uses_out)
        self.meta = meta     # (shape, dtype) of the output, a list of them for several
        self.attrs = attrs

    @property
    def freed(self) -> bool:
        return self.prims is None

    @property
    def parents(self) -> tuple:
        """One node (or None, for untracked inputs and scalars) per input."""
        return tuple(p.node if type(p) is ADPrim else None for p in self.prims)

    def release(self):
        self.prims = self.out = self.attrs = None

    def __repr__(self):
        state = "freed" if self.prims is None else f"{len(self.prims)} inputs"
        return f"<Node {self.op.name} ({state})>"


class LeafNode:
    """A tensor that requires grad; its ``id`` keys its gradient in `Gradients`."""

    __slots__ = ("id", "meta")
    is_leaf = True
    freed = False

    def __init__(self, meta, id=None):
        self.id = next(_leaf_ids) if id is None else id
        self.meta = meta

    def __repr__(self):
        return f"<LeafNode id={self.id} shape={self.meta[0]} dtype={self.meta[1].short}>"


def live_nodes() -> int:
    """The number of interior graph nodes alive (not released) in this process, for leak
    tests. Runs a garbage collection first; slow, not for hot paths. Objects frozen
    (`ember.heap`) are counted too: they are unfrozen for the count, then all objects alive
    are frozen again."""
    frozen = gc.get_freeze_count()
    if frozen:
        gc.unfreeze()
    try:
        gc.collect()
        return sum(1 for o in gc.get_objects() if type(o) is Node and o.prims is not None)
    finally:
        if frozen:
            gc.freeze()
