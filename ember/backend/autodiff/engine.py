"""The backward pass: walks a graph in reverse topological order, calling each op's
derivative rule from the registry, and returns the leaves' gradients."""
from __future__ import annotations

from ...errors import AutodiffError
from .gradients import Gradients


def _toposort(root):
    """Nodes reachable from ``root``, parents before children."""
    order, seen = [], set()
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.freed:
            raise AutodiffError(
                "backward: the graph was already freed by an earlier backward(); run the "
                "forward pass again to build a new graph")
        stack.append((node, True))
        if not node.is_leaf:
            for p in node.parents:
                if p is not None and id(p) not in seen:
                    stack.append((p, False))
    return order


def backward(root_prim, meta, device) -> Gradients:
    from ...tensor.dispatch import wrap
    from ...tensor.functional import ones, sum_to_shape

    root = root_prim.node
    if root is None:
        raise AutodiffError(
            f"backward: the tensor of shape {meta[0]} is not tracked: no input on its path "
            f"requires grad (call .require_grad() on the parameters)")
    inner = device.inner
    order = _toposort(root)
    grads = {id(root): ones(meta[0], dtype=meta[1], device=inner)}
    result = {}
    for node in reversed(order):
        g = grads.pop(id(node), None)
        if node.is_leaf:
            if g is not None:
                result[node.id] = g
            continue
        if g is None:
            node.release()
            continue
        op = node.op
        ins = tuple(x if m is None else wrap(x, inner, m[0], m[1])
                    for x, m in zip(node.inputs, node.in_meta))
        if op.nout == 1:
            out = wrap(node.out, inner, node.out_meta[0], node.out_meta[1])
        else:
            out = tuple(wrap(o, inner, m[0], m[1]) for o, m in zip(node.out, node.out_meta))
        in_grads = op.vjp(g, ins, out, **node.attrs)
        for parent, gi, m in zip(node.parents, in_grads, node.in_meta):
            if parent is None or gi is None:
                continue
            if gi._shape != m[0]:
                gi = sum_to_shape(gi, m[0])
            if gi._dtype is not m[1]:
                gi = gi.cast(m[1])
            prev = grads.get(id(parent))
            grads[id(parent)] = gi if prev is None else prev + gi
        node.release()
    return Gradients(result)
