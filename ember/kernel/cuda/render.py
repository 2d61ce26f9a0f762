"""Kernel IR -> CUDA C (compiled by NVRTC; no headers needed).

The same IR the C renderer takes (`ir.Elementwise`, `ir.Reduce`, ``broadcast=True``
included), with the same semantics: `ember.kernel.interpret`'s module doc is the contract.
Shapes, strides and offsets are compile-time constants; a kernel's parameters are its input
pointers, its output pointers, a scratch pointer (split reductions), its runtime scalars
(one 8-byte parameter each, as `scalars` encodes them: f64 as ``double``, f32 as its bits
-- an f32 divisor's with its reciprocal's --, int and bool as ``long long``) and, for
vectorized elementwise kernels, an ``aligned`` flag.

Elementwise kernels
-------------------
Size-1 dims are dropped and dims contiguous for every input and the output are merged
(unless the kernel reads `Index`). Grid-stride loops; 32-bit indices when every index and
offset fits (`fits_idx32`), else 64-bit. With ``vec > 1`` each thread handles ``vec``
elements per step in chunks of ``W`` consecutive elements of the last dim (one vector
access: 16 bytes of the widest operand, or ``vec`` elements if fewer), its ``vec / W``
chunks a block of chunks apart (every access of a warp contiguous): it loads all its chunks,
computes them (no branch among them, so the compiler interleaves the elements), then stores
them; a chunk past the end computes the last chunk again and stores nothing. Outputs are
written with vector stores, inputs with a unit last stride and offsets/strides that are
multiples of ``W`` are read with vector loads, broadcast inputs (stride 0) once per chunk,
other inputs element by element. The launch passes ``aligned = 0`` when a vectorized
pointer is not aligned to its access width; the kernel then takes its scalar loop. A flat
(1-d) kernel with ``N % W != 0`` finishes with a scalar tail; an N-d one needs ``W`` to
divide the last dim (the renderer lowers ``W`` until it does). An f32 division by a kernel
constant (a scalar Arg or a Const) is a multiply by its reciprocal in f64, with the
division's bits (`_DIVK` says why).

Reductions
----------
Kept dims are collapsed as above. Two layouts:

* *row*: ``tpr`` threads reduce one output position (a warp, a sub-warp group or a whole
  block): strided partial accumulation, then ``__shfl_down_sync`` within warps and shared
  memory across warps; the result is broadcast to the row's threads, which then either
  store the epilogue (lane 0) or, for ``broadcast=True``, sweep the row again writing it.
* *column*: a kept dim has unit stride (a reduction over a strided axis): a block of
  ``32 x by`` threads owns 32 neighbouring outputs, ``by`` threads per output split the
  axis, and combine through shared memory (a fixed tree).

When the output of a column layout is contiguous along the reduced axis (layer norm after
``swap_dims``), the broadcast sweep goes through a shared-memory tile so that its writes are
coalesced too. A broadcast kernel whose threads see at most `CACHE` terms each keeps the
loads its epilogue repeats in registers (its loops unrolled), so the sweep reads no input
twice.

A long axis is *split* into segments of ``64 * tpr`` (``64 * by``) elements: kernel
``ember_part`` reduces each (output, segment) into a scratch buffer, ``ember_comb`` combines
the segments of each output in a fixed order (and stores the epilogue, or the reduced value
for a broadcast sweep), ``ember_sweep`` writes a broadcast epilogue. Each thread therefore
accumulates at most 64 terms in sequence before the trees take over: float sums are
pairwise-ish (error ~ (64 + log2 n) eps). Results are deterministic for a given variant;
the float rounding of sums depends on the variant (threads per output, segments).

Semantics (as the C renderer): integer arithmetic wraps (unsigned types), int division and
remainder by zero give 0, ``INT_MIN / -1`` wraps, shifts out of range give 0 or the sign
fill, max/min propagate NaN, float -> int casts saturate to the int64 range (NaN -> 0) then
wrap, bool is ``uint8_t`` 0/1, f16/bf16 compute in f32 and round to nearest even on store
(f16 by the ``cvt.rn`` PTX instruction, bf16 by bits). Compile with ``--fmad=false`` (and
the default IEEE division and square root, no flush to zero) so add, sub, mul, div, sqrt
and the conversions give NumPy's bits, as the C kernels do.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import dtype as dt
from .. import ir
from ..c_family import (C_TYPE, LOW, SIZE, UNSIGNED, WIDE, Dialect, ScopeBase, Src, contig,
                        loads_of, nodes, prod, uses_index)
from ..c_family import cast_code as _cast_code
from ..c_family import load_code as _load_code
from ..c_family import store_code as _store_code
from . import scalars
from .scalars import DIVM_RANGE, divm_ok     # the divisors `_DIVM` serves (others divide)

__all__ = ["Options", "Launch", "Rendered", "render", "render_flat", "fits_idx32",
           "default_vec", "FLAT_NAME"]

SERIAL = 64          # terms one thread accumulates in sequence before a split
CACHE = 32           # broadcast reductions: per-thread terms kept in registers for the sweep
MAX_BLOCK = 1024


@dataclass(frozen=True, slots=True)
class Options:
    """Compile-time choices (the autotuner varies them).

    ``block``: threads per block (0: 128 for elementwise kernels, 256 for row reductions).
    ``vec``: elementwise elements per thread and step, in chunks of one vector access of
    at most 16 bytes of the widest operand, a block of chunks apart (0: two chunks of 16
    bytes; 1: scalar only). ``idx32``: 32-bit indexing where it fits.
    ``tpr``: row reductions, threads per output (0: by the axis length).
    ``by``: column reductions, threads per output (0: 8)."""
    block: int = 0
    vec: int = 0
    idx32: bool = True
    tpr: int = 0
    by: int = 0


@dataclass(frozen=True, slots=True)
class Launch:
    """One kernel launch of a program: ``grid = min(ceil(items / per_block), cap)`` blocks
    of ``block`` threads run function ``name`` (grid-stride loops cover the rest)."""
    name: str
    block: int
    items: int
    per_block: int


@dataclass(frozen=True, slots=True)
class Rendered:
    """The source and how to launch it. ``launches`` run in order (none for an empty
    kernel); ``scratch``: bytes of scratch memory the launches share (split reductions);
    ``vec``: the vector width (elementwise; 1: none); ``aligned``: per pointer parameter
    (inputs, then outputs) the byte alignment the vector path needs (0: none), checked at
    launch to set the ``aligned`` parameter; ``mode``: ``elementwise``, ``row``,
    ``column`` (``+split``)."""
    source: str
    mode: str
    launches: tuple
    scratch: int
    vec: int
    aligned: tuple
    has_aligned: bool
    has_scratch: bool
    idx32: bool
    work: int


def _cd(d: dt.DType) -> dt.DType:
    return ir.compute_dtype(d)


def _pow2ceil(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def fits_idx32(kernel) -> bool:
    """Whether every flat index and element offset of ``kernel`` fits in int32 (with a
    margin for grid-stride steps)."""
    lim = (1 << 30)
    if prod(kernel.shape) > lim:
        return False
    for v in kernel.inputs:
        lo = hi = int(v.offset)
        for s, n in zip(v.strides, kernel.shape):
            ext = int(s) * (max(int(n), 1) - 1)
            lo, hi = (lo + ext, hi) if ext < 0 else (lo, hi + ext)
        if lo < -lim or hi > lim:
            return False
    return True


# NVRTC's spellings of NaN, the infinities (bit patterns: no headers) and the libm functions
_DIALECT = Dialect(
    {(dt.float32, "nan"): "__int_as_float(0x7fc00000)",
     (dt.float32, "inf"): "__int_as_float(0x7f800000)",
     (dt.float32, "-inf"): "__int_as_float(0xff800000)",
     (dt.float64, "nan"): "__longlong_as_double(0x7ff8000000000000LL)",
     (dt.float64, "inf"): "__longlong_as_double(0x7ff0000000000000LL)",
     (dt.float64, "-inf"): "__longlong_as_double((long long)0xfff0000000000000ULL)"},
    lambda name, d: f"{name}{'f' if d is dt.float32 else ''}")


# -- the preamble ---------------------------------------------------------------------------
_PRE = r"""
typedef long long int64_t; typedef unsigned long long uint64_t;
typedef int int32_t; typedef unsigned int uint32_t;
typedef short int16_t; typedef unsigned short uint16_t;
typedef signed char int8_t; typedef unsigned char uint8_t;
#define EMBER_D static __device__ __forceinline__
#define EMBER_FULL 0xffffffffu
EMBER_D float ember_h2f(uint16_t h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
EMBER_D uint16_t ember_f2h(float f) { uint16_t h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
EMBER_D uint16_t ember_d2h(double d) { uint16_t h; asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(d)); return h; }
EMBER_D float ember_bf2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
EMBER_D uint16_t ember_f2bf(float f) {
  uint32_t u = __float_as_uint(f);
  uint32_t nan = ((u >> 16) & 0x8000u) | 0x7fc0u;
  uint32_t rnd = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rnd);
}
/* float -> int64, truncating; NaN -> 0; saturating at the int64 limits (+-inf included) */
EMBER_D int64_t ember_f2i64(float x) {
  return x != x ? (int64_t)0 : (x >= 0x1p63f ? (int64_t)0x7fffffffffffffffLL :
         (x < -0x1p63f ? (int64_t)(-0x7fffffffffffffffLL - 1) : (int64_t)__float2ll_rz(x)));
}
EMBER_D int64_t ember_d2i64(double x) {
  return x != x ? (int64_t)0 : (x >= 0x1p63 ? (int64_t)0x7fffffffffffffffLL :
         (x < -0x1p63 ? (int64_t)(-0x7fffffffffffffffLL - 1) : (int64_t)__double2ll_rz(x)));
}
"""

# warp shuffles of every accumulator type (8/16-bit values travel as 32-bit ints)
_SHFL_TYPES = ("float", "double", "int64_t", "uint64_t", "int32_t", "uint32_t", "int16_t",
               "uint16_t", "int8_t", "uint8_t")


def _shfl_helpers(t: str) -> str:
    wide = t in ("float", "double", "int64_t", "uint64_t", "int32_t", "uint32_t")
    via = "" if wide else "(int)"
    back = "" if wide else f"({t})"
    return (f"EMBER_D {t} ember_shfl_down({t} v, int o, int w) "
            f"{{ return {back}__shfl_down_sync(EMBER_FULL, {via}v, o, w); }}\n"
            f"EMBER_D {t} ember_shfl_idx({t} v, int s, int w) "
            f"{{ return {back}__shfl_sync(EMBER_FULL, {via}v, s, w); }}")


# vector access types: total bytes -> (type of one access, accesses)
def _vec_access(nbytes: int) -> tuple:
    if nbytes >= 16:
        return "uint4", nbytes // 16
    return {8: "uint2", 4: "unsigned int", 2: "unsigned short", 1: "unsigned char"}[nbytes], 1


# -- expressions ----------------------------------------------------------------------------
class _Gen:
    """Shared state of one rendering: temp names, helpers (bitcasts, vector unions)."""

    def __init__(self, n_args: int):
        self.n = 0
        self.helpers: dict = {}
        self.n_args = n_args

    def tmp(self) -> str:
        self.n += 1
        return f"t{self.n}"

    def bitcast_helper(self, src: dt.DType, dst: dt.DType) -> str:
        name = f"ember_bc_{src.short}_{dst.short}"
        if name in self.helpers:
            return name
        bits = f"uint{8 * src.itemsize}_t"
        if src is dt.float16:
            get = "b = ember_f2h(x);"
        elif src is dt.bfloat16:
            get = "b = ember_f2bf(x);"
        elif src is dt.float32:
            get = "b = __float_as_uint(x);"
        elif src is dt.float64:
            get = "b = (uint64_t)__double_as_longlong(x);"
        else:
            get = f"b = ({bits})x;"
        if dst is dt.float16:
            put = "return ember_h2f(b);"
        elif dst is dt.bfloat16:
            put = "return ember_bf2f(b);"
        elif dst is dt.float32:
            put = "return __uint_as_float(b);"
        elif dst is dt.float64:
            put = "return __longlong_as_double((long long)b);"
        elif dst.is_bool:
            put = "return (uint8_t)(b != 0);"
        else:
            put = f"return ({C_TYPE[dst]})({UNSIGNED[dst]})b;"
        self.helpers[name] = (f"EMBER_D {C_TYPE[_cd(dst)]} {name}({C_TYPE[_cd(src)]} x) "
                              f"{{ {bits} b; {get} {put} }}")
        return name

    def vec_union_chunks(self, ctype: str, w: int, u: int) -> str:
        """A union of ``u`` chunks of ``w`` elements, each chunk one vector access."""
        name = f"ember_v_{ctype}_{w}x{u}"
        if name not in self.helpers:
            acc, n = _vec_access(SIZE[ctype] * w)
            self.helpers[name] = (f"union {name} {{ {acc} q[{n * u}]; {ctype} e[{w * u}]; }};")
        return name

    def vec_union(self, ctype: str, vec: int) -> str:
        name = f"ember_v_{ctype}_{vec}"
        if name not in self.helpers:
            acc, n = _vec_access(SIZE[ctype] * vec)
            self.helpers[name] = f"union {name} {{ {acc} q[{n}]; {ctype} e[{vec}]; }};"
        return name





def _storage(d: dt.DType) -> str:
    return "uint16_t" if d in LOW else C_TYPE[d]


def _const_divisor(e) -> bool:
    """Whether ``e`` is an f32 division by a kernel constant (an `ir.Arg` or `ir.Const`):
    those run as a multiply by the divisor's reciprocal and one correction (`_DIVM`)."""
    return (isinstance(e, ir.Binary) and e.op == "div" and _cd(e.dtype) is dt.float32
            and isinstance(e.b, (ir.Arg, ir.Const)) and _cd(e.b.dtype) is dt.float32)


