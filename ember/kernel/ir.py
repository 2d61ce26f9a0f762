"""The kernel IR: typed scalar expressions evaluated over an N-d index space.

Small on purpose (tinygrad's lesson): a handful of node kinds carry every elementwise op,
every view folded into index arithmetic, and reductions with their prologue and epilogue.
Renderers (C now; CUDA C and WGSL next) turn a `Kernel` into source; nothing here knows a
target. Nodes are frozen and hashable, so a kernel's structure is a cache key; runtime
scalars are `Arg` placeholders, not constants, so a changed learning rate reuses the kernel.

Expressions
-----------
``Const(value, dtype)``       a literal
``Arg(index, dtype)``         the ``index``-th runtime scalar of the kernel
``Load(buffer, dtype)``       input ``buffer`` at the current position, through its
                              `BufferView` (strides, offset); ``dtype`` is the buffer's
``Index(dim)``                the current position along iteration dim ``dim`` (i64)
``Unary(op, x, dtype)``       op in `UNARY_OPS`
``Binary(op, a, b, dtype)``   op in `BINARY_OPS`; operands share a dtype (comparisons give bool)
``Select(cond, a, b, dtype)`` ``cond ? a : b``
``Fma(a, b, c, dtype)``       ``a * b + c`` rounded once (f32 only: the math library's
                              polynomials; every target has it, and it halves their cost)
``Cast(x, dtype)``            value conversion (float -> int truncates, as in C)
``Bitcast(x, dtype)``         the same bits as another dtype of the same size (math library)
``Acc(dtype)``                inside a reduction's epilogue: the reduced value

Compute types: f16 and bf16 values are loaded into f32 and stored back rounded (as PyTorch
and XLA do on CPUs); every other dtype computes as itself.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from .. import dtype as dt

UNARY_OPS = frozenset({
    "neg", "abs", "sqrt", "floor", "ceil", "trunc", "rint",   # rint: round half to even
    "lnot",                                                      # logical not -> bool
    "bnot",                                                      # bitwise not (ints, bool)
})
BINARY_OPS = frozenset({
    "add", "sub", "mul", "div",       # div: true division for floats, truncating for ints
    "rem",                            # C fmod / % (sign of the dividend)
    "max", "min",                     # NaN-propagating for floats
    "eq", "ne", "lt", "le", "gt", "ge",          # -> bool
    "and", "or", "xor",               # bitwise on ints, logical on bool
    "shl", "shr",                     # ints; shr is arithmetic for signed types
})
REDUCE_OPS = frozenset({"sum", "prod", "max", "min"})


def compute_dtype(d: dt.DType) -> dt.DType:
    """The dtype arithmetic on ``d`` values is done in (f16/bf16 compute in f32)."""
    return dt.float32 if d is dt.float16 or d is dt.bfloat16 else d


def _node(cls):
    """A frozen, slotted dataclass whose hash is computed once, children first, without
    recursion, and whose equality is linear in the size of the DAGs compared. Expressions
    are DAGs that share subtrees: the default dataclass hash and ``==`` revisit every shared
    subtree on every use, which is exponential in the depth (and recursive)."""
    cls.__annotations__["_h"] = int
    cls._h = field(default=0, init=False, repr=False, compare=False)
    cls = dataclass(frozen=True, slots=True)(cls)
    cls._cmp = tuple(f.name for f in fields(cls) if f.compare)
    cls._tag = cls.__name__
    cls.__hash__ = _hash
    cls.__eq__ = _eq
    return cls


def _hash(self) -> int:
    h = self._h
    if h:
        return h
    stack = [self]
    while stack:
        n = stack[-1]
        if n._h:
            stack.pop()
            continue
        todo = [c for c in children(n) if not c._h]
        if todo:
            stack.extend(todo)
            continue
        stack.pop()
        object.__setattr__(n, "_h", hash((n._tag,) + tuple(getattr(n, f) for f in n._cmp))
                           or 1)
    return self._h


def _eq(self, other):
    """Structural equality; each pair of nodes is compared once (hashes first)."""
    if self is other:
        return True
    if type(other) is not type(self):
        return NotImplemented
    seen = set()
    stack = [(self, other)]
    while stack:
        x, y = stack.pop()
        if x is y:
            continue
        if type(x) is not type(y) or _hash(x) != _hash(y):
            return False
        pair = (id(x), id(y))
        if pair in seen:
            continue
        seen.add(pair)
        for f in x._cmp:
            u, v = getattr(x, f), getattr(y, f)
            if isinstance(u, Expr):
                stack.append((u, v))
            elif u != v:
                return False
    return True


class Expr:
    """Base of the expression nodes; ``dtype`` is the value's (compute) dtype."""
    __slots__ = ()

    # Operator sugar for building expressions in the math library and the op declarations.
    def __add__(self, o): return Binary("add", self, _lift(o, self), self.dtype)
    def __radd__(self, o): return Binary("add", _lift(o, self), self, self.dtype)
    def __sub__(self, o): return Binary("sub", self, _lift(o, self), self.dtype)
    def __rsub__(self, o): return Binary("sub", _lift(o, self), self, self.dtype)
    def __mul__(self, o): return Binary("mul", self, _lift(o, self), self.dtype)
    def __rmul__(self, o): return Binary("mul", _lift(o, self), self, self.dtype)
    def __truediv__(self, o): return Binary("div", self, _lift(o, self), self.dtype)
    def __rtruediv__(self, o): return Binary("div", _lift(o, self), self, self.dtype)
    def __neg__(self): return Unary("neg", self, self.dtype)


