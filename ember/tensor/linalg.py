"""Linear algebra functions of the Tensor API: matmul (and ``@``), dot, outer, linear."""
from __future__ import annotations

from ..errors import DTypeError, ShapeError
from ..ops import linalg as L
from ..ops import linear as LIN
from . import dispatch
from .dispatch import apply, binary

__all__ = ["matmul", "dot", "outer", "linear"]

_MATMUL = L.MATMUL
_check_inner = L.check_inner


def _require_tensors(op, a, b):
    T = dispatch.Tensor
    if not isinstance(a, T) or not isinstance(b, T):
        raise DTypeError(f"{op}: expects two Tensors, got {type(a).__name__} and "
                         f"{type(b).__name__}")


def matmul(a, b, *, transpose_a: bool = False, transpose_b: bool = False):
    """Matrix product with NumPy/PyTorch semantics: operands of >= 2 dims are batches of
    matrices whose batch dims broadcast; a 1-d first operand is a row vector and a 1-d second
    operand a column vector (the added dim is dropped from the result); two 1-d operands give
    their dot product (0-d). ``transpose_a`` / ``transpose_b`` (as ``tf.matmul``'s) read
    that operand's last two dims transposed -- ``matmul(g, w, transpose_b=True)`` is ``g @
    w.swap_dims(-1, -2)`` as one op; the operand needs at least 2 dims."""
    _require_tensors("matmul", a, b)
    sa, sb = a._shape, b._shape
    na, nb = len(sa), len(sb)
    if transpose_a is not False or transpose_b is not False:
        if na < 2 and transpose_a or nb < 2 and transpose_b:
            raise ShapeError(f"matmul: a transposed operand needs at least 2 dims, got "
                             f"{sa}{' (transpose_a)' if transpose_a else ''} and "
                             f"{sb}{' (transpose_b)' if transpose_b else ''}")
        if na >= 2 and nb >= 2:
            return binary(_MATMUL, a, b, {"ta": transpose_a, "tb": transpose_b})
        if transpose_a:
            a = a.swap_dims(-1, -2)
        if transpose_b:
            b = b.swap_dims(-1, -2)
        return matmul(a, b)
    if na >= 2 and nb >= 2:
        return binary(_MATMUL, a, b)
    if na == 0 or nb == 0:
        raise ShapeError(f"matmul: both operands need at least 1 dim, got {sa} and {sb}; "
                         f"use * to multiply by a scalar")
    if na == 1:
        k = sa[0]
        kb = sb[0] if nb == 1 else sb[-2]
        if k != kb:
            _check_inner("matmul", sa, sb, k, kb)
        if nb == 1:  # dot
            return binary(_MATMUL, a.reshape(1, k), b.reshape(k, 1)).reshape(())
        out = binary(_MATMUL, a.reshape(1, k), b)
        return out.reshape(out._shape[:-2] + out._shape[-1:])
    # na >= 2, nb == 1
    k = sb[0]
    if sa[-1] != k:
        _check_inner("matmul", sa, sb, sa[-1], k)
    out = binary(_MATMUL, a, b.reshape(k, 1))
    return out.reshape(out._shape[:-1])


def dot(a, b):
    """The inner product of two 1-d tensors of equal length (a 0-d tensor)."""
    _require_tensors("dot", a, b)
    if len(a._shape) != 1 or len(b._shape) != 1:
        raise ShapeError(f"dot: expects two 1-d tensors, got shapes {a._shape} and {b._shape}; "
                         f"use matmul for higher dims")
    if a._shape[0] != b._shape[0]:
        raise ShapeError(f"dot: lengths differ: {a._shape} and {b._shape}; they must match")
    k = a._shape[0]
    return binary(_MATMUL, a.reshape(1, k), b.reshape(k, 1)).reshape(())


def outer(a, b):
    """The outer product ``a[i] * b[j]`` of two 1-d tensors, shape ``(len(a), len(b))``."""
    _require_tensors("outer", a, b)
    if len(a._shape) != 1 or len(b._shape) != 1:
        raise ShapeError(f"outer: expects two 1-d tensors, got shapes {a._shape} and "
                         f"{b._shape}")
    return a.reshape(a._shape[0], 1) * b.reshape(1, b._shape[0])


def linear(x, weight, bias=None):
    """``x @ weight + bias`` with ``weight`` of shape ``[in, out]`` (Burn's convention) and
    ``bias`` of shape ``[out]``; ``x`` has shape ``[..., in]``."""
    _require_tensors("linear", x, weight)
    ws = weight._shape
    if len(ws) != 2:
        raise ShapeError(f"linear: weight must be 2-d [in, out], got shape {ws}")
    xs = x._shape
    if not xs or xs[-1] != ws[0]:
        raise ShapeError(f"linear: input {xs} does not fit weight {ws}: the input's last dim "
                         f"must be in_features = {ws[0]}")
    if bias is not None and (not isinstance(bias, dispatch.Tensor) or
                             bias._shape not in ((ws[1],), (1,), ())):
        shape = getattr(bias, "_shape", type(bias).__name__)
        raise ShapeError(f"linear: bias must have shape ({ws[1]},) to match weight {ws}, "
                         f"got {shape}")
    if LIN.fits(x, weight, bias):
        # one op each way (`ember.ops.linear`): under Fusion the forward decomposes as below;
        # the inputs are checked (`fits`), so the op's own check is not run again
        return apply(LIN.LINEAR, (x, weight) if bias is None else (x, weight, bias),
                     {"has_bias": bias is not None}, LIN.out_meta(x, weight))
    out = matmul(x, weight)                 # (1-d inputs, mixed dtypes, a broadcast bias)
    return out + bias if bias is not None else out


class LinalgMethods:
    __slots__ = ()
    matmul = matmul
    dot = dot
    outer = outer

    def __matmul__(self, other):
        return matmul(self, other)

    def __rmatmul__(self, other):
        return matmul(other, self)
