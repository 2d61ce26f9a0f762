"""A NumPy reference evaluator of kernels: the semantics every renderer must reproduce.

``evaluate(kernel, inputs, args)`` runs an `Elementwise` or `Reduce` kernel on NumPy arrays,
vectorized over the whole iteration space, each expression node computed once (memoized).
It is the executable definition of the IR's semantics; the C renderer is tested against it.

Inputs
------
One NumPy array per `BufferView` of the kernel, of the view's dtype. The view's strides (in
elements, possibly 0 or negative) and offset index the array's memory starting from its data
pointer (its first element), regardless of the array's own strides; every element the view
touches must lie within the array's memory (checked, `IndexError` otherwise).

Compute types and rounding
--------------------------
f16/bf16 values are loaded into f32 and every node computes in f32 (`ir.compute_dtype`);
outputs are rounded back to the storage dtype only when stored (round to nearest even).
An explicit ``Cast(x, f16)``/``Cast(x, bf16)`` node rounds to that type (its value is the
rounded number, carried in f32). f32 arithmetic is done in NumPy float32, so the exactly
rounded operations (add, sub, mul, div, sqrt, conversions) are bit-comparable with C compiled
without fast-math and without FMA contraction (``-ffp-contract=off``). f64 -> bf16 conversion
goes through f32 (as ml_dtypes does).

Operation semantics (the contract for renderers)
------------------------------------------------
* ``neg``/``abs``/``add``/``sub``/``mul`` on ints wrap modulo 2**bits (``abs(INT_MIN) ==
  INT_MIN``); on floats they are IEEE.
* ``sqrt`` of a negative float is NaN. ``floor``/``ceil``/``trunc``/``rint`` are the identity
  on ints; ``rint`` rounds half to even.
* ``lnot``: ``x == 0`` (-> bool). ``bnot``: bitwise not on ints, logical not on bool.
* ``div``: true IEEE division on floats; on ints truncation toward zero, ``x / 0 == 0``,
  ``INT_MIN / -1 == INT_MIN`` (wraps).
* ``rem``: C ``fmod`` on floats (sign of the dividend; ``x % 0`` and ``inf % y`` are NaN);
  on ints C ``%`` (sign of the dividend), ``x % 0 == 0``, ``INT_MIN % -1 == 0``.
* ``max(a, b) = (a > b || a != a) ? a : b`` and ``min(a, b) = (a < b || a != a) ? a : b``:
  NaN-propagating; on equal operands (``+0``/``-0``) the second operand.
* comparisons are IEEE (any NaN -> False, except ``ne`` -> True).
* ``and``/``or``/``xor``: bitwise on ints, logical on bool.
* ``shl``/``shr``: the count is the second operand (same dtype). A count outside
  ``[0, bits)`` gives 0 (``shl``; ``shr`` of unsigned) or the sign fill (``shr`` of signed:
  0 or -1); ``shr`` is arithmetic for signed types; ``shl`` wraps.
* ``Select(c, a, b)``: ``c ? a : b`` (c is bool).
* ``Fma(a, b, c)`` (f32): ``a * b + c`` rounded once, as C ``fmaf`` (see `fma_f32`).
* ``Cast``: to bool is ``x != 0`` (NaN -> True); from bool 0/1; int -> int wraps modulo
  2**bits; int/float -> float rounds to nearest even; float -> int truncates toward zero,
  NaN -> 0, values beyond the int64 range saturate to the int64 limits, then the int64 value
  wraps to the target type (so ``-1.0 -> u8`` is 255, ``300.0 -> i8`` is 44, ``inf -> i32``
  is -1: C renderers write ``(T)(int64_t)sat64(x)``).
* ``Bitcast``: the same bits (NumPy ``.view``); an f16/bf16 operand is its rounded storage
  value's bits, an f16/bf16 result is widened to f32.
* ``Index(d)``: the position along iteration dim ``d`` (i64).
* `Reduce`: the prologue is evaluated over the full shape and combined along ``axis`` in its
  compute dtype (f16/bf16 sum in f32; ints wrap): ``sum``/``prod``/``max``/``min`` starting
  from the identity (0, 1, -inf/INT_MIN, +inf/INT_MAX; an empty axis gives the identity);
  max/min propagate NaN. bool prologues support ``max`` (any) and ``min`` (all). The
  epilogue is evaluated over the output shape (``axis`` set to 1, ``Index(axis) == 0``, loads
  at the kept positions with the reduced coordinate 0), ``Acc`` being the reduced value.
  Float sums here are NumPy's pairwise sums: compare renderers with a tolerance.
"""
from __future__ import annotations

