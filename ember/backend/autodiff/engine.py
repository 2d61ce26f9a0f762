"""The backward pass: walks a graph in reverse topological order, calling each op's
derivative rule from the registry, and returns the leaves' gradients.

Gradients are ember tensors on the *inner* device (plain NdArray under Autodiff(NdArray)):
the backward pass itself records nothing. A gradient a rule returns in a broadcast shape is
summed back to its input's shape and cast to its dtype; gradients of an input used several
times add up. Every node visited is released, so the graph can only be walked once.
"""
from __future__ import annotations

from operator import attrgetter

from ...errors import AutodiffError
from .gradients import Gradients
from .graph import ADPrim

_FREED = ("backward: the graph behind this tensor was already freed by an earlier "
          "backward() ({what}); gradients flow through a graph once. Run the forward pass "
          "again to build a new graph")
_seq = attrgetter("seq")


def _toposort(root):
    """Interior nodes reachable from ``root``, newest first: each after every node that reads
    it (nodes are numbered as they are recorded, and an op's inputs are recorded before it).
    Leaves are not included (their gradients are the result)."""
    if root.prims is None:
        raise AutodiffError(_FREED.format(what=f"the root is the output of {root.op.name}"))
    order, seen = [root], {root}
    for node in order:              # grows while it is walked: every reachable node once
        for p in node.prims:
            if type(p) is not ADPrim:
                continue
            parent = p.node
            if parent is None or parent.is_leaf or parent in seen:
                continue
            if parent.prims is None:
                raise AutodiffError(_FREED.format(
                    what=f"an input of {node.op.name} is the output of {parent.op.name}"))
            seen.add(parent)
            order.append(parent)
    order.sort(key=_seq, reverse=True)
    return order


def _fit(op, g, shape, sum_to_shape):
    """``g`` summed back to ``shape`` when ``shape`` broadcasts to it (and broadcast up when a
    rule returned a smaller gradient); anything else is a bug in ``op``'s derivative."""
    gs = g._shape
    lead = len(gs) - len(shape)
    if lead >= 0:
        # the common case: only leading dims and size-1 dims of ``shape`` were broadcast
        for i, s in enumerate(shape):
            if s != 1 and s != gs[lead + i]:
                break
        else:
            return sum_to_shape(g, shape)
    n = max(len(gs), len(shape))
    a = (1,) * (n - len(gs)) + tuple(gs)
    b = (1,) * (n - len(shape)) + tuple(shape)
    if any(x != y and x != 1 and y != 1 for x, y in zip(a, b)):
        raise AutodiffError(f"backward: the derivative of {op.name} gave a gradient of shape "
                            f"{gs} for an input of shape {shape}; they must broadcast")
    if len(gs) < len(shape) or any(x == 1 and y != 1 for x, y in zip(a, b)):
        g = g.expand(tuple(max(x, y) for x, y in zip(a, b)))
    return sum_to_shape(g, shape)


_api = None


def _tensor_api():
    """(wrap, sum_to_shape, create, FULL) from the Tensor API and the registry, imported
    once (they sit above us)."""
    global _api
    if _api is None:
        from ...ops.creation import FULL
        from ...tensor.dispatch import create, wrap
        from ...tensor.functional import sum_to_shape
        _api = (wrap, sum_to_shape, create, FULL)
    return _api


def _seed(meta, inner):
    """The root's gradient: ones of its shape and (float) dtype on the inner device."""
    _, _, create, full = _api or _tensor_api()
    return create(full, inner, {"shape": meta[0], "value": 1.0, "dtype": meta[1]})


def _untracked(meta):
    """The error of backward() from a tensor that no graph leads to."""
    if not meta[1].is_float:
        why = (f"its dtype {meta[1].short} is not a float dtype, and only float results "
               f"are differentiated")
    else:
        why = "no input on its path requires grad (call .require_grad() on the parameters)"
    return AutodiffError(f"backward: the tensor of shape {meta[0]} is not tracked: {why}")


def _input_grads(node, g, inner, wrap):
    """The gradients ``node``'s derivative rule gives its inputs from the output's ``g``."""
    op, prims, m = node.op, node.prims, node.meta
    if op.vjp_uses_inputs:
        ins = tuple([wrap(p.inner, inner, p.meta[0], p.meta[1]) if type(p) is ADPrim else p
                     for p in prims])
    else:                          # (values not kept: `Op.vjp_uses_inputs`)
        ins = tuple([None if type(p) is ADPrim else p for p in prims])
    if node.out is None:           # (the rule does not read it: `Op.vjp_uses_out`)
        out = None
    elif op.nout == 1:
        out = wrap(node.out, inner, m[0], m[1])
    else:
        out = tuple([wrap(o, inner, mo[0], mo[1]) for o, mo in zip(node.out, m)])
    if op.vjp_needs:
        needs = tuple([type(p) is ADPrim and p.node is not None for p in prims])
        in_grads = op.vjp(g, ins, out, needs=needs, **node.attrs)
    else:
        in_grads = op.vjp(g, ins, out, **node.attrs)
    if len(in_grads) != len(prims):
        raise AutodiffError(f"backward: the derivative rule of {op.name} returned "
                            f"{len(in_grads)} gradients for {len(prims)} inputs")
    return in_grads


def backward(root_prim, meta, device) -> Gradients:
    wrap, sum_to_shape, _, _ = _api or _tensor_api()
    root = root_prim.node
    if root is None:
        raise _untracked(meta)
    inner = device.inner
    if root.is_leaf:
        return Gradients({root.id: _seed(meta, inner)})
    order = _toposort(root)
    grads = {root: _seed(meta, inner)}   # interior node -> the gradient of its output
    result = {}                          # leaf id -> its gradient
    for node in order:
        g = grads.pop(node, None)
        if g is None:                    # no path from the root gives this node a gradient
            node.release()
            continue
        prims = node.prims
        in_grads = _input_grads(node, g, inner, wrap)
        op = node.op
        node.release()
        for p, gi in zip(prims, in_grads):
            if gi is None or type(p) is not ADPrim:
                continue
            parent = p.node
            if parent is None:
                continue
            shape, dtype = p.meta
            if gi._shape != shape:
                gi = _fit(op, gi, shape, sum_to_shape)
            if gi._dtype is not dtype:
                gi = gi.cast(dtype)
            if parent.is_leaf:
                key, into = parent.id, result
            else:
                key, into = parent, grads
            prev = into.get(key)
            # a gradient with one contributor is used as it is; more are added up
            into[key] = gi if prev is None else prev + gi
    # the gradients are about to be read (an optimizer step reads them one parameter at a
    # time): a lazy inner backend computes all of them in one flush, where each read would
    # flush its own (Fusion(Cuda): ~70 flushes a GPT step)
    inner.backend.flush(inner)
    return Gradients(result)