def _lift(v, like: Expr) -> Expr:
    return v if isinstance(v, Expr) else Const(v, like.dtype)


@_node
class Const(Expr):
    """A literal. Compared by its exact value: ``-0.0`` is not ``0.0``, and a nan literal
    equals itself (so caches keyed by expressions stay exact)."""
    value: float | int | bool = field(compare=False)
    dtype: dt.DType
    key: tuple = field(init=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "key", (type(self.value).__name__, repr(self.value)))


@_node
class Arg(Expr):
    index: int
    dtype: dt.DType


@_node
class Load(Expr):
    buffer: int
    dtype: dt.DType          # the buffer's storage dtype; renderers widen f16/bf16


@_node
class Index(Expr):
    dim: int
    dtype: dt.DType = dt.int64


@_node
class Unary(Expr):
    op: str
    x: Expr
    dtype: dt.DType


@_node
class Binary(Expr):
    op: str
    a: Expr
    b: Expr
    dtype: dt.DType


@_node
class Select(Expr):
    cond: Expr
    a: Expr
    b: Expr
    dtype: dt.DType


@_node
class Fma(Expr):
    a: Expr
    b: Expr
    c: Expr
    dtype: dt.DType


@_node
class Cast(Expr):
    x: Expr
    dtype: dt.DType


@_node
class Bitcast(Expr):
    x: Expr
    dtype: dt.DType


@_node
class Acc(Expr):
    dtype: dt.DType


# -- buffers and kernels --------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class BufferView:
    """How an input buffer maps the iteration space to its elements: one stride per
    iteration dim (0 where the input is broadcast; negative for flipped dims) and an offset,
    both in elements. View ops (permute, expand, slice with steps, flip, compatible reshapes)
    fold into these numbers instead of moving data."""
    dtype: dt.DType
    strides: tuple
    offset: int = 0


@dataclass(frozen=True, slots=True)
class Elementwise:
    """``outputs[k][i] = exprs[k]`` for every position ``i`` of ``shape`` (outputs are
    contiguous, row-major, of the dtypes given)."""
    shape: tuple
    inputs: tuple            # BufferView per Load buffer index
    exprs: tuple             # one Expr per output
    out_dtypes: tuple
    args: tuple = ()         # DType of each runtime scalar (Arg index)