import numpy as np

from .. import dtype as dt
from . import ir

__all__ = ["evaluate", "gather"]

_LOW = (dt.float16, dt.bfloat16)


def _np(d: dt.DType) -> np.dtype:
    return ir.compute_dtype(d).np


def evaluate(kernel, inputs, args=()) -> list:
    """Run ``kernel`` (an `ir.Elementwise` or `ir.Reduce`) on NumPy ``inputs`` (one array per
    BufferView) with runtime scalars ``args``; returns the outputs as new contiguous arrays
    (an `Elementwise` gives one per expression; a `Reduce` one, of ``shape`` with ``axis`` 1)."""
    if not isinstance(kernel, (ir.Elementwise, ir.Reduce)):
        raise TypeError(f"evaluate: not a kernel: {type(kernel).__name__}")
    inputs = list(inputs)
    if len(inputs) != len(kernel.inputs):
        raise ValueError(f"evaluate: the kernel has {len(kernel.inputs)} input views, "
                         f"got {len(inputs)} arrays")
    args = list(args)
    with np.errstate(all="ignore"):
        if isinstance(kernel, ir.Elementwise):
            return _elementwise(kernel, inputs, args)
        if isinstance(kernel, ir.Reduce):
            return [_reduce(kernel, inputs, args)]
    raise TypeError(f"evaluate: not a kernel: {type(kernel).__name__}")


def _elementwise(k, inputs, args):
    shape = tuple(int(s) for s in k.shape)
    ctx = _Ctx(shape, k.inputs, inputs, args, None, None)
    outs = []
    for e, od in zip(k.exprs, k.out_dtypes, strict=True):
        outs.append(_store(ctx.eval(e), e, od, shape))
    return outs


def _store(v, e, od, shape):
    if _np(e.dtype) != _np(od):
        raise TypeError(f"evaluate: an expression of dtype {e.dtype.short} cannot be stored "
                        f"as {od.short} (compute dtypes differ; add a Cast)")
    v = np.broadcast_to(v, shape)
    return np.ascontiguousarray(v.astype(od.np, copy=True))


def _reduce(k, inputs, args):
    shape = tuple(int(s) for s in k.shape)
    axis = k.axis
    if not 0 <= axis < len(shape):
        raise ValueError(f"evaluate: reduce axis {axis} out of range for shape {shape}")
    ctx = _Ctx(shape, k.inputs, inputs, args, None, None)
    p = np.broadcast_to(ctx.eval(k.prologue), shape)
    pd = ir.compute_dtype(k.prologue.dtype)
    acc = _combine(p, axis, k.op, pd)
    out_shape = shape[:axis] + (1,) + shape[axis + 1:]
    ectx = _Ctx(out_shape, k.inputs, inputs, args, acc, pd)
    return _store(ectx.eval(k.epilogue), k.epilogue, k.out_dtype, out_shape)


def _combine(p, axis, op, d):
    if op not in ir.REDUCE_OPS:
        raise ValueError(f"evaluate: unknown reduce op {op!r}; valid: {sorted(ir.REDUCE_OPS)}")
    if d is dt.bool_:
        if op == "max":
            return np.logical_or.reduce(p, axis=axis, keepdims=True)
        if op == "min":
            return np.logical_and.reduce(p, axis=axis, keepdims=True)
        raise TypeError(f"evaluate: reduce {op} of a bool prologue; cast it first")
    npd = d.np
    if op == "sum":
        return np.add.reduce(p, axis=axis, dtype=npd, keepdims=True)
    if op == "prod":
        return np.multiply.reduce(p, axis=axis, dtype=npd, keepdims=True)
    if d.is_float:
        ident = -np.inf if op == "max" else np.inf
    else:
        info = np.iinfo(npd)
        ident = info.min if op == "max" else info.max
    f = np.maximum if op == "max" else np.minimum   # NumPy's reductions propagate NaN
    return f.reduce(p, axis=axis, keepdims=True, initial=npd.type(ident))


