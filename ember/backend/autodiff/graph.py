"""Graph nodes of the Autodiff decorator.

A node holds what its op's derivative needs (inputs, output, static args) and its parents.
Backward releases all of it, so a graph lives exactly as long as its tensors, and a second
backward through a released graph is an error rather than a silent zero.
"""
from __future__ import annotations

import gc
import itertools

_leaf_ids = itertools.count(1)


class Node:
    __slots__ = ("op", "parents", "inputs", "in_meta", "out", "out_meta", "attrs", "freed")

    def __init__(self, op, parents, inputs, in_meta, out, out_meta, attrs):
        self.op = op
        self.parents = parents      # one Node or None per input
        self.inputs = inputs        # inner primitives (or scalars)
        self.in_meta = in_meta      # (shape, dtype) per input, None for scalars
        self.out = out              # inner primitive, or a tuple for several outputs
        self.out_meta = out_meta
        self.attrs = attrs
        self.freed = False

    is_leaf = False

    def release(self):
        self.parents = self.inputs = self.out = self.attrs = None
        self.freed = True


class LeafNode:
    """A tensor that requires grad; its ``id`` keys its gradient in `Gradients`."""

    __slots__ = ("id", "meta")
    is_leaf = True
    freed = False

    def __init__(self, meta, id=None):
        self.id = next(_leaf_ids) if id is None else id
        self.meta = meta


def live_nodes() -> int:
    """The number of interior graph nodes alive in this process (for leak tests)."""
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is Node and not o.freed)