# x / c for a divisor c that is the same for every element (a scalar Arg or a constant),
# given y = 1 / c rounded to f32 (by the host, `scalars`): the IEEE division's bits, in a
# multiply and two FMAs instead of the division's reciprocal, Newton steps, range
# check and branch, all in f32 (an f64 multiply by 1 / (double)c, exact as well, costs two
# conversions that run at 1/8 of the f32 rate and left a custom GELU short of the copy
# bandwidth). Markstein's correction: q0 = x * y is within an ulp of x / c, so the
# remainder x - q0 * c is exact in one FMA and q0 + remainder * y rounded once is x / c
# rounded to nearest -- where nothing under- or overflows, which |c| in `DIVM_RANGE` and
# |x| in [2^-100, 2^100] (`ember_divm_redo` checks x's bits) guarantee; zeros come out of
# it with the sign of q0 (the correction's own sign of a zero can differ). Elsewhere
# (x subnormal, huge, infinite or NaN; c out of range) the caller divides. Checked against
# the division over all 2^32 x for 56 divisors on the CPU's FMA (tests: the same helpers
# on a GPU, tests/kernel_cuda/test_division.py).
_DIVM = ("EMBER_D float ember_divm(float x, float c, float y) {\n"
         "  const float q0 = x * y;\n"
         "  const float q = fmaf(fmaf(-q0, c, x), y, q0);\n"
         "  return __uint_as_float((__float_as_uint(q) & 0x7fffffffu) |"
         " (__float_as_uint(q0) & 0x80000000u));\n"
         "}\n"
         "EMBER_D bool ember_divm_redo(float x, bool c_ok) {\n"
         "  const uint32_t u = __float_as_uint(x) & 0x7fffffffu;\n"
         "  return !c_ok || (u - 0x0d800000u > 0x64000000u && u != 0u);\n"
         "}")
