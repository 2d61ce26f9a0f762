"""Linear algebra ops: batched matrix multiplication.

``matmul`` takes operands of at least 2 dims, ``(..., n, k) @ (..., k, m) -> (..., n, m)``,
and broadcasts the batch dims like NumPy. 1-d operands (vector-matrix, matrix-vector, dot)
are reshaped around it by the Tensor API. Both inputs arrive promoted to one dtype.
"""
from __future__ import annotations

import numpy as np

from .. import dtype as dt
from ..errors import ShapeError
from .registry import declare
from .rules import broadcast_shapes, require_kind


def check_inner(op: str, sa: tuple, sb: tuple, ka: int, kb: int) -> None:
    """The contracted dims ``ka`` (of ``sa``) and ``kb`` (of ``sb``) must agree."""
    if ka != kb:
        raise ShapeError(f"{op}: inner dims do not match: {tuple(sa)} @ {tuple(sb)} contracts "
                         f"{ka} with {kb}; the last dim of the first operand must equal the "
                         f"{'first' if len(sb) == 1 else 'second-to-last'} dim of the second")


def _matmul_infer(a, b):
    sa, sb = a._shape, b._shape
    if len(sa) < 2 or len(sb) < 2:
        raise ShapeError(f"matmul: the primitive needs operands of at least 2 dims, got "
                         f"{sa} and {sb}")
    d = a._dtype
    if d.kind != "float" and d.kind != "int":
        require_kind("matmul", d, "float int")
    if sa[-1] != sb[-2]:
        check_inner("matmul", sa, sb, sa[-1], sb[-2])
    ba, bb = sa[:-2], sb[:-2]
    batch = ba if ba == bb else broadcast_shapes("matmul", ba, bb)
    return (batch + (sa[-2], sb[-1]), d)


_F32 = np.dtype(np.float32)
_HALF = (np.dtype(np.float16), dt.bfloat16.np)


def _matmul_numpy(a, b, *, xp=np):
    # f16/bf16: accumulate in f32 (as tensor cores and PyTorch do), round once at the end.
    if a.dtype in _HALF:
        return xp.matmul(a.astype(_F32), b.astype(_F32)).astype(a.dtype)
    return xp.matmul(a, b)


def _matmul_vjp(g, inputs, out, needs):
    a, b = inputs
    # Batch dims of the gradients keep the broadcast shape; the engine sums them back.
    # Only wanted gradients are computed: each is a matmul as large as the forward one.
    ga = g @ b.swap_dims(-1, -2) if needs[0] else None
    if not needs[1]:
        gb = None
    elif len(b.shape) == 2 and len(a.shape) > 2:
        # one matrix b for the whole batch (a linear layer on [batch, seq, d]): its gradient
        # sums a_i^T g_i over the batch, which is one product over all the rows -- one
        # large matmul instead of a batch of small ones and a sum after it
        gb = a.reshape(-1, a.shape[-1]).swap_dims(0, 1) @ g.reshape(-1, g.shape[-1])
    else:
        gb = a.swap_dims(-1, -2) @ g
    return ga, gb


MATMUL = declare(
    "matmul", "matmul", nin=2, infer=_matmul_infer, numpy=_matmul_numpy, vjp=_matmul_vjp,
    promote="same", vjp_needs=True,
    doc="batched matrix product (..., n, k) @ (..., k, m) with broadcast batch dims; "
        "float and int dtypes (ints wrap around)")
