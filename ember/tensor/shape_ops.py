"""Shape functions of the Tensor API: reshape, expand, permute and its spellings (swap_dims,
transpose, movedim), flatten, squeeze, unsqueeze, flip, unfold, repeat.

All of them are the view primitives reshape, expand, permute, slice and unfold (flip is a
slice with step -1), so fusion can fold them into index arithmetic.
"""
from __future__ import annotations

from ..errors import DTypeError, ShapeError
from ..ops import view as V
from ..ops.rules import canonical_dim, numel
from .dispatch import unary

__all__ = ["reshape", "expand", "permute", "swap_dims", "transpose", "movedim", "flatten",
           "squeeze", "unsqueeze", "flip", "unfold", "repeat"]


def _resolve_shape(op, x, shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    shape = tuple([int(s) for s in shape])
    if -1 in shape:
        i = shape.index(-1)
        if -1 in shape[i + 1:]:
            raise ShapeError(f"{op}: at most one dim can be -1, got {shape}")
        rest = shape[:i] + shape[i + 1:]
        known = numel(rest)
        total = numel(x._shape)
        if known == 0 or total % known:
            raise ShapeError(f"{op}: cannot reshape {x._shape} ({total} elements) to {shape}")
        shape = shape[:i] + (total // known,) + shape[i + 1:]
    if shape and min(shape) < 0:
        raise ShapeError(f"{op}: shape {shape} has a negative size; valid: sizes >= 0 and "
                         f"one -1")
    return shape


def _dims_arg(dims):
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        return tuple(dims[0])
    return dims


def reshape(x, *shape):
    """``x`` with a new shape of the same element count; one dim may be -1."""
    if len(shape) == 1 and type(shape[0]) is tuple:
        # the common call of derivative rules, ``g.reshape(x._shape)``: a tuple of ints >= 0
        # is already what _resolve_shape would make of it
        s = shape[0]
        for d in s:
            if type(d) is not int or d < 0:
                break
        else:
            return x if s == x._shape else unary(V.RESHAPE, x, {"shape": s})
    shape = _resolve_shape("reshape", x, shape)
    if shape == x._shape:
        return x
    return unary(V.RESHAPE, x, {"shape": shape})


def expand(x, *shape):
    """Broadcast ``x`` to ``shape`` without copying; -1 keeps a dim."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    lead = len(shape) - len(x._shape)
    shape = tuple(x._shape[i - lead] if s == -1 and i >= lead else int(s)
                  for i, s in enumerate(shape))
    if shape == x._shape:
        return x
    return unary(V.EXPAND, x, {"shape": shape})


def permute(x, *dims):
    """The dims of ``x`` reordered: output dim k is input dim ``dims[k]``."""
    dims = _dims_arg(dims)
    n = len(x._shape)
    if len(dims) != n:
        raise ShapeError(f"permute: got {len(dims)} dims {tuple(dims)} for a tensor of {n} "
                         f"dims (shape {x._shape})")
    dims = tuple(canonical_dim("permute", d, n) for d in dims)
    if dims == tuple(range(n)):
        return x
    return unary(V.PERMUTE, x, {"dims": dims})


def swap_dims(x, dim0: int, dim1: int):
    """``x`` with dims ``dim0`` and ``dim1`` exchanged (Burn's swap_dims)."""
    n = len(x._shape)
    key = (n, dim0, dim1)
    dims = _SWAPS.get(key) if type(dim0) is int and type(dim1) is int else None
    if dims is None:
        a = canonical_dim("swap_dims", dim0, n)
        b = canonical_dim("swap_dims", dim1, n)
        if a == b:
            return x
        dims = list(range(n))
        dims[a], dims[b] = b, a
        dims = tuple(dims)
        if type(dim0) is int and type(dim1) is int and len(_SWAPS) < 4096:
            _SWAPS[key] = dims
    return unary(V.PERMUTE, x, {"dims": dims})


# (ndim, dim0, dim1) -> the permutation of a valid swap of two distinct dims, for exact ints
# only (True == 1 must not find the entry of 1: canonical_dim refuses bools)
_SWAPS: dict = {}


def transpose(x, dim0: int = -2, dim1: int = -1):
    """``swap_dims`` with the last two dims by default; a 0-d or 1-d tensor is returned as is."""
    if len(x._shape) < 2 and dim0 == -2 and dim1 == -1:
        return x
    return swap_dims(x, dim0, dim1)


def movedim(x, source, destination):
    """Move dim(s) ``source`` to position(s) ``destination``; the rest keep their order."""
    n = len(x._shape)
    src = (source,) if isinstance(source, int) else tuple(source)
    dst = (destination,) if isinstance(destination, int) else tuple(destination)
    if len(src) != len(dst):
        raise ShapeError(f"movedim: {len(src)} source dims {src} but {len(dst)} destination "
                         f"dims {dst}")
    src = tuple(canonical_dim("movedim", d, n) for d in src)
    dst = tuple(canonical_dim("movedim", d, n) for d in dst)
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ShapeError(f"movedim: repeated dims in source {src} or destination {dst}")
    order = [None] * n
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(d for d in range(n) if d not in src)
    dims = tuple(o if o is not None else next(rest) for o in order)
    if dims == tuple(range(n)):
        return x
    return unary(V.PERMUTE, x, {"dims": dims})


def flatten(x, start_dim: int = 0, end_dim: int = -1):
    """Dims ``start_dim..end_dim`` (inclusive) merged into one; a 0-d tensor becomes 1-d."""
    s = x._shape
    if not s:
        canonical_dim("flatten", start_dim, 0)
        canonical_dim("flatten", end_dim, 0)
        return unary(V.RESHAPE, x, {"shape": (1,)})
    a = canonical_dim("flatten", start_dim, len(s))
    b = canonical_dim("flatten", end_dim, len(s))
    if a > b:
        raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} for "
                         f"shape {s}")
    return reshape(x, s[:a] + (numel(s[a:b + 1]),) + s[b + 1:])


def squeeze(x, dim=None):
    """``x`` without size-1 dims: all of them, or those of ``dim`` (an int or a tuple) that
    have size 1 (like PyTorch, a named dim of another size is left alone)."""
    s = x._shape
    if dim is None:
        shape = tuple(n for n in s if n != 1)
    else:
        dims = (dim,) if isinstance(dim, int) else tuple(dim)
        drop = {canonical_dim("squeeze", d, len(s)) for d in dims}
        shape = tuple(n for i, n in enumerate(s) if i not in drop or n != 1)
    return reshape(x, shape)


def unsqueeze(x, dim: int):
    """``x`` with a new size-1 dim at ``dim`` (which may be ``ndim`` or negative)."""
    s = x._shape
    d = canonical_dim("unsqueeze", dim, len(s), extra=1)
    return unary(V.RESHAPE, x, {"shape": s[:d] + (1,) + s[d:]})


def flip(x, dims):
    """``x`` reversed along ``dims`` (an int or a sequence); a slice with step -1."""
    s = x._shape
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    dims = {canonical_dim("flip", d, len(s)) for d in dims}
    if not dims or not s:
        return x
    slices = tuple((n - 1, -1, -1) if i in dims else (0, n, 1) for i, n in enumerate(s))
    return unary(V.SLICE, x, {"slices": slices})


def unfold(x, dim: int, size: int, step: int):
    """Sliding windows of ``size`` every ``step`` along ``dim``: that dim becomes the number
    of windows and a new last dim of ``size`` holds each window (torch.Tensor.unfold)."""
    if not isinstance(size, int) or not isinstance(step, int):
        raise DTypeError(f"unfold: size and step must be ints, got {size!r} and {step!r}")
    if not x._shape:
        canonical_dim("unfold", dim, 0)
        return unfold(reshape(x, 1), 0, size, step).reshape(size)
    d = canonical_dim("unfold", dim, len(x._shape))
    return unary(V.UNFOLD, x, {"dim": d, "size": size, "step": step})


def repeat(x, *sizes):
    """``x`` tiled ``sizes[i]`` times along each dim (torch.Tensor.repeat); extra leading
    sizes add dims. An expand of interleaved size-1 dims, then a reshape."""
    sizes = _dims_arg(sizes)
    sizes = tuple(int(r) for r in sizes)
    s = x._shape
    if len(sizes) < len(s):
        raise ShapeError(f"repeat: {len(sizes)} repeat counts {sizes} for a tensor of "
                         f"{len(s)} dims; give at least one per dim")
    if any(r < 0 for r in sizes):
        raise ShapeError(f"repeat: repeat counts must be >= 0, got {sizes}")
    s = (1,) * (len(sizes) - len(s)) + s
    inter = []
    big = []
    for r, n in zip(sizes, s):
        inter += [1, n]
        big += [r, n]
    y = reshape(x, tuple(inter))
    y = expand(y, tuple(big))
    return reshape(y, tuple(r * n for r, n in zip(sizes, s)))


class ShapeMethods:
    __slots__ = ()
    reshape = reshape
    view = reshape
    expand = expand
    permute = permute
    swap_dims = swap_dims
    transpose = transpose
    movedim = movedim
    flatten = flatten
    squeeze = squeeze
    unsqueeze = unsqueeze
    flip = flip
    unfold = unfold
    repeat = repeat

    @property
    def T(self):
        """All dims reversed (the matrix transpose for 2-d tensors)."""
        n = len(self._shape)
        return permute(self, tuple(range(n - 1, -1, -1))) if n > 1 else self

    @property
    def mT(self):
        """The last two dims swapped."""
        return swap_dims(self, -2, -1)
