"""Scalar code shared by the C and the CUDA C renderers.

Both targets are C: the same types, integer wrapping, literals and operator spellings render
an IR expression. What differs is small and named by a `Dialect`: how NaN and infinity are
spelled, and how a libm function is called (``__builtin_sqrtf`` for GCC, ``sqrtf`` for
NVRTC). `ScopeBase` renders an expression DAG statement by statement and `Src` collects the
lines; each renderer keeps only what is its own (loads, stores, half-precision storage,
loops and reductions).
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtype as dt
from . import ir

#: the C type an IR value of each dtype is computed in (f16/bf16 compute in float)
C_TYPE = {dt.float64: "double", dt.float32: "float", dt.float16: "float",
          dt.bfloat16: "float", dt.int64: "int64_t", dt.int32: "int32_t",
          dt.int16: "int16_t", dt.int8: "int8_t", dt.uint8: "uint8_t", dt.bool_: "uint8_t"}
#: the unsigned type of each int dtype's width (wrapping arithmetic)
UNSIGNED = {dt.int64: "uint64_t", dt.int32: "uint32_t", dt.int16: "uint16_t",
            dt.int8: "uint8_t", dt.uint8: "uint8_t", dt.bool_: "uint8_t"}
#: the unsigned type int arithmetic runs in (at least 32 bits: C promotes narrower ones)
WIDE = {dt.int64: "uint64_t", dt.int32: "uint32_t", dt.int16: "uint32_t",
        dt.int8: "uint32_t", dt.uint8: "uint32_t", dt.bool_: "uint32_t"}
#: bytes of each C type the renderers use
SIZE = {"double": 8, "float": 4, "int64_t": 8, "uint64_t": 8, "int32_t": 4, "uint32_t": 4,
        "int16_t": 2, "uint16_t": 2, "int8_t": 1, "uint8_t": 1}
LOW = (dt.float16, dt.bfloat16)
CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def prod(xs) -> int:
    p = 1
    for x in xs:
        p *= int(x)
    return p


def contig(sizes) -> list:
    """Row-major strides (in elements) of ``sizes``."""
    st, acc = [], 1
    for n in reversed(sizes):
        st.append(acc)
        acc *= n
    return st[::-1]


def nodes(exprs) -> list:
    """Every node of the expressions, each once, by identity. (Not `ir.walk`: hashing a
    frozen node hashes its whole subtree, exponential in the depth of a shared DAG.)"""
    seen, out = set(), []
    stack = list(exprs)
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        out.append(e)
        stack.extend(ir.children(e))
    return out


def uses_index(exprs) -> bool:
    return any(isinstance(n, ir.Index) for n in nodes(exprs))


def loads_of(exprs) -> set:
    return {n.buffer for n in nodes(exprs) if isinstance(n, ir.Load)}


def wrap_int(v: int, d: dt.DType) -> int:
    """``v`` wrapped into int dtype ``d``'s range."""
    bits = 8 * d.itemsize
    v = int(v) & ((1 << bits) - 1)
    if d.signed and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def wrapneg(x: str, d: dt.DType) -> str:
    """``-x`` of int dtype ``d``, wrapping (no signed overflow)."""
    return f"(({C_TYPE[d]})({WIDE[d]})(({WIDE[d]})0 - ({WIDE[d]}){x}))"


def int_lit(v: int, d: dt.DType) -> str:
    v = wrap_int(v, d)
    if d is dt.int64:
        if v == -(1 << 63):
            return "((int64_t)(-9223372036854775807LL - 1))"
        return f"((int64_t){v}LL)"
    if d is dt.int32 and v == -(1 << 31):
        return "((int32_t)(-2147483647 - 1))"
    return f"(({C_TYPE[d]}){v})"