_DIVK = ("EMBER_D float ember_divk(float x, float c, float y, bool c_ok) {\n"
         "  return ember_divm_redo(x, c_ok) ? x / c : ember_divm(x, c, y);\n"
         "}")


class _Scope(ScopeBase):
    """Emits CUDA C statements evaluating expressions at one position (see `ScopeBase`).

    An f32 division by a kernel constant (`_const_divisor`) gives the division's bits in
    one of three ways (``div``): ``"k"`` `ember_divk` (the multiply and its correction, or
    the division where they do not serve); ``"q"`` the multiply and correction alone,
    or-ing into ``ember_redo`` whether the division must be redone (the caller then
    evaluates the expressions again with ``"x"``, the plain division): no branch among the
    expressions, so the compiler interleaves the elements of a vector; ``"x"``."""

    dialect = _DIALECT
    load_code = staticmethod(_load_code)
    cast_code = staticmethod(_cast_code)

    def __init__(self, *a, div: str = "k", **kw):
        super().__init__(*a, **kw)
        self.div = div
        self.redo = False          # an ``ember_redo`` flag was set ("q")

    def _node(self, e) -> str:
        if not _const_divisor(e) or self.div == "x":
            return super()._node(e)
        if _cd(e.a.dtype) is not dt.float32:
            raise TypeError(f"render: binary div of {_cd(e.a.dtype).short} and f32 operands "
                            f"(operands share a dtype; add a Cast)")
        x, c = self.memo[id(e.a)], self.memo[id(e.b)]
        if isinstance(e.b, ir.Arg):
            y, ok = f"argy{e.b.index}", f"argok{e.b.index}"
        else:
            if not divm_ok(e.b.value):
                return super()._node(e)
            yv = np.float32(1.0) / np.float32(e.b.value)
            y, ok = self.dialect.float_lit(float(yv), dt.float32), "true"
        self.g.helpers.setdefault("ember_divm", _DIVM)
        if self.div == "k":
            self.g.helpers.setdefault("ember_divk", _DIVK)
            return self._bind(f"ember_divk({x}, {c}, {y}, {ok})", e.dtype)
        q = self._bind(f"ember_divm({x}, {c}, {y})", e.dtype)
        self.lines.append(f"ember_redo |= ember_divm_redo({x}, {ok});")
        self.redo = True
        return q


def _collapse(sizes, strides, merge: bool):
    """Drop size-1 dims and (with ``merge``) merge adjacent dims contiguous for every stride
    list. Returns (sizes, strides, dims): ``dims[i]`` lists the original dims of dim i."""
    dims = [[d] for d in range(len(sizes))]
    sizes = list(sizes)
    strides = [list(s) for s in strides]
    keep = [i for i, n in enumerate(sizes) if n != 1]
    sizes = [sizes[i] for i in keep]
    strides = [[s[i] for i in keep] for s in strides]
    dims = [dims[i] for i in keep]
    if merge:
        i = len(sizes) - 2
        while i >= 0:
            if all(s[i] == s[i + 1] * sizes[i + 1] for s in strides):
                sizes[i] *= sizes[i + 1]
                for s in strides:
                    s[i] = s[i + 1]
                    del s[i + 1]
                dims[i] = dims[i] + dims[i + 1]
                del sizes[i + 1], dims[i + 1]
            i -= 1
    return sizes, strides, dims


def _params(k, out_dtypes, scratch: bool, aligned: bool) -> str:
    ps = []
    for b, v in enumerate(k.inputs):
        ps.append(f"const {_storage(v.dtype)} *__restrict__ in{b}")
    for i, od in enumerate(out_dtypes):
        ps.append(f"{_storage(od)} *__restrict__ out{i}")
    if scratch:
        ps.append("char *__restrict__ scratch")
    for i, kind in enumerate(arg_kinds(k)):
        ps.append(f"const {scalars.C_PARAM[kind]} arg{i}_")
    if aligned:
        ps.append("const int ember_aligned")
    return ", ".join(ps)


def _divisor_args(k) -> set:
    """The args that divide an f32 value somewhere in ``k`` (see `_const_divisor`)."""
    exprs = list(k.exprs) if isinstance(k, ir.Elementwise) else [k.prologue, k.epilogue]
    return {n.b.index for n in nodes(exprs) if _const_divisor(n) and isinstance(n.b, ir.Arg)}


def arg_kinds(k) -> tuple:
    """How each scalar arg of kernel ``k`` is passed (`scalars`: ``"f64"``, ``"f32"``,
    ``"f32/"`` for an f32 divisor, ``"int"``)."""
    return scalars.kinds(k.args, _divisor_args(k))


