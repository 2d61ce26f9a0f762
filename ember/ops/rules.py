"""Shape and dtype rules shared by the op declarations: broadcasting, dims, kinds.

Every check raises an ``ember.errors`` exception naming the op and what would be valid;
these are the only places such checks are written.
"""
from __future__ import annotations

from .. import dtype as dt
from ..errors import DTypeError, IndexError_, ShapeError


def broadcast_shapes(op: str, a: tuple, b: tuple) -> tuple:
    """NumPy broadcasting of two shapes, or a ShapeError naming the first dim that clashes."""
    if a == b:
        return a
    na, nb = len(a), len(b)
    n = max(na, nb)
    out = []
    for i in range(n):
        x = a[i - n + na] if i - n + na >= 0 else 1
        y = b[i - n + nb] if i - n + nb >= 0 else 1
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            raise ShapeError(
                f"{op}: shapes {tuple(a)} and {tuple(b)} do not broadcast: dim {i} of the "
                f"broadcast result is {x} vs {y}; sizes must match or one of them be 1")
    return tuple(out)


def broadcast_many(op: str, shapes) -> tuple:
    out = ()
    for s in shapes:
        out = broadcast_shapes(op, out, s)
    return out


def canonical_dim(op: str, dim: int, ndim: int, *, extra: int = 0) -> int:
    """``dim`` in ``[-ndim-extra, ndim+extra)`` as a non-negative int."""
    n = ndim + extra
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise DTypeError(f"{op}: dim must be an int, got {type(dim).__name__} {dim!r}")
    if n == 0 and dim in (0, -1):
        return 0
    if dim < -n or dim >= n:
        lo, hi = -max(n, 1), max(n, 1) - 1
        raise IndexError_(f"{op}: dim {dim} is out of range for a tensor of {ndim} dims; "
                          f"valid: {lo}..{hi}")
    return dim + n if dim < 0 else dim


def canonical_dims(op: str, dims, ndim: int) -> tuple:
    """A sorted tuple of distinct non-negative dims; ``None`` means all dims."""
    if dims is None:
        return tuple(range(ndim))
    if isinstance(dims, int):
        dims = (dims,)
    out = tuple(sorted({canonical_dim(op, d, ndim) for d in dims}))
    if len(out) != len(tuple(dims)):
        raise ShapeError(f"{op}: dims {tuple(dims)} repeat a dim")
    return out


def require_kind(op: str, dtype, kinds: str, what: str = "input") -> None:
    """Raise DTypeError unless ``dtype.kind`` is one of ``kinds`` (a space-separated list)."""
    if dtype.kind not in kinds:
        want = {"float": "a float tensor (f64, f32, f16, bf16)",
                "int": "an int tensor (i64, i32, i16, i8, u8)",
                "bool": "a bool tensor",
                "int bool": "an int or bool tensor",
                "float int": "a float or int tensor",
                }.get(kinds, f"a tensor of kind {kinds}")
        hint = " (cast it first, e.g. x.float())" if kinds == "float" else ""
        raise DTypeError(f"{op}: expects {want} as {what}, got {dtype.short}{hint}")


def numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def check_shape(op: str, shape) -> tuple:
    """A shape as a tuple of non-negative ints."""
    if isinstance(shape, int):
        shape = (shape,)
    try:
        shape = tuple(int(s) for s in shape)
    except TypeError:
        raise ShapeError(f"{op}: shape must be a sequence of ints, got {shape!r}") from None
    if any(s < 0 for s in shape):
        raise ShapeError(f"{op}: shape {shape} has a negative size; sizes must be >= 0")
    return shape


def same_dtype(op: str, a, b):
    if a is not b:
        raise DTypeError(f"{op}: inputs must share a dtype, got {a.short} and {b.short}")
    return a


DEFAULT_FLOAT = dt.DEFAULT_FLOAT