# -- loads ---------------------------------------------------------------------------------
def gather(arr: np.ndarray, view: ir.BufferView, shape) -> np.ndarray:
    """The elements ``view`` maps the iteration ``shape`` to, from ``arr``'s memory (element
    strides/offset from its data pointer), as a new array of ``shape`` in the view's dtype."""
    shape = tuple(int(s) for s in shape)
    if arr.dtype != view.dtype.np:
        raise TypeError(f"evaluate: input of dtype {arr.dtype} for a view of dtype "
                        f"{view.dtype.short}")
    if len(view.strides) != len(shape):
        raise ValueError(f"evaluate: view strides {view.strides} do not match the iteration "
                         f"shape {shape}")
    if 0 in shape:
        return np.empty(shape, arr.dtype)
    item = arr.itemsize
    lo = hi = int(view.offset)
    for s, n in zip(view.strides, shape):
        ext = int(s) * (n - 1)
        if ext < 0:
            lo += ext
        else:
            hi += ext
    blo, bhi = np.lib.array_utils.byte_bounds(arr)
    base = arr.__array_interface__["data"][0]
    if base + lo * item < blo or base + (hi + 1) * item > bhi:
        raise IndexError(f"evaluate: a view (strides {view.strides}, offset {view.offset}) "
                         f"over shape {shape} reads elements {lo}..{hi}, outside the input's "
                         f"memory ({(blo - base) // item}..{(bhi - base) // item - 1})")
    # A 1-d window of the array's memory covering [lo, hi], then a strided view of it.
    flat = np.lib.stride_tricks.as_strided(arr, shape=(1,), strides=(item,))
    if lo < 0:
        win = np.lib.stride_tricks.as_strided(flat, shape=(-lo + 1,), strides=(-item,))[::-1]
    else:
        win = np.lib.stride_tricks.as_strided(flat, shape=(hi + 1,), strides=(item,))[lo:]
    # win[0] is element `lo`; the view's origin is element `offset`.
    start = int(view.offset) - lo
    origin = np.lib.stride_tricks.as_strided(win, shape=(start + 1,), strides=(item,))[start:]
    out = np.lib.stride_tricks.as_strided(origin, shape=shape,
                                          strides=tuple(int(s) * item for s in view.strides),
                                          writeable=False)
    return np.array(out, copy=True)


# -- expressions ---------------------------------------------------------------------------
def _key(e, ids):
    """A flat structural key (children by their interned ints): nodes compare by value
    and ``0.0 == -0.0`` in Python, so constants are keyed by their repr too."""
    if isinstance(e, ir.Const):
        return ("const", repr(e.value), type(e.value), e.dtype)
    ch = ir.children(e)
    if not ch:
        return e
    fields = tuple(getattr(e, f) for f in e.__dataclass_fields__
                   if not isinstance(getattr(e, f), ir.Expr))
    return (type(e), fields) + tuple(ids[id(c)] for c in ch)