def _arg_decls(k) -> list:
    out = []
    for i, (ad, kind) in enumerate(zip(k.args, arg_kinds(k))):
        ad = _cd(ad)
        if kind == "f64":
            out.append(f"const double arg{i} = arg{i}_;")
        elif kind in ("f32", "f32/"):
            # the f32's bits (and a divisor's reciprocal's) as the host packed them
            out.append(f"const float arg{i} = __uint_as_float((uint32_t)arg{i}_);")
            if kind == "f32/":
                out.append(f"const float argy{i} = "
                           f"__uint_as_float((uint32_t)(arg{i}_ >> 32));")
                lo, hi = (f"{float.hex(b)}f" for b in DIVM_RANGE)
                out.append(f"const bool argok{i} = fabsf(arg{i}) >= {lo} && "
                           f"fabsf(arg{i}) <= {hi};")
        elif ad.is_bool:
            out.append(f"const uint8_t arg{i} = (uint8_t)(arg{i}_ != 0);")
        else:
            out.append(f"const {C_TYPE[ad]} arg{i} = ({C_TYPE[ad]})({UNSIGNED[ad]})arg{i}_;")
        out.append(f"(void)arg{i};")
    return out


def _decompose(src, I, pvar, sizes, strides, offs, nbufs, prefix="i", upto=None):
    """Declare ``i{d}`` for flat position ``pvar`` over ``sizes`` and the per-buffer offsets
    ``o{b}`` (``strides[b][d]``, constant offsets ``offs[b]``)."""
    D = len(sizes) if upto is None else upto
    if D:
        src(f"{I} r_ = {pvar};")
        for d in range(D - 1, -1, -1):
            if d == 0:
                src(f"const {I} {prefix}{d} = r_;")
            else:
                src(f"const {I} {prefix}{d} = r_ % {sizes[d]}; r_ /= {sizes[d]};")
    for b in range(nbufs):
        terms = [str(offs[b])] + [f"{prefix}{d} * ({I}){strides[b][d]}" for d in range(D)
                                  if strides[b][d] != 0]
        src(f"const {I} o{b} = {' + '.join(terms)}; (void)o{b};")