class Dialect:
    """How one C compiler spells NaN, infinities and libm calls; renders literals and the
    IR's unary and binary operators in it."""

    def __init__(self, specials: dict, math_fn):
        #: (dtype, "nan" | "inf" | "-inf") -> code
        self.specials = specials
        #: (name such as "sqrt", dtype) -> the function's name for that dtype
        self.math_fn = math_fn

    # -- literals -------------------------------------------------------------------------
    def float_lit(self, v, d: dt.DType) -> str:
        x = float(v)
        if d is dt.float32:
            with np.errstate(over="ignore"):
                x = float(np.float32(x))
        key = d if d is dt.float32 else dt.float64
        if math.isnan(x):
            return self.specials[key, "nan"]
        if math.isinf(x):
            return self.specials[key, "inf" if x > 0 else "-inf"]
        return f"({x.hex()}f)" if d is dt.float32 else f"({x.hex()})"

    def lit(self, value, d: dt.DType) -> str:
        d = ir.compute_dtype(d)
        if d.is_bool:
            return "((uint8_t)1)" if bool(value) else "((uint8_t)0)"
        if d.is_int:
            if isinstance(value, float):
                if not math.isfinite(value):
                    raise ValueError(f"render: non-finite constant {value!r} of dtype "
                                     f"{d.short}")
                value = int(value)
            return int_lit(int(value), d)
        return self.float_lit(value, d)

    def minmax_lit(self, d: dt.DType, which: str) -> str:
        """The smallest (``"min"``) or largest value of ``d``: a max/min reduction's
        identity."""
        if d.is_float:
            return self.float_lit(-math.inf if which == "min" else math.inf, d)
        if d.is_bool:
            return "((uint8_t)0)" if which == "min" else "((uint8_t)1)"
        info = np.iinfo(d.np)
        return int_lit(info.min if which == "min" else info.max, d)

    # -- operators ------------------------------------------------------------------------
    def unary_code(self, op: str, x: str, d: dt.DType) -> str:
        """``d``: the operand's compute dtype."""
        c = C_TYPE[d]
        if op == "lnot":
            return f"((uint8_t)({x} == 0))"
        if d.is_float:
            if op == "neg":
                return f"(-{x})"
            if op in ("abs", "sqrt", "floor", "ceil", "trunc", "rint"):
                return f"{self.math_fn('fabs' if op == 'abs' else op, d)}({x})"
            raise TypeError(f"render: unary {op} of a float operand ({d.short})")
        if d.is_bool:
            if op in ("neg", "bnot"):
                return f"((uint8_t)({x} ^ 1))"
            if op in ("abs", "floor", "ceil", "trunc", "rint"):
                return x
            raise TypeError(f"render: unary {op} of a bool operand")
        if op == "neg":
            return wrapneg(x, d)
        if op == "abs":
            return x if not d.signed else f"({x} < 0 ? {wrapneg(x, d)} : {x})"
        if op in ("floor", "ceil", "trunc", "rint"):
            return x
        if op == "bnot":
            return f"(({c})({UNSIGNED[d]})(~({WIDE[d]}){x}))"
        raise TypeError(f"render: unary {op} of an int operand ({d.short})")

    def fma_code(self, e: ir.Fma, a: str, b: str, c: str) -> str:
        """``a * b + c`` rounded once, for node ``e`` whose operands rendered as ``a``,
        ``b``, ``c`` (f32 only, as `ir.fma` builds them)."""
        cd = ir.compute_dtype
        if not (cd(e.dtype) is cd(e.a.dtype) is cd(e.b.dtype) is cd(e.c.dtype) is dt.float32):
            raise TypeError(f"render: fma of {e.a.dtype.short}, {e.b.dtype.short}, "
                            f"{e.c.dtype.short} typed {e.dtype.short} (f32 only)")
        return f"{self.math_fn('fma', dt.float32)}({a}, {b}, {c})"

    def binary_code(self, op: str, a: str, b: str, d: dt.DType) -> str:
        """``d``: the operands' compute dtype. Ints wrap; int division and remainder by
        zero give 0; shifts by counts outside ``[0, bits)`` give 0 or the sign fill; float
        max/min propagate NaN."""
        c = C_TYPE[d]
        if op in CMP:
            return f"((uint8_t)({a} {CMP[op]} {b}))"
        # `|`, not `||`: no branch, so the select vectorizes (blend of two compares)
        if op == "max":
            return f"((({a} > {b}) | ({a} != {a})) ? {a} : {b})" if d.is_float else \
                f"({a} > {b} ? {a} : {b})"
        if op == "min":
            return f"((({a} < {b}) | ({a} != {a})) ? {a} : {b})" if d.is_float else \
                f"({a} < {b} ? {a} : {b})"
        if d.is_float:
            if op in ("add", "sub", "mul", "div"):
                return f"({a} {'+-*/'[('add', 'sub', 'mul', 'div').index(op)]} {b})"
            if op == "rem":
                return f"{self.math_fn('fmod', d)}({a}, {b})"
            raise TypeError(f"render: binary {op} of float operands ({d.short})")
        if op in ("and", "or", "xor"):
            sym = {"and": "&", "or": "|", "xor": "^"}[op]
            return f"(({c})({a} {sym} {b}))"
        if d.is_bool:
            raise TypeError(f"render: binary {op} of bool operands")
        w, u = WIDE[d], UNSIGNED[d]
        if op in ("add", "sub", "mul"):
            sym = {"add": "+", "sub": "-", "mul": "*"}[op]
            return f"(({c})({u})(({w}){a} {sym} ({w}){b}))"
        if op == "div":
            if d.signed:
                return (f"({b} == 0 ? ({c})0 : ({b} == -1 ? {wrapneg(a, d)} : "
                        f"({c})({a} / {b})))")
            return f"({b} == 0 ? ({c})0 : ({c})({a} / {b}))"
        if op == "rem":
            if d.signed:
                return f"(({b} == 0 || {b} == -1) ? ({c})0 : ({c})({a} % {b}))"
            return f"({b} == 0 ? ({c})0 : ({c})({a} % {b}))"
        bits = 8 * d.itemsize
        cnt = f"((uint64_t)(int64_t){b})" if d.signed else f"((uint64_t){b})"
        if op == "shl":
            return f"({cnt} < {bits}u ? ({c})({u})(({w}){a} << {cnt}) : ({c})0)"
        if op == "shr":
            if d.signed:
                return (f"({cnt} < {bits}u ? ({c})({a} >> {cnt}) : "
                        f"({a} < 0 ? ({c})-1 : ({c})0))")
            return f"({cnt} < {bits}u ? ({c})({a} >> {cnt}) : ({c})0)"
        raise ValueError(f"render: unknown binary op {op!r}; valid: {sorted(ir.BINARY_OPS)}")


