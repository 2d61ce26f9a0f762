"""Scalar code shared by the C and the CUDA C renderers.

Both targets are C: the same types, integer wrapping, literals and operator spellings render
an IR expression. What differs is small and named by a `Dialect`: how NaN and infinity are
spelled, and how a libm function is called (``__builtin_sqrtf`` for GCC, ``sqrtf`` for
NVRTC). Each renderer keeps only what is its own (loads, stores, half-precision storage,
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