def default_vec(kernel) -> int:
    """The default vector width of an elementwise kernel: 16 bytes of its widest operand
    (1 when nothing is contiguous)."""
    widest = max([SIZE[_storage(d)] for d in kernel.out_dtypes] +
                 [SIZE[_storage(v.dtype)] for v in kernel.inputs] + [1])
    return max(1, 16 // widest)


# -- elementwise ----------------------------------------------------------------------------
def _render_elementwise(k: ir.Elementwise, gen: _Gen, I: str, opts: Options) -> tuple:
    if len(k.exprs) != len(k.out_dtypes):
        raise ValueError("render: Elementwise needs one out dtype per expression")
    for e, od in zip(k.exprs, k.out_dtypes):
        if _cd(e.dtype) is not _cd(od):
            raise TypeError(f"render: an expression of dtype {e.dtype.short} cannot be "
                            f"stored as {od.short} (compute dtypes differ; add a Cast)")
    shape = [int(s) for s in k.shape]
    for v in k.inputs:
        if len(v.strides) != len(shape):
            raise ValueError(f"render: view strides {v.strides} do not match the iteration "
                             f"shape {tuple(shape)}")
    N = prod(shape)
    nb = len(k.inputs)
    used = loads_of(k.exprs)
    use_index = uses_index(k.exprs)
    strides = [[int(s) for s in v.strides] for v in k.inputs]
    offs = [int(v.offset) for v in k.inputs]
    sizes, cstrides, dims = _collapse(shape, strides + [contig(shape)], merge=not use_index)
    cstrides = cstrides[:nb]
    if not sizes:
        sizes, cstrides, dims = [1], [[0] for _ in range(nb)], [[]]
    D = len(sizes)
    last = D - 1
    block = opts.block or 128
    src = Src()
    n_out = len(k.exprs)
    # the vector width: a power of two, split into U chunks of W elements (at most 16 bytes
    # of the widest operand: one access each); N-d kernels need W to divide the last dim
    vec = opts.vec or 2 * default_vec(k)
    vec = max(1, min(_pow2ceil(vec), 16))
    W = min(vec, default_vec(k))
    U = vec // W
    while W > 1 and ((D > 1 and sizes[last] % W) or N < 2 * W):
        W //= 2
    if W == 1:
        U = 1
    vec = W * U
    vin = []          # inputs read with vector loads
    for b in range(nb):
        if b in used and W > 1 and cstrides[b][last] == 1 and offs[b] % W == 0 and \
                all(cstrides[b][d] % W == 0 for d in range(last)):
            vin.append(b)
    aligned = [0] * (nb + n_out)
    if W > 1:
        for b in vin:
            aligned[b] = min(16, W * SIZE[_storage(k.inputs[b].dtype)])
        for i, od in enumerate(k.out_dtypes):
            aligned[nb + i] = min(16, W * SIZE[_storage(od)])
    has_aligned = W > 1

    src.open(f'extern "C" __global__ void __launch_bounds__({block}) '
             f'ember_kernel({_params(k, k.out_dtypes, False, has_aligned)})')
    src(*_arg_decls(k))
    if N == 0:
        src.close()
        return src.lines, "elementwise", (), vec, tuple(aligned), has_aligned, 0
    src(f"const {I} N = {N}; (void)N;")
    src(f"const {I} tid = ({I})blockIdx.x * {block} + threadIdx.x;")
    src(f"const {I} nth = ({I})gridDim.x * {block};")

    def index_of(lane):
        def f(dim):
            for cd, ds in enumerate(dims):
                if dim in ds:
                    if len(ds) != 1:
                        raise AssertionError("render: Index of a merged dim")
                    if cd == last and lane is not None:
                        return f"(int64_t)(i{cd} + {lane})"
                    return f"(int64_t)i{cd}"
            if 0 <= dim < len(shape):
                return "(int64_t)0"
            raise ValueError(f"render: Index({dim}) in a {len(shape)}-d iteration space")
        return f

    def scalar_loop(start: str):
        src.open(f"for ({I} i = {start}; i < N; i += nth)")
        _decompose(src, I, "i", sizes, cstrides, offs, nb)
        sc = _Scope(gen, k.inputs, lambda b: f"in{b}[o{b}]", index_of(None))
        vals = [sc.value(e) for e in k.exprs]
        src(*sc.lines)
        for i, (e, od, val) in enumerate(zip(k.exprs, k.out_dtypes, vals)):
            src(f"out{i}[i] = {_store_code(val, e.dtype, od)};")
        src.close()

    if W > 1:
        NC = N // W                   # chunks of W elements
        NS = -(-NC // (block * U)) * block if U > 1 else NC
        whole = NC % (block * U) == 0     # every step's chunks exist: no clamp, no guard
        src.open("if (ember_aligned)")
        src(f"const {I} NC = {NC}; (void)NC;")
        src.open(f"for ({I} g = tid; g < {NS}; g += nth)")
        if U > 1:
            # the thread's chunks: U chunks one block of chunks apart (each access of a warp
            # is contiguous), all loaded before any is computed
            src(f"const {I} cb = (g - ({I})threadIdx.x) * {U} + ({I})threadIdx.x;")

        def chunk(u, store=False):
            """Open chunk u's block (closed by `end`): its first element e0, the offsets
            o<b> and the indices. A chunk past the end (U > 1, chunks that do not fill the
            last step) loads and computes the last chunk again (no branch among the
            chunks' values) and stores nothing."""
            src.open("")
            if U == 1:
                src(f"const {I} e0 = g * {W};")
            elif whole:
                src(f"const {I} e0 = (cb + {u * block}) * {W};")
            elif store:
                src(f"const {I} c{u} = cb + {u * block};")
                src.open(f"if (c{u} < NC)")
                src(f"const {I} e0 = c{u} * {W};")
            else:
                src(f"const {I} c{u} = cb + {u * block};")
                src(f"const {I} e0 = (c{u} < NC ? c{u} : NC - 1) * {W};")
            _decompose(src, I, "e0", sizes, cstrides, offs, nb)

        def end(store=False):
            if U > 1 and store and not whole:
                src.close()
            src.close()

        def rname(i, u):
            return f"r{i}" if U == 1 else f"r{i}_{u}"

        for b in vin:
            st = _storage(k.inputs[b].dtype)
            un = gen.vec_union(st, W) if U == 1 else gen.vec_union_chunks(st, W, U)
            src(f"{un} v{b};")
        for u in range(U):
            chunk(u)
            for b in vin:
                acc, n = _vec_access(SIZE[_storage(k.inputs[b].dtype)] * W)
                src(f"const {acc} *p{b} = reinterpret_cast<const {acc} *>(in{b} + o{b});")
                for q in range(n):
                    src(f"v{b}.q[{u * n + q}] = p{b}[{q}];")
            end()
        for u in range(U):
            for i, od in enumerate(k.out_dtypes):
                src(f"{gen.vec_union(_storage(od), W)} {rname(i, u)};")

        def elements(u, div):
            """Chunk u's values into r<i>: its loop over the elements (``div``: `_Scope`)."""
            def vload(b):
                if b in vin:
                    return f"v{b}.e[{f'{u * W} + ' if u else ''}j]"
                s_ = cstrides[b][last]
                return f"in{b}[o{b}]" if s_ == 0 else f"in{b}[o{b} + j * ({I}){s_}]"
            chunk(u)
            sc = _Scope(gen, k.inputs, vload, index_of("j"), div=div)
            vals = [sc.value(e) for e in k.exprs]
            src("#pragma unroll")
            src.open(f"for (int j = 0; j < {W}; j++)")
            src(*sc.lines)
            for i, (e, od, val) in enumerate(zip(k.exprs, k.out_dtypes, vals)):
                src(f"{rname(i, u)}.e[j] = {_store_code(val, e.dtype, od)};")
            src.close()
            end()
        # divisions by a kernel constant as a multiply, without a branch among the elements
        # (`_Scope`); where the multiply cannot tell (a nonzero subnormal quotient: never
        # with normal data), every chunk of the thread again with divisions
        redo = any(_const_divisor(n) for n in nodes(k.exprs))
        if redo:
            src("bool ember_redo = false;")
        for u in range(U):
            elements(u, "q" if redo else "k")
        if redo:
            src.open("if (ember_redo)")
            for u in range(U):
                elements(u, "x")
            src.close()
        for u in range(U):
            chunk(u, store=True)
            for i, od in enumerate(k.out_dtypes):
                acc, n = _vec_access(SIZE[_storage(od)] * W)
                src(f"{acc} *w{i} = reinterpret_cast<{acc} *>(out{i} + e0);")
                for q in range(n):
                    src(f"w{i}[{q}] = {rname(i, u)}.q[{q}];")
            end(store=True)
        src.close()
        if N % W:
            scalar_loop(f"NC * {W} + tid")
        src.close()
        src.open("else")
        scalar_loop("tid")
        src.close()
        items = NS
    else:
        scalar_loop("tid")
        items = N
    src.close()
    launch = Launch("ember_kernel", block, items, block)
    return src.lines, "elementwise", (launch,), vec, tuple(aligned), has_aligned, N


# -- reductions -----------------------------------------------------------------------------
def _acc_ops(op: str, d: dt.DType):
    """(accumulator C type, identity literal, combine(a, b) -> code) in compute dtype d."""
    if d.is_bool:
        if op == "max":
            return "uint8_t", "((uint8_t)0)", lambda a, b: f"((uint8_t)({a} | {b}))"
        if op == "min":
            return "uint8_t", "((uint8_t)1)", lambda a, b: f"((uint8_t)({a} & {b}))"
        raise TypeError(f"render: reduce {op} of a bool prologue; cast it first")
    if op in ("sum", "prod") and d.is_int:
        u, w = UNSIGNED[d], WIDE[d]
        sym = "+" if op == "sum" else "*"
        return (u, f"(({u}){0 if op == 'sum' else 1})",
                lambda a, b: f"(({u})(({w}){a} {sym} ({w}){b}))")
    dl = _DIALECT
    if op == "sum":
        return C_TYPE[d], dl.float_lit(-0.0, d), lambda a, b: dl.binary_code("add", a, b, d)
    if op == "prod":
        return C_TYPE[d], dl.float_lit(1.0, d), lambda a, b: dl.binary_code("mul", a, b, d)
    if op == "max":
        return C_TYPE[d], dl.minmax_lit(d, "min"), lambda a, b: dl.binary_code("max", a, b, d)
    if op == "min":
        return C_TYPE[d], dl.minmax_lit(d, "max"), lambda a, b: dl.binary_code("min", a, b, d)
    raise ValueError(f"render: unknown reduce op {op!r}; valid: {sorted(ir.REDUCE_OPS)}")


def _render_reduce(k: ir.Reduce, gen: _Gen, I: str, opts: Options) -> tuple:
    shape = [int(s) for s in k.shape]
    nd = len(shape)
    a = k.axis
    if not 0 <= a < nd:
        raise ValueError(f"render: reduce axis {a} out of range for shape {tuple(shape)}")
    for v in k.inputs:
        if len(v.strides) != nd:
            raise ValueError(f"render: view strides {v.strides} do not match the iteration "
                             f"shape {tuple(shape)}")
    if _cd(k.epilogue.dtype) is not _cd(k.out_dtype):
        raise TypeError(f"render: an epilogue of dtype {k.epilogue.dtype.short} cannot be "
                        f"stored as {k.out_dtype.short} (compute dtypes differ; add a Cast)")
    AD = _cd(k.prologue.dtype)
    ACC, ident, comb = _acc_ops(k.op, AD)
    ACCV = C_TYPE[AD]
    bc = bool(getattr(k, "broadcast", False))
    R = shape[a]
    nb = len(k.inputs)
    use_index = uses_index([k.prologue, k.epilogue])
    pro_loads = loads_of([k.prologue])
    kept = [d for d in range(nd) if d != a]
    kshape = [shape[d] for d in kept]
    P = prod(kshape)
    strides = [[int(s) for s in v.strides] for v in k.inputs]
    sa = [s[a] for s in strides]
    offs = [int(v.offset) for v in k.inputs]
    ks = [[s[d] for d in kept] for s in strides]
    full_cs = contig(shape)
    out_ks = [full_cs[d] for d in kept] if bc else contig(kshape)
    OSA = full_cs[a] if bc else 0
    sizes, cstrides, dims = _collapse(kshape, ks + [out_ks], merge=not use_index)
    D = len(sizes)
    cdims = [[kept[i] for i in ds] for ds in dims]
    in_cs = cstrides[:nb]
    out_cs = cstrides[nb]
    nbo = nb + 1                       # buffers the offsets track: inputs, then the output
    allcs = in_cs + [out_cs]
    alloffs = offs + [0]

    # layout
    col = False
    if D and R > 1 and P > 1 and sizes[-1] >= 4:
        row_score = sum(1 for b in pro_loads if abs(sa[b]) == 1)
        col_score = sum(1 for b in pro_loads if abs(in_cs[b][-1]) == 1)
        col = col_score > row_score
    if col:
        BX = 32
        by = opts.by or 8
        by = max(1, min(_pow2ceil(by), 32))
        while by > 1 and by > R:
            by //= 2
        block = BX * by
        seg = SERIAL * by
        NV = sizes[-1]
        PO = P // NV
        NVT = (NV + BX - 1) // BX
    else:
        if opts.tpr:
            tpr = max(1, min(_pow2ceil(opts.tpr), MAX_BLOCK))
        elif R <= 32:
            tpr = _pow2ceil(max(R, 1))
        elif R <= 1024:
            tpr = 32
        else:
            tpr = 256
        block = max(opts.block or 256, tpr, 32)
        block = min(_pow2ceil(block), MAX_BLOCK)
        seg = SERIAL * tpr
    nseg = (R + seg - 1) // seg if R > seg else 1
    split = nseg > 1
    # a direct broadcast kernel keeps the loads its epilogue repeats in registers when each
    # thread sees few terms: the sweep then reads no input twice
    cache_bufs = sorted(b for b in pro_loads & loads_of([k.epilogue]) if sa[b]) \
        if bc else []
    C = -(-R // (by if col else tpr)) if R else 0
    cached = bool(cache_bufs) and not split and 0 < C <= CACHE
    mode = ("column" if col else "row") + ("+split" if split else "")
    src = Src()

    def header(name, blk):
        src.open(f'extern "C" __global__ void __launch_bounds__({blk}) '
                 f'{name}({_params(k, (k.out_dtype,), split, False)})')
        src(*_arg_decls(k))

    if P == 0 or (bc and R == 0):
        header("ember_kernel", 32)
        src.close()
        return src.lines, mode, (), 0, False, 0

    def idx_fn(kexpr, in_epi):
        def f(dim):
            if not 0 <= dim < nd:
                raise ValueError(f"render: Index({dim}) in a {nd}-d iteration space")
            if dim == a:
                return "(int64_t)0" if in_epi and not bc else f"(int64_t)({kexpr})"
            for cd, ds in enumerate(cdims):
                if dim in ds:
                    if len(ds) != 1:
                        raise AssertionError("render: Index of a merged dim")
                    return f"(int64_t)i{cd}"
            return "(int64_t)0"
        return f

    def cached_load(kexpr):
        def load(b):
            if cached and b in cache_bufs:
                return f"cv{b}[c]"
            return f"in{b}[o{b} + ({kexpr}) * ({I}){sa[b]}]" if sa[b] else f"in{b}[o{b}]"
        return load

    def pro_value(kexpr):
        sc = _Scope(gen, k.inputs, cached_load(kexpr), idx_fn(kexpr, False))
        val = sc.value(k.prologue)
        return sc.lines, val

    def epi_lines(accv, kexpr=None):
        """(lines, value) of the epilogue at the kept position (``kexpr``: at k, bc)."""
        load = (lambda b: f"in{b}[o{b}]") if kexpr is None else cached_load(kexpr)
        sc = _Scope(gen, k.inputs, load, idx_fn(kexpr if kexpr is not None else "0",
                                                 kexpr is None), acc=accv, acc_dtype=AD)
        val = sc.value(k.epilogue)
        return sc.lines, _store_code(val, k.epilogue.dtype, k.out_dtype)

    def accumulate(kb, ke, step_from, step):
        """acc over k in [kb, ke): k = kb + step_from, += step. With ``cached`` (a direct
        broadcast kernel whose threads see at most `CACHE` terms each) the loop is unrolled
        and the loads the epilogue repeats stay in registers for the sweep."""
        if cached:
            for b in cache_bufs:
                src(f"{_storage(k.inputs[b].dtype)} cv{b}[{C}];")
        src(f"{ACC} acc = {ident};")
        src.open("if (live)")
        if cached:
            src("#pragma unroll")
            src.open(f"for (int c = 0; c < {C}; c++)")
            src(f"const {I} k = {step_from} + ({I})c * {step};")
            src.open(f"if (k < {R})")
            for b in cache_bufs:
                src(f"cv{b}[c] = in{b}[o{b} + k * ({I}){sa[b]}];")
        else:
            src.open(f"for ({I} k = ({kb}) + {step_from}; k < ({ke}); k += {step})")
        lines, val = pro_value("k")
        src(*lines)
        src(f"acc = {comb('acc', val)};")
        src.close()
        if cached:
            src.close()
        src.close()

    def sweep(kb, ke, step_from, step):
        if cached:
            src("#pragma unroll")
            src.open(f"for (int c = 0; c < {C}; c++)")
            src(f"const {I} k = {step_from} + ({I})c * {step};")
            src.open(f"if (k < {R})")
        else:
            src.open(f"for ({I} k = ({kb}) + {step_from}; k < ({ke}); k += {step})")
        lines, val = epi_lines("accv", "k")
        src(*lines)
        src(f"out0[o{nb} + k * ({I}){OSA}] = {val};")
        src.close()
        if cached:
            src.close()

    def group_reduce_row(tpr, blk):
        """Combine ``acc`` over the ``tpr`` threads of a row group; every thread of the group
        ends with the group's value (lane 0's)."""
        if tpr == 1:
            return
        w = min(tpr, 32)
        src("#pragma unroll")
        src.open(f"for (int s_ = {w // 2}; s_ > 0; s_ >>= 1)")
        src(f"const {ACC} o_ = ember_shfl_down(acc, s_, {w});")
        src(f"acc = {comb('acc', 'o_')};")
        src.close()
        if tpr <= 32:
            src(f"acc = ember_shfl_idx(acc, 0, {w});")
            return
        nw = tpr // 32
        src("const int wib_ = threadIdx.x >> 5, lw_ = threadIdx.x & 31;")
        src("if (lw_ == 0) sm_[wib_] = acc;")
        src("__syncthreads();")
        src.open(f"if ((threadIdx.x % {tpr}) < 32)")
        src(f"{ACC} v_ = lw_ < {nw} ? sm_[(threadIdx.x / {tpr}) * {nw} + lw_] : {ident};")
        src("#pragma unroll")
        src.open("for (int s_ = 16; s_ > 0; s_ >>= 1)")
        src(f"const {ACC} o_ = ember_shfl_down(v_, s_, 32);")
        src(f"v_ = {comb('v_', 'o_')};")
        src.close()
        src(f"if (lw_ == 0) sm_[{blk // 32} + threadIdx.x / {tpr}] = v_;")
        src.close()
        src("__syncthreads();")
        src(f"acc = sm_[{blk // 32} + threadIdx.x / {tpr}];")
        src("__syncthreads();")

    def row_kernel(name, phase, tpr, blk, RR, segsz, ns, part_src=False):
        """A row-layout kernel. ``phase``: ``direct`` (reduce, then store the epilogue or
        sweep), ``part`` (reduce a segment into scratch), ``comb`` (combine segments from
        scratch, then as direct; the reduced value is stored for a split sweep), ``sweep``
        (the broadcast epilogue of a segment, the reduced value from scratch)."""
        rpb = blk // tpr
        items = P * ns
        header(name, blk)
        if phase in ("part", "comb", "sweep") or split:
            src(f"{ACC} *part_ = reinterpret_cast<{ACC} *>(scratch); (void)part_;")
            src(f"{ACC} *accs_ = part_ + {P * nseg}; (void)accs_;")
        if tpr > 32:
            src(f"__shared__ {ACC} sm_[{blk // 32 + blk // tpr}];")
        src(f"const int lane = threadIdx.x % {tpr};")
        src.open(f"for ({I} it0 = ({I})blockIdx.x * {rpb}; it0 < {items}; "
                 f"it0 += ({I})gridDim.x * {rpb})")
        src(f"const {I} it = it0 + threadIdx.x / {tpr};")
        src(f"const bool live = it < {items};")
        if ns > 1:
            src(f"const {I} p = live ? it / {ns} : 0, sg = it % {ns};")
            src(f"const {I} kb = sg * {segsz};")
            src(f"const {I} ke = kb + {segsz} < {RR} ? kb + {segsz} : {RR};")
        else:
            src(f"const {I} p = live ? it : 0;")
            src(f"const {I} kb = 0, ke = {RR};")
        src("(void)kb; (void)ke;")
        _decompose(src, I, "p", sizes, allcs, alloffs, nbo)
        if phase == "sweep":
            src.open("if (live)")
            src(f"const {ACCV} accv = ({ACCV})accs_[p];")
            sweep("kb", "ke", "lane", tpr)
            src.close()
            src.close()
            src.close()
            return Launch(name, blk, items, rpb)
        if part_src:
            src(f"{ACC} acc = {ident};")
            src.open("if (live)")
            src.open(f"for ({I} k = lane; k < {RR}; k += {tpr})")
            src(f"acc = {comb('acc', f'part_[p * {nseg} + k]')};")
            src.close()
            src.close()
        else:
            accumulate("kb", "ke", "lane", tpr)
        group_reduce_row(tpr, blk)
        src.open("if (live)")
        if phase == "part":
            src("if (lane == 0) part_[it] = acc;")
        elif bc and phase == "comb":
            src("if (lane == 0) accs_[p] = acc;")
        elif bc:
            src(f"const {ACCV} accv = ({ACCV})acc;")
            sweep("0", str(R), "lane", tpr)
        else:
            src.open("if (lane == 0)")
            src(f"const {ACCV} accv = ({ACCV})acc;")
            lines, val = epi_lines("accv")
            src(*lines)
            src(f"out0[p] = {val};")
            src.close()
        src.close()
        src.close()
        src.close()
        return Launch(name, blk, items, rpb)

    # a column layout whose output is contiguous along the reduced axis (layer norm after
    # swap_dims): the broadcast sweep goes through a shared-memory tile, computed with
    # threads along the outputs (coalesced reads) and written with threads along the axis
    # (coalesced writes)
    transpose = col and bc and OSA == 1 and out_cs[-1] != 1

    def sweep_t(kb, ke):
        src(f"if (ty == 0) obase_[tx] = o{nb};")
        if cached:          # unrolled: the cached values' indices are constants
            src("#pragma unroll")
            src.open(f"for (int kc = 0; kc < {R}; kc += {BX})")
            src("#pragma unroll")
            src.open(f"for (int m_ = 0; m_ < {BX // by}; m_++)")
            src(f"const int kk = ty + m_ * {by}, c = kc / {by} + m_;")
        else:
            src.open(f"for ({I} kc = {kb}; kc < ({ke}); kc += {BX})")
            src.open(f"for (int kk = ty; kk < {BX}; kk += {by})")
        src(f"const {I} k = kc + kk;")
        src.open(f"if (live && k < ({ke}))")
        lines, val = epi_lines("accv", "k")
        src(*lines)
        src(f"tile_[kk][tx] = {val};")
        src.close()
        src.close()
        src("__syncthreads();")
        src.open(f"for (int jj = ty; jj < {BX}; jj += {by})")
        src(f"if (j0 + jj < {NV} && kc + tx < ({ke})) "
            f"out0[obase_[jj] + (kc + tx) * ({I}){OSA}] = tile_[tx][jj];")
        src.close()
        src("__syncthreads();")
        src.close()

    def col_kernel(name, phase):
        """A column-layout kernel: 32 outputs per block, ``by`` threads per output."""
        items = PO * NVT * nseg
        header(name, block)
        if split:
            src(f"{ACC} *part_ = reinterpret_cast<{ACC} *>(scratch); (void)part_;")
            src(f"{ACC} *accs_ = part_ + {P * nseg}; (void)accs_;")
        src(f"const int tx = threadIdx.x % {BX}, ty = threadIdx.x / {BX};")
        if by > 1 and phase != "sweep":
            src(f"__shared__ {ACC} sm_[{by}][{BX + 1}];")
        if transpose and phase in ("direct", "sweep"):
            src(f"__shared__ {_storage(k.out_dtype)} tile_[{BX}][{BX + 1}];")
            src(f"__shared__ {I} obase_[{BX}];")
        src.open(f"for ({I} it = blockIdx.x; it < {items}; it += gridDim.x)")
        if nseg > 1:
            src(f"const {I} sg = it % {nseg}, t_ = it / {nseg};")
            src(f"const {I} kb = sg * {seg};")
            src(f"const {I} ke = kb + {seg} < {R} ? kb + {seg} : {R};")
        else:
            src(f"const {I} t_ = it, kb = 0, ke = {R};")
        src("(void)kb; (void)ke;")
        src(f"const {I} po = t_ / {NVT}, j0 = (t_ % {NVT}) * {BX}, j = j0 + tx; (void)j0;")
        src(f"const bool live = j < {NV};")
        src(f"const {I} p = live ? po * {NV} + j : 0;")
        _decompose(src, I, "p", sizes, allcs, alloffs, nbo)
        if phase == "sweep":
            if transpose:
                src(f"const {ACCV} accv = ({ACCV})accs_[p];")
                sweep_t("kb", "ke")
            else:
                src.open("if (live)")
                src(f"const {ACCV} accv = ({ACCV})accs_[p];")
                sweep("kb", "ke", "ty", by)
                src.close()
            src.close()
            src.close()
            return Launch(name, block, items, 1)
        accumulate("kb", "ke", "ty", by)
        if by > 1:
            src("sm_[ty][tx] = acc;")
            src("__syncthreads();")
            s = by // 2
            while s >= 1:
                src(f"if (ty < {s}) sm_[ty][tx] = {comb('sm_[ty][tx]', f'sm_[ty + {s}][tx]')};")
                src("__syncthreads();")
                s //= 2
            src("acc = sm_[0][tx];")
            src("__syncthreads();")
        if bc and phase == "direct" and transpose:
            src(f"const {ACCV} accv = ({ACCV})acc;")
            sweep_t("0", str(R))
            src.close()
            src.close()
            return Launch(name, block, items, 1)
        src.open("if (live)")
        if phase == "part":
            src(f"if (ty == 0) part_[p * {nseg} + sg] = acc;")
        elif bc:
            src(f"const {ACCV} accv = ({ACCV})acc;")
            sweep("0", str(R), "ty", by)
        else:
            src.open("if (ty == 0)")
            src(f"const {ACCV} accv = ({ACCV})acc;")
            lines, val = epi_lines("accv")
            src(*lines)
            src(f"out0[p] = {val};")
            src.close()
        src.close()
        src.close()
        src.close()
        return Launch(name, block, items, 1)

    launches = []
    if not split:
        if col:
            launches.append(col_kernel("ember_kernel", "direct"))
        else:
            launches.append(row_kernel("ember_kernel", "direct", tpr, block, R, R, 1))
        scratch = 0
    else:
        if col:
            launches.append(col_kernel("ember_part", "part"))
        else:
            launches.append(row_kernel("ember_part", "part", tpr, block, R, seg, nseg))
        # combine the segments of each output, in order
        ctpr = _pow2ceil(nseg) if nseg <= 32 else (32 if nseg <= 1024 else 256)
        cblk = max(ctpr, 128)
        launches.append(row_kernel("ember_comb", "comb", ctpr, cblk, nseg, nseg, 1,
                                   part_src=True))
        if bc:
            if col:
                launches.append(col_kernel("ember_sweep", "sweep"))
            else:
                launches.append(row_kernel("ember_sweep", "sweep", tpr, block, R, seg, nseg))
        scratch = SIZE[ACC] * (P * nseg + (P if bc else 0))
    work = P * R * (2 if bc else 1)
    return src.lines, mode, tuple(launches), scratch, split, work


FLAT_NAME = "ember_flat"


def render_flat(kernel: ir.Elementwise, block: int = 256, cyclic: tuple = ()) -> Rendered:
    """An elementwise kernel over ``n`` contiguous elements, ``n`` a runtime parameter
    (``long long ember_n`` after the scalars): one kernel per op and dtypes that serves every
    shape, which the Cuda backend launches for eager ops instead of compiling one per shape.
    ``kernel``'s inputs must be contiguous 1-d views (strides ``(1,)``, offset 0) and its
    expressions must not read an ``Index``; its ``shape`` is ignored. An input ``b`` with
    ``cyclic[b]`` true repeats with period ``ember_m<b>`` (a parameter after ``ember_n``): a
    tensor broadcast along leading dims, such as a bias. A grid-stride loop, one element per
    step, 64-bit positions."""
    if not isinstance(kernel, ir.Elementwise):
        raise TypeError(f"render_flat: not an Elementwise kernel: {type(kernel).__name__}")
    if len(kernel.exprs) != len(kernel.out_dtypes):
        raise ValueError("render_flat: Elementwise needs one out dtype per expression")
    for v in kernel.inputs:
        if tuple(v.strides) != (1,) or v.offset:
            raise ValueError(f"render_flat: inputs must be contiguous 1-d views, got strides "
                             f"{v.strides} offset {v.offset}")
    if uses_index(kernel.exprs):
        raise ValueError("render_flat: an expression reads a position (Index)")

    def no_index(dim):
        raise ValueError(f"render_flat: Index({dim})")

    gen = _Gen(len(kernel.args))
    src = Src()
    cyc = [b for b in range(len(kernel.inputs)) if b < len(cyclic) and cyclic[b]]
    params = _params(kernel, kernel.out_dtypes, False, False)
    params = ", ".join([params, "const long long ember_n"] +
                       [f"const long long ember_m{b}" for b in cyc])
    src.open(f'extern "C" __global__ void __launch_bounds__({block}) {FLAT_NAME}({params})')
    src(*_arg_decls(kernel))
    src.open(f"for (long long i = (long long)blockIdx.x * {block} + threadIdx.x; "
             f"i < ember_n; i += (long long)gridDim.x * {block})")
    sc = _Scope(gen, kernel.inputs,
                lambda b: f"in{b}[i % ember_m{b}]" if b in cyc else f"in{b}[i]", no_index)
    vals = [sc.value(e) for e in kernel.exprs]
    src(*sc.lines)
    for i, (e, od, val) in enumerate(zip(kernel.exprs, kernel.out_dtypes, vals)):
        if _cd(e.dtype) is not _cd(od):
            raise TypeError(f"render_flat: an expression of dtype {e.dtype.short} cannot be "
                            f"stored as {od.short} (add a Cast)")
        src(f"out{i}[i] = {_store_code(val, e.dtype, od)};")
    src.close()
    src.close()
    pre = [_PRE.strip("\n")] + list(gen.helpers.values())
    n_ptr = len(kernel.inputs) + len(kernel.out_dtypes)
    return Rendered(source="\n".join(pre + src.lines) + "\n", mode="flat",
                    launches=(Launch(FLAT_NAME, block, 0, block),), scratch=0, vec=1,
                    aligned=(0,) * n_ptr, has_aligned=False, has_scratch=False, idx32=False,
                    work=0)


def render(kernel, options: Options = Options()) -> Rendered:
    """The CUDA C source of ``kernel`` (`ir.Elementwise` or `ir.Reduce`)."""
    if not isinstance(kernel, (ir.Elementwise, ir.Reduce)):
        raise TypeError(f"render: not a kernel: {type(kernel).__name__}")
    idx32 = bool(options.idx32) and fits_idx32(kernel)
    I = "int32_t" if idx32 else "int64_t"
    gen = _Gen(len(kernel.args))
    pre = [_PRE.strip("\n")]
    if isinstance(kernel, ir.Elementwise):
        body, mode, launches, vec, aligned, has_aligned, work = \
            _render_elementwise(kernel, gen, I, options)
        scratch, has_scratch = 0, False
    else:
        body, mode, launches, scratch, has_scratch, work = \
            _render_reduce(kernel, gen, I, options)
        vec, aligned, has_aligned = 1, (0,) * (len(kernel.inputs) + 1), False
        pre += [_shfl_helpers(t) for t in _SHFL_TYPES]
    pre += list(gen.helpers.values())
    return Rendered(source="\n".join(pre + body) + "\n", mode=mode, launches=launches,
                    scratch=scratch, vec=vec, aligned=aligned, has_aligned=has_aligned,
                    has_scratch=has_scratch, idx32=idx32, work=work)
