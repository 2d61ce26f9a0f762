"""Cases for the optimizer ops (ember/ops/optim.py): ``adam_update`` against its formula in
float64, on a later step with L2 decay, a first step with decoupled decay (m and v are not
read), and a plain later step; ``adam_update_many`` of two parameters of different shapes
against the same formula per parameter.

On the Fusion stacks (``min_numel=0``) every size runs as the op's decomposition (fused
Tensor ops); the primitive itself runs on the ndarray and cuda stacks (and, below
``min_numel``, on Fusion's inner backend: tests/optim/test_fused_adam.py).
"""
import numpy as np

from ember.ops import OPS
from ember.tensor.dispatch import apply
from tests.conformance.harness import Case, Input

SHAPES = [((5, 7),) * 4, ((),) * 4, ((0, 3),) * 4, ((2, 3, 4),) * 4]
INPUTS = (Input(), Input(), Input(), Input("positive"))   # w, g, m, v (v >= 0)


def _attrs(t, lr=0.05, b1=0.9, b2=0.999, eps=1e-8, l2=0.0, decay=1.0, first=False):
    s2 = (1.0 - b2 ** t) ** 0.5
    return {"beta1": b1, "beta2": b2, "k1": 1.0 - b1, "k2": 1.0 - b2,
            "step": lr * s2 / (1.0 - b1 ** t), "eps": eps * s2, "decay": decay, "l2": l2,
            "first": first}


def _fn(attrs):
    op = OPS["adam_update"]
    return lambda w, g, m, v: apply(op, (w, g, m, v), attrs)


def _ref(a):
    def ref(w, g, m, v):
        if a["l2"]:
            g = g + w * a["l2"]
        if a["first"]:
            m2, v2 = g * a["k1"], g * g * a["k2"]
        else:
            m2 = m * a["beta1"] + g * a["k1"]
            v2 = v * a["beta2"] + g * g * a["k2"]
        w2 = w * a["decay"] - m2 / (np.sqrt(v2) + a["eps"]) * a["step"]
        return w2, m2, v2
    return ref


_L2 = _attrs(4, l2=0.01)
_FIRST = _attrs(1, decay=1.0 - 0.05 * 0.01, first=True)
_PLAIN = _attrs(7, b1=0.8, b2=0.99, eps=1e-3)

def _fn_many(attrs):
    op = OPS["adam_update_many"]
    return lambda *xs: apply(op, xs, attrs)


def _ref_many(a):
    one = _ref(a)

    def ref(*xs):
        k = len(xs) // 4
        out = []
        for i in range(k):
            out += one(xs[i], xs[k + i], xs[2 * k + i], xs[3 * k + i])
        return tuple(out)
    return ref


# w1 w2, g1 g2, m1 m2, v1 v2
MANY_SHAPES = [((5, 7), (3,)) * 4, ((2, 3, 4), ()) * 4]
MANY_INPUTS = (Input(),) * 6 + (Input("positive"),) * 2

CASES = [
    Case("adam_update_l2", "adam_update", _fn(_L2), _ref(_L2), SHAPES, INPUTS, grad=False),
    Case("adam_update_first_decoupled", "adam_update", _fn(_FIRST), _ref(_FIRST), SHAPES[:2],
         INPUTS, grad=False),
    Case("adam_update_plain", "adam_update", _fn(_PLAIN), _ref(_PLAIN), SHAPES[:2], INPUTS,
         grad=False),
    Case("adam_update_many_l2", "adam_update_many", _fn_many(_L2), _ref_many(_L2),
         MANY_SHAPES, MANY_INPUTS, grad=False),
    Case("adam_update_many_first", "adam_update_many", _fn_many(_FIRST), _ref_many(_FIRST),
         MANY_SHAPES[:1], MANY_INPUTS, grad=False),
]