# -- value conversions ----------------------------------------------------------------------
def cast_code(x: str, src: dt.DType, dst: dt.DType, f2i32: str | None = None) -> str:
    """Code converting value ``x`` (carried in src's compute type, a value of dtype ``src``)
    to a value of dtype ``dst`` (carried in dst's compute type). ``f2i32``: a helper taking
    an f32 to the low 32 bits of its saturated int64 (C's vectorizable shortcut to the
    narrower ints), if the target has one."""
    cs, cdst = ir.compute_dtype(src), ir.compute_dtype(dst)
    if src is dst or (cs is cdst and dst not in LOW):
        return x
    if dst.is_bool:
        return f"((uint8_t)({x} != 0))"
    if src.is_bool:
        return f"(({C_TYPE[cdst]}){x})"
    if dst is dt.float16:
        if cs is dt.float32:
            return f"ember_h2f(ember_f2h({x}))"
        return f"ember_h2f(ember_d2h((double){x}))"
    if dst is dt.bfloat16:
        return f"ember_bf2f(ember_f2bf((float){x}))"
    if dst.is_float:
        return f"(({C_TYPE[dst]}){x})"
    if cs.is_float:                       # -> int: through the saturated int64
        if f2i32 and cs is dt.float32 and dst is not dt.int64:
            return f"(({C_TYPE[dst]})({UNSIGNED[dst]}){f2i32}({x}))"
        f = "ember_f2i64" if cs is dt.float32 else "ember_d2i64"
        if dst is dt.int64:
            return f"{f}({x})"
        return f"(({C_TYPE[dst]})({UNSIGNED[dst]}){f}({x}))"
    return f"(({C_TYPE[dst]})({UNSIGNED[dst]}){x})"