class _Ctx:
    """Evaluates expressions over one iteration space; values are broadcastable arrays,
    each distinct node (by structure) computed once."""

    def __init__(self, shape, views, inputs, args, acc, acc_dtype):
        self.shape = shape
        self.views = views
        self.inputs = inputs
        self.args = args
        self.acc = acc
        self.acc_dtype = acc_dtype
        self.intern = {}    # structural key -> int
        self.memo = {}      # int -> value
        self.ids = {}       # id(node) -> int
        self.keep = []      # the nodes seen, so their id()s stay theirs

    def eval(self, e):
        memo, ids = self.memo, self.ids
        stack = [(e, False)]
        while stack:
            node, done = stack.pop()
            if done:
                if id(node) not in ids:
                    key = _key(node, ids)
                    n = self.intern.get(key)
                    if n is None:
                        n = self.intern[key] = len(self.intern)
                        memo[n] = self._node(node)
                    ids[id(node)] = n
                    self.keep.append(node)
                continue
            if id(node) in ids:
                continue
            stack.append((node, True))
            for c in ir.children(node):
                stack.append((c, False))
        return memo[ids[id(e)]]

    def _v(self, e):
        return self.memo[self.ids[id(e)]]

    def _node(self, e):
        v = self._v
        if isinstance(e, ir.Const):
            return _const(e.value, e.dtype)
        if isinstance(e, ir.Arg):
            if e.index >= len(self.args):
                raise ValueError(f"evaluate: Arg({e.index}) but {len(self.args)} args given")
            return _const(self.args[e.index], e.dtype)
        if isinstance(e, ir.Load):
            view = self.views[e.buffer]
            if view.dtype is not e.dtype:
                raise TypeError(f"evaluate: Load({e.buffer}) of dtype {e.dtype.short} from a "
                                f"view of dtype {view.dtype.short}")
            x = gather(self.inputs[e.buffer], view, self.shape)
            return x.astype(_np(e.dtype)) if e.dtype in _LOW else x
        if isinstance(e, ir.Index):
            n = len(self.shape)
            if not 0 <= e.dim < n:
                raise ValueError(f"evaluate: Index({e.dim}) in a {n}-d iteration space")
            sh = [1] * n
            sh[e.dim] = self.shape[e.dim]
            return np.arange(self.shape[e.dim], dtype=np.int64).reshape(sh).astype(_np(e.dtype))
        if isinstance(e, ir.Acc):
            if self.acc is None:
                raise ValueError("evaluate: Acc outside a reduction's epilogue")
            return self.acc.astype(_np(e.dtype), copy=False)
        if isinstance(e, ir.Unary):
            return _unary(e.op, v(e.x), ir.compute_dtype(e.dtype))
        if isinstance(e, ir.Binary):
            return _binary(e.op, v(e.a), v(e.b), ir.compute_dtype(e.a.dtype),
                           ir.compute_dtype(e.dtype))
        if isinstance(e, ir.Select):
            return np.where(v(e.cond).astype(bool, copy=False), v(e.a),
                            v(e.b)).astype(_np(e.dtype), copy=False)
        if isinstance(e, ir.Fma):
            return fma_f32(v(e.a), v(e.b), v(e.c))
        if isinstance(e, ir.Cast):
            return _cast(v(e.x), e.dtype)
        if isinstance(e, ir.Bitcast):
            return _bitcast(v(e.x), e.x.dtype, e.dtype)
        raise TypeError(f"evaluate: unknown expression node {type(e).__name__}")


def _const(v, d):
    d = ir.compute_dtype(d)
    if d.is_bool:
        return np.array(bool(v))
    if d.is_int:
        info = np.iinfo(d.np)
        iv = int(v)
        if not info.min <= iv <= info.max:
            iv = ((iv - info.min) % (1 << (8 * d.itemsize))) + info.min
        return np.array(iv, d.np)
    return np.array(v, np.float64).astype(d.np) if not isinstance(v, np.ndarray) \
        else v.astype(d.np)


def _unary(op, x, d):
    npd = d.np
    if op == "neg":
        return np.negative(x, dtype=npd) if not d.is_bool else np.logical_not(x)
    if op == "abs":
        return np.abs(x).astype(npd, copy=False)
    if op == "sqrt":
        return np.sqrt(x, dtype=npd)
    if op in ("floor", "ceil", "trunc", "rint"):
        if not d.is_float:
            return x.astype(npd, copy=False)
        return getattr(np, op)(x, dtype=npd)
    if op == "lnot":
        return np.equal(x, 0)
    if op == "bnot":
        return np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)
    raise ValueError(f"evaluate: unknown unary op {op!r}; valid: {sorted(ir.UNARY_OPS)}")


_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
        "gt": np.greater, "ge": np.greater_equal}


