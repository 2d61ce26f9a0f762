"""Linear algebra ops: batched matrix multiplication.

``matmul`` takes operands of at least 2 dims, ``(..., n, k) @ (..., k, m) -> (..., n, m)``,
and broadcasts the batch dims like NumPy. 1-d operands (vector-matrix, matrix-vector, dot)
are reshaped around it by the Tensor API. Both inputs arrive promoted to one dtype.

Its attrs ``ta`` and ``tb`` (default False) read an operand's last two dims transposed, as
cuBLAS's transpose flags (and ``tf.matmul``'s) do: ``matmul(g, w, tb=True)`` is ``g @ w^T``
without a ``permute`` op. The derivative is written with them -- on a host-bound training
step every view op costs a trip through each backend layer, and a linear layer's two
gradients took four (the weight's transpose, the input's, and the rows flattened).
"""
from __future__ import annotations

import numpy as np

from .. import dtype as dt
from ..errors import DTypeError, ShapeError
from ._api import apply_op
from .registry import declare
from .rules import broadcast_shapes, numel, require_kind


def check_inner(op: str, sa: tuple, sb: tuple, ka: int, kb: int) -> None:
    """The contracted dims ``ka`` (of ``sa``) and ``kb`` (of ``sb``) must agree."""
    if ka != kb:
        raise ShapeError(f"{op}: inner dims do not match: {tuple(sa)} @ {tuple(sb)} contracts "
                         f"{ka} with {kb}; the last dim of the first operand must equal the "
                         f"{'first' if len(sb) == 1 else 'second-to-last'} dim of the second")


def _matmul_infer(a, b, ta=False, tb=False):
    sa, sb = a._shape, b._shape
    if len(sa) < 2 or len(sb) < 2:
        raise ShapeError(f"matmul: the primitive needs operands of at least 2 dims, got "
                         f"{sa} and {sb}")
    d = a._dtype
    if d.kind != "float" and d.kind != "int":
        require_kind("matmul", d, "float int")
    if ta is not False or tb is not False:
        return _transposed_infer(sa, sb, ta, tb, d)
    if sa[-1] != sb[-2]:
        check_inner("matmul", sa, sb, sa[-1], sb[-2])
    ba, bb = sa[:-2], sb[:-2]
    batch = ba if ba == bb else broadcast_shapes("matmul", ba, bb)
    return (batch + (sa[-2], sb[-1]), d)


def _transposed_infer(sa, sb, ta, tb, d):
    for name, v in (("ta", ta), ("tb", tb)):
        if type(v) is not bool:
            raise DTypeError(f"matmul: {name} (read that operand transposed) must be a bool, "
                             f"got {type(v).__name__} {v!r}")
    n, ka = (sa[-1], sa[-2]) if ta else (sa[-2], sa[-1])
    kb, m = (sb[-1], sb[-2]) if tb else (sb[-2], sb[-1])
    if ka != kb:
        raise ShapeError(f"matmul: inner dims do not match: {tuple(sa)}{'^T' if ta else ''} @ "
                         f"{tuple(sb)}{'^T' if tb else ''} contracts {ka} with {kb}")
    ba, bb = sa[:-2], sb[:-2]
    batch = ba if ba == bb else broadcast_shapes("matmul", ba, bb)
    return (batch + (n, m), d)


_F32 = np.dtype(np.float32)
_HALF = (np.dtype(np.float16), dt.bfloat16.np)


def _matmul_numpy(a, b, *, ta=False, tb=False, xp=np):
    if ta:
        a = xp.swapaxes(a, -1, -2)
    if tb:
        b = xp.swapaxes(b, -1, -2)
    # f16/bf16: accumulate in f32 (as tensor cores and PyTorch do), round once at the end.
    if a.dtype in _HALF:
        return xp.matmul(a.astype(_F32), b.astype(_F32)).astype(a.dtype)
    return xp.matmul(a, b)


def matmul_t(a, b, ta=False, tb=False):
    """``a @ b`` with an operand read transposed (the flags: no permute op), for derivative
    rules."""
    return apply_op(MATMUL, (a, b), {"ta": ta, "tb": tb} if ta or tb else {})


def _flat(t):
    """``t``'s rows as one matrix: ``[..., k] -> [prod(...), k]`` (the shape given whole:
    reshape's fast path)."""
    s = t._shape
    return t.reshape((numel(s[:-1]), s[-1]))


def _matmul_vjp(g, inputs, out, needs, ta=False, tb=False):
    """``out = A @ B`` with ``A = a^T`` where ``ta`` (``B`` likewise): ``dA = g @ B^T``,
    ``dB = A^T @ g``, each a product with transpose flags, transposed back for an operand
    read transposed. Batch dims of the gradients keep the broadcast shape; the engine sums
    them back. Only wanted gradients are computed: each is a matmul as large as the forward
    one."""
    a, b = inputs
    ga = gb = None
    if needs[0]:
        ga = matmul_t(b, g, tb, True) if ta else matmul_t(g, b, False, not tb)
    if needs[1]:
        if not ta and len(b._shape) == 2 and len(a._shape) > 2:
            # one matrix b for the whole batch (a linear layer on [batch, seq, d]): its
            # gradient sums a_i^T g_i over the batch, which is one product over all the
            # rows -- one large matmul instead of a batch of small ones and a sum after it
            gb = matmul_t(_flat(g), _flat(a), True, False) if tb else \
                matmul_t(_flat(a), _flat(g), True, False)
        else:
            gb = matmul_t(g, a, True, ta) if tb else matmul_t(a, g, not ta, False)
    return ga, gb


MATMUL = declare(
    "matmul", "matmul", nin=2, infer=_matmul_infer, numpy=_matmul_numpy, vjp=_matmul_vjp,
    promote="same", vjp_needs=True, attrs=("ta", "tb"),
    doc="batched matrix product (..., n, k) @ (..., k, m) with broadcast batch dims, an "
        "operand's last two dims read transposed where ta / tb (default False); float and "
        "int dtypes (ints wrap around)")