def store_code(x: str, src: dt.DType, out: dt.DType, f2i32: str | None = None) -> str:
    """Code converting value ``x`` (of dtype ``src``) to ``out``'s storage type."""
    cs = ir.compute_dtype(src)
    if out is dt.float16:
        return f"ember_f2h({x})" if cs is dt.float32 else f"ember_d2h((double){x})"
    if out is dt.bfloat16:
        return f"ember_f2bf({x})" if cs is dt.float32 else f"ember_f2bf((float){x})"
    return cast_code(x, src, out, f2i32)


def load_code(elem: str, d: dt.DType) -> str:
    """Code turning input element ``elem`` (``d``'s storage type) into a value of ``d``
    carried in its compute type."""
    if d is dt.float16:
        return f"ember_h2f({elem})"
    if d is dt.bfloat16:
        return f"ember_bf2f({elem})"
    if d.is_bool:
        return f"((uint8_t)({elem} != 0))"
    return elem


class Src:
    """Lines of generated source, indented by the blocks open around them."""

    def __init__(self):
        self.lines: list = []
        self.ind = 0

    def __call__(self, *lines):
        for ln in lines:
            self.lines.append("  " * self.ind + ln)

    def open(self, line):
        self(line + " {")
        self.ind += 1

    def close(self, tail=""):
        self.ind -= 1
        self("}" + tail)