def fma_f32(a, b, c) -> np.ndarray:
    """``a * b + c`` of f32 values with one rounding, in NumPy: the product is exact in f64
    (24 + 24 bits); the sum is rounded to odd in f64 (to nearest, then, when inexact, to
    the neighbour with an odd last bit), which then rounds to f32 exactly as one rounding
    of the exact value would (53 >= 24 + 2 bits)."""
    a64, b64, c64 = (np.asarray(x, np.float32).astype(np.float64) for x in (a, b, c))
    with np.errstate(all="ignore"):
        p = a64 * b64
        s = np.asarray(p + c64)
        # the rounding error of s (two-sum: exact)
        bv = s - p
        err = (p - (s - bv)) + (c64 - bv)
        even = (s.view(np.int64) & 1) == 0
        fix = (err != 0) & np.isfinite(s) & even
        if np.any(fix):
            s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
        return np.asarray(s).astype(np.float32)


def _binary(op, a, b, ad, d):
    npd = ad.np
    if op in _CMP:
        return _CMP[op](a, b)
    if op in ("add", "sub", "mul"):
        f = {"add": np.add, "sub": np.subtract, "mul": np.multiply}[op]
        if ad.is_bool:
            raise TypeError(f"evaluate: {op} of bool operands")
        return f(a, b, dtype=npd)
    if op == "div":
        if ad.is_float:
            return np.divide(a, b, dtype=npd)
        return _int_div(a, b, npd)
    if op == "rem":
        if ad.is_float:
            return np.fmod(a, b, dtype=npd)
        zero = b == 0
        r = np.fmod(a, np.where(zero, 1, b).astype(npd), dtype=npd)
        return np.where(zero, 0, r).astype(npd)
    if op in ("max", "min"):
        if ad.is_float:
            take_a = (a > b) if op == "max" else (a < b)
            take_a = take_a | (a != a)
            return np.where(take_a, a, b).astype(npd, copy=False)
        return (np.maximum if op == "max" else np.minimum)(a, b).astype(npd, copy=False)
    if op in ("and", "or", "xor"):
        f = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op]
        return f(a, b).astype(npd, copy=False)
    if op in ("shl", "shr"):
        bits = 8 * np.dtype(npd).itemsize
        ok = (b >= 0) & (b < bits)
        cnt = np.where(ok, b, 0).astype(npd)
        if op == "shl":
            return np.where(ok, np.left_shift(a, cnt, dtype=npd), 0).astype(npd)
        r = np.right_shift(a, cnt, dtype=npd)
        fill = np.where(a < 0, -1, 0) if ad.signed else 0
        return np.where(ok, r, fill).astype(npd)
    raise ValueError(f"evaluate: unknown binary op {op!r}; valid: {sorted(ir.BINARY_OPS)}")


def _int_div(a, b, npd):
    zero = b == 0
    bs = np.where(zero, 1, b).astype(npd)
    q = np.floor_divide(a, bs, dtype=npd)           # floor; INT_MIN // -1 wraps to INT_MIN
    r = np.subtract(a, np.multiply(q, bs, dtype=npd), dtype=npd)
    fix = (r != 0) & ((a < 0) != (bs < 0))          # floor != trunc: signs differ, inexact
    q = np.where(fix, q + np.array(1, npd), q).astype(npd)
    return np.where(zero, 0, q).astype(npd)


def _cast(x, d):
    x = np.asarray(x)
    if d.is_bool:
        return x != 0
    if x.dtype == np.bool_:
        return x.astype(_np(d))
    if d.is_float:
        if d in _LOW:   # round to the narrow type, carry the value in f32
            return x.astype(d.np).astype(np.float32)
        return x.astype(d.np)
    # -> int
    if x.dtype.kind == "f":
        t = np.trunc(x.astype(np.float64))
        t = np.where(np.isnan(t), 0.0, t)
        big = t >= 2.0 ** 63
        small = t < -2.0 ** 63
        i = np.where(big | small, 0.0, t).astype(np.int64)
        i = np.where(big, np.iinfo(np.int64).max, np.where(small, np.iinfo(np.int64).min, i))
        return i.astype(np.int64).astype(d.np)
    return x.astype(d.np)


def _bitcast(x, src, d):
    x = np.asarray(x)
    if src in _LOW:
        x = x.astype(src.np)
    else:
        x = x.astype(_np(src), copy=False)
    v = np.ascontiguousarray(x).view(d.np)
    return v.astype(np.float32) if d in _LOW else v