@dataclass(frozen=True, slots=True)
class Reduce:
    """A reduction over ``axis`` of the iteration space ``shape``: per position, ``prologue``
    (an Expr of loads) is combined with ``op`` starting from the op's identity; then
    ``epilogue`` (an Expr that may use ``Acc`` and loads indexed at the kept positions, the
    reduced axis at 0) gives the output, of shape ``shape`` with ``axis`` set to 1.

    ``broadcast=True`` (reduce-then-broadcast: softmax, layer norm): the epilogue is
    evaluated at *every* position of ``shape`` -- its loads indexed at that position, ``Acc``
    the reduced value of the position's row -- and the output has the full ``shape``. A
    renderer reduces each row, then sweeps the row again writing the epilogue."""
    shape: tuple
    axis: int
    inputs: tuple
    prologue: Expr
    op: str
    epilogue: Expr
    out_dtype: dt.DType
    args: tuple = ()
    broadcast: bool = False


Kernel = Elementwise | Reduce


# -- small helpers for building expressions -------------------------------------------------
def const(v, d: dt.DType) -> Const:
    return Const(v, compute_dtype(d))


def select(cond: Expr, a: Expr, b: Expr) -> Select:
    return Select(cond, a, b, a.dtype)


def cmp(op: str, a: Expr, b) -> Binary:
    return Binary(op, a, _lift(b, a), dt.bool_)


def maximum(a: Expr, b) -> Binary:
    return Binary("max", a, _lift(b, a), a.dtype)


def minimum(a: Expr, b) -> Binary:
    return Binary("min", a, _lift(b, a), a.dtype)


def fma(a: Expr, b, c) -> Fma:
    """``a * b + c`` with one rounding, of f32 operands."""
    b, c = _lift(b, a), _lift(c, a)
    if not (a.dtype is b.dtype is c.dtype is dt.float32):
        raise TypeError(f"fma: f32 operands only, got {a.dtype.short}, {b.dtype.short}, "
                        f"{c.dtype.short}")
    return Fma(a, b, c, dt.float32)


def unary(op: str, x: Expr) -> Unary:
    return Unary(op, x, dt.bool_ if op == "lnot" else x.dtype)


def cast(x: Expr, d: dt.DType) -> Expr:
    """``x`` converted to ``d``, as an expression of ``d``'s compute dtype. To f16/bf16 the
    value is rounded to that type (``Cast(Cast(x, d), f32)``, as NumPy's ``astype`` rounds),
    unless ``x`` already holds a ``d`` value (see `holds`): then it is only widened."""
    c = compute_dtype(d)
    if c is d:
        return x if x.dtype is d else Cast(x, d)
    if holds(x, d):
        return x if x.dtype is c else Cast(x, c)
    if x.dtype is not compute_dtype(x.dtype):
        x = Cast(x, compute_dtype(x.dtype))     # another narrow type: its value, widened
    return Cast(Cast(x, d), c)


def holds(x: Expr, d: dt.DType) -> bool:
    """Whether ``x``'s value is known to be a value of the f16/bf16 type ``d``: a load of a
    ``d`` buffer, a rounding ``Cast`` or ``Bitcast`` to ``d``, or the widening of one. (Other
    nodes typed ``d`` compute in f32 and are not rounded until stored.)"""
    if isinstance(x, Cast) and x.dtype is dt.float32 and x.x.dtype is d:
        x = x.x
    return x.dtype is d and isinstance(x, (Load, Cast, Bitcast))


def bitcast(x: Expr, d: dt.DType) -> Bitcast:
    if x.dtype.itemsize != d.itemsize:
        raise TypeError(f"bitcast: {x.dtype.short} and {d.short} differ in size")
    return Bitcast(x, d)


def walk(e: Expr):
    """Every node of an expression, children first, each once."""
    seen, out, stack = set(), [], [(e, False)]
    while stack:
        node, done = stack.pop()
        if done:
            out.append(node)
            continue
        if node in seen:
            continue
        seen.add(node)
        stack.append((node, True))
        for child in children(node):
            stack.append((child, False))
    return out


def children(e: Expr) -> tuple:
    if isinstance(e, (Unary, Cast, Bitcast)):
        return (e.x,)
    if isinstance(e, Binary):
        return (e.a, e.b)
    if isinstance(e, Select):
        return (e.cond, e.a, e.b)
    if isinstance(e, Fma):
        return (e.a, e.b, e.c)
    return ()