class ScopeBase:
    """Emits statements evaluating expressions at one loop position, each node once, bound
    to a ``const`` temporary.

    ``load(buffer)`` gives the element expression of an input at the position (its storage
    type), ``index(dim)`` the int64 position along an iteration dim, ``acc`` the reduced
    value. A renderer's subclass names its `Dialect` and its load and cast code, and may
    render a select or a binary operator its own way."""

    #: the renderer's `Dialect`
    dialect: Dialect

    def __init__(self, gen, views, load, index, acc=None, acc_dtype=None):
        self.g = gen
        self.views = views
        self.load = load
        self.index = index
        self.acc = acc
        self.acc_dtype = acc_dtype
        self.lines: list = []
        self.memo: dict = {}     # id(node) -> code
        self.keep: list = []

    # -- the renderer's hooks -------------------------------------------------------------
    def load_code(self, elem: str, d: dt.DType) -> str:
        """Code turning input element ``elem`` (storage type of ``d``) into a value of
        ``d`` carried in its compute type."""
        raise NotImplementedError

    def cast_code(self, x: str, src: dt.DType, dst: dt.DType) -> str:
        """Code converting value ``x`` of dtype ``src`` to a value of dtype ``dst``."""
        raise NotImplementedError

    def binary_code(self, op: str, a: str, b: str, d: dt.DType) -> str:
        """``d``: the operands' compute dtype."""
        return self.dialect.binary_code(op, a, b, d)

    def select_code(self, e: ir.Select, cond: str, a: str, b: str) -> str:
        """Code of select ``e`` whose (uint8 truth) condition and branches rendered as
        ``cond``, ``a``, ``b``."""
        return f"({cond} ? {a} : {b})"

    # -- expressions ----------------------------------------------------------------------
    def value(self, e: ir.Expr) -> str:
        memo = self.memo
        stack = [(e, False)]
        while stack:
            node, done = stack.pop()
            if id(node) in memo:
                continue
            if done:
                memo[id(node)] = self._node(node)
                self.keep.append(node)
                continue
            stack.append((node, True))
            for ch in ir.children(node):
                if id(ch) not in memo:
                    stack.append((ch, False))
        return memo[id(e)]

    def _bind(self, code: str, d: dt.DType) -> str:
        t = self.g.tmp()
        self.lines.append(f"const {C_TYPE[ir.compute_dtype(d)]} {t} = {code};")
        return t

    def _node(self, e) -> str:
        v = lambda n: self.memo[id(n)]   # noqa: E731
        cd = ir.compute_dtype
        if isinstance(e, ir.Const):
            return self.dialect.lit(e.value, e.dtype)
        if isinstance(e, ir.Arg):
            if not 0 <= e.index < self.g.n_args:
                raise ValueError(f"render: Arg({e.index}) but the kernel declares "
                                 f"{self.g.n_args} args")
            return f"arg{e.index}"
        if isinstance(e, ir.Load):
            if not 0 <= e.buffer < len(self.views):
                raise ValueError(f"render: Load({e.buffer}) but the kernel has "
                                 f"{len(self.views)} inputs")
            if self.views[e.buffer].dtype is not e.dtype:
                raise TypeError(f"render: Load({e.buffer}) of dtype {e.dtype.short} from a "
                                f"view of dtype {self.views[e.buffer].dtype.short}")
            return self._bind(self.load_code(self.load(e.buffer), e.dtype), e.dtype)
        if isinstance(e, ir.Index):
            return self._bind(self.cast_code(self.index(e.dim), dt.int64, e.dtype), e.dtype)
        if isinstance(e, ir.Acc):
            if self.acc is None:
                raise ValueError("render: Acc outside a reduction's epilogue")
            return self._bind(self.cast_code(self.acc, self.acc_dtype, e.dtype), e.dtype)
        if isinstance(e, ir.Unary):
            if e.op not in ir.UNARY_OPS:
                raise ValueError(f"render: unknown unary op {e.op!r}")
            xd = cd(e.x.dtype)
            want = dt.bool_ if e.op == "lnot" else xd
            if cd(e.dtype) is not want:
                raise TypeError(f"render: unary {e.op} of {xd.short} typed {e.dtype.short}")
            return self._bind(self.dialect.unary_code(e.op, v(e.x), xd), e.dtype)
        if isinstance(e, ir.Binary):
            ad, bd = cd(e.a.dtype), cd(e.b.dtype)
            if ad is not bd:
                raise TypeError(f"render: binary {e.op} of {ad.short} and {bd.short} operands "
                                f"(operands share a dtype; add a Cast)")
            want = dt.bool_ if e.op in CMP else ad
            if cd(e.dtype) is not want:
                raise TypeError(f"render: binary {e.op} of {ad.short} typed {e.dtype.short}")
            return self._bind(self.binary_code(e.op, v(e.a), v(e.b), ad), e.dtype)
        if isinstance(e, ir.Select):
            cond = v(e.cond) if cd(e.cond.dtype) is dt.bool_ else \
                f"((uint8_t)({v(e.cond)} != 0))"
            vd = cd(e.dtype)
            if cd(e.a.dtype) is not vd or cd(e.b.dtype) is not vd:
                raise TypeError("render: select branches differ from its dtype")
            return self._bind(self.select_code(e, cond, v(e.a), v(e.b)), e.dtype)
        if isinstance(e, ir.Fma):
            return self._bind(self.dialect.fma_code(e, v(e.a), v(e.b), v(e.c)), e.dtype)
        if isinstance(e, ir.Cast):
            return self._bind(self.cast_code(v(e.x), e.x.dtype, e.dtype), e.dtype)
        if isinstance(e, ir.Bitcast):
            if e.x.dtype.itemsize != e.dtype.itemsize:
                raise TypeError(f"render: bitcast {e.x.dtype.short} -> {e.dtype.short}")
            name = self.g.bitcast_helper(e.x.dtype, e.dtype)
            return self._bind(f"{name}({v(e.x)})", e.dtype)
        raise TypeError(f"render: unknown expression node {type(e).__name__}")
