"""Conformance cases of the loss primitives: `cross_entropy_rows` (per-row cross entropy of
logits and int classes, with ignore_index) and its backward, against float64 references
written here (log-sum-exp per row, softmax minus one-hot)."""
from __future__ import annotations

import numpy as np

from tests.conformance.harness import Case, Input
from tests.conformance.specs_nn import P

IGNORE = -100


def _targets(rng, shape):
    """Classes 0..3 with one ignored row (when there are rows)."""
    t = rng.integers(0, 4, size=shape)
    if t.size > 1:
        t.reshape(-1)[1] = IGNORE
    return t


TARGET = Input(_targets, dtype="i64", differentiable=False)


def _ref_rows(x, t):
    m = x.max(1, keepdims=True) if x.shape[1] else np.zeros((x.shape[0], 1))
    lse = np.log(np.exp(x - m).sum(1)) + m[:, 0]
    valid = t != IGNORE
    picked = np.take_along_axis(x, np.where(valid, t, 0)[:, None], 1)[:, 0]
    return [np.where(valid, lse - picked, 0.0), valid.astype(np.float64)]


def _ref_backward(g, x, t):
    p = np.exp(x - x.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    valid = t != IGNORE
    p[np.arange(len(t)), np.where(valid, t, 0)] -= 1.0
    return p * np.where(valid, g, 0.0)[:, None]


def _rows(x, t):
    return P("cross_entropy_rows", x, t, ignore_index=IGNORE)


def _rows_loss(x, t):
    """The first output only (the differentiable one), for the gradient check."""
    return _rows(x, t)[0]


CASES = [
    Case("cross_entropy_rows", ("cross_entropy_rows",), _rows, _ref_rows,
         [((5, 4), (5,)), ((1, 4), (1,)), ((0, 4), (0,)), ((3, 6), (3,))],
         inputs=(Input(), TARGET), grad=False),
    Case("cross_entropy_rows_grad", ("cross_entropy_rows",), _rows_loss,
         lambda x, t: _ref_rows(x, t)[0], [((4, 4), (4,)), ((2, 5), (2,))],
         inputs=(Input(), TARGET)),
    Case("cross_entropy_rows_large_logits", ("cross_entropy_rows",), _rows_loss,
         lambda x, t: _ref_rows(x, t)[0], [((3, 4), (3,))],
         inputs=(Input("uniform", low=-300.0, high=300.0), TARGET), grad=False,
         layouts=False),
    Case("cross_entropy_rows_backward", ("cross_entropy_rows_backward",),
         lambda g, x, t: P("cross_entropy_rows_backward", g, x, t, ignore_index=IGNORE),
         _ref_backward, [((5,), (5, 4), (5,)), ((1,), (1, 4), (1,)), ((0,), (0, 4), (0,))],
         inputs=(Input(), Input(), TARGET)),
]
