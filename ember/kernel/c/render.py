"""Kernel IR -> C99 source (with GNU builtins and OpenMP pragmas).

Every kernel becomes one exported function::

    void ember_kernel(char **bufs, const int64_t *args, int64_t nthreads, int64_t chunk);

``bufs`` holds the data pointers of the inputs (one per `BufferView`, element 0 of the
array's memory), then of the outputs (contiguous, row-major). ``args`` holds the runtime
scalars, 8 bytes each: float args as IEEE doubles, int and bool args as int64. ``nthreads``
is the OpenMP team size (1 runs serially, no team is started), ``chunk`` the number of
elements one work item covers (0: the kernel's default). Shapes, strides and offsets are
compile-time constants, so the C compiler sees unit strides and vectorizes.

Loop structure
--------------
* Elementwise: dims of size 1 are dropped and adjacent dims that are contiguous for every
  input are merged (unless the kernel reads `Index`), so a contiguous or scalar-broadcast
  kernel is one flat loop. The flat output range is cut into work items of ``chunk``
  elements, run in an OpenMP ``parallel for``; inside an item an odometer walks the
  multi-index, and each row is an ``omp simd`` loop with per-input constant strides.
* Reduce: kept dims are collapsed the same way. *Row* mode (the reduced axis is the unit
  stride one) runs one position at a time with 8 accumulators; *column* mode (a kept dim is
  the unit-stride one) accumulates ``W`` neighbouring positions at once in a vector of
  accumulators. Float sums are pairwise: blocks of 128 terms (8 accumulators) combined by a
  binary-counter stack, so the error grows like ``log n`` as in NumPy. A few outputs over a
  long axis (full reductions) are *split*: fixed segments of the axis reduce in parallel and
  are combined in order; the segments are aligned with the pairwise tree, so results do not
  depend on the thread count (or on splitting at all). Column mode splits the same way
  where a long axis has too few lane blocks to share out (a bias gradient's ``[B*T, D]``
  summed over rows): segments of `COL_SPLIT_SEG` rows, each item keeping the full lanes (on
  2 cores, ``[8192, 384]`` f32 155-165 -> 93-104 us, BENCHMARKS.md; narrowing the lanes to
  make items had each item read a 64-byte strip of every 1.5 KB row). A ``broadcast=True``
  reduction (softmax, layer norm) reduces each row, then sweeps it again writing the epilogue at every
  position (in split mode the sweep is parallel over the segments too). In column mode the
  epilogue's parts that do not change along the reduced axis (``rsqrt(var + eps)``) are
  computed once per lane, and an output contiguous along the reduced axis (layer norm after
  ``swap_dims``) is written through an L1 tile: lanes x rows computed with contiguous reads,
  then written out with contiguous writes.

Semantics (the contract is `ember.kernel.interpret`'s doc): integer arithmetic wraps (done in
unsigned types, never signed overflow), int division/remainder by zero give 0,
``INT_MIN / -1`` wraps, shift counts outside ``[0, bits)`` give 0 or the sign fill, max/min
propagate NaN (written as selects: ``fmax`` does not), float -> int casts saturate to the
int64 range (NaN -> 0) and then wrap, bool is ``uint8_t`` 0/1, f16/bf16 compute in float
and round to nearest even on store (``_Float16`` where the compiler has it, else bit
manipulation; bf16 always by bits, NaN -> the quiet NaN, f64 -> bf16 through f32 as
ml_dtypes does). The code has no undefined behaviour; it relies on the two
implementation-defined points every GCC/Clang target defines the same way (signed narrowing
conversions wrap, ``>>`` of a negative value is arithmetic). Compile without fast-math and
with ``-ffp-contract=off`` so the exactly rounded operations match NumPy bit for bit.

Written so that GCC vectorizes it (each point found on GCC 12): float selects and max/min
are bit-mask selects (``ember_self``/``ember_seld``: a ``?:`` on floats whose condition comes
from values of another width, or a chain of NaN-propagating clamps, keeps a branch and the
loop scalar); float -> int conversions use the hardware only for the in-range value
(AVX-512DQ) or integer arithmetic on the bits, never selects between types of different
widths; int sums and products accumulate in unsigned types (GCC 12 -O3 miscompiles
vectorized reductions into narrow signed accumulators); row max/min reductions are ``omp
simd`` loops over 16 accumulators (an unrolled 8-way with a combine tree stays scalar).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ... import dtype as dt
from .. import ir
from ..c_family import (C_TYPE, CMP, SIZE, UNSIGNED, WIDE, Dialect, ScopeBase, Src,
                        cast_code, store_code,
                        contig, loads_of, nodes, prod, uses_index)
from ..c_family import load_code as _load_code

__all__ = ["Options", "Rendered", "render", "fits_idx32"]

ROW_BLOCK = 128          # pairwise-sum block (terms summed with 8 accumulators)
SPLIT_SEG = 1 << 15      # split-mode segment (a power of two number of blocks)
MASK_ALL_SELECTS = True  # every float select as a bit-mask select (vectorizes reliably)
ROW_LANES = 16           # row mode (not float sums): accumulators per position
COL_BYTES = 1024         # column mode: bytes of accumulators per work item (W lanes)
COL_SPLIT_SEG = 1 << 10  # column split: rows a segment (a power of two number of blocks)
DEFAULT_CHUNK = 1 << 14  # elements per work item when the launch passes 0


@dataclass(frozen=True, slots=True)
class Options:
    """Compile-time choices. ``idx32``: 32-bit loop indices (only where they fit);
    ``unroll``: ``#pragma GCC unroll`` for the inner loops (0: the compiler's choice);
    ``float16``: the compiler has ``_Float16``; ``openmp``: emit OpenMP pragmas;
    ``wide``: ask GCC for 512-bit vectors where the CPU has AVX-512 (GCC prefers 256-bit
    ones by default; which wins depends on the kernel and the CPU: autotune decides);
    ``col_bytes``: bytes of accumulators per work item in column mode (0: `COL_BYTES`)."""
    idx32: bool = False
    unroll: int = 0
    float16: bool = True
    openmp: bool = True
    wide: bool = False
    col_bytes: int = 0


_PRE_WIDE = """#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)
#pragma GCC target("prefer-vector-width=512")
#endif"""


@dataclass(frozen=True, slots=True)
class Rendered:
    """The source and what the runtime needs to launch it: ``mode`` (``elementwise``,
    ``row``, ``column``, ``split``), ``work`` (loop trips, for threading decisions),
    ``items`` (parallel work items at the default chunk)."""
    source: str
    mode: str
    work: int
    items: int
    idx32: bool


def _cd(d: dt.DType) -> dt.DType:
    return ir.compute_dtype(d)


# GCC's spellings of NaN, the infinities and the libm functions
_DIALECT = Dialect(
    {(dt.float32, "nan"): '__builtin_nanf("")', (dt.float32, "inf"): "__builtin_inff()",
     (dt.float32, "-inf"): "(-__builtin_inff())", (dt.float64, "nan"): '__builtin_nan("")',
     (dt.float64, "inf"): "__builtin_inf()", (dt.float64, "-inf"): "(-__builtin_inf())"},
    lambda name, d: f"__builtin_{name}{'f' if d is dt.float32 else ''}")


# -- the preamble ---------------------------------------------------------------------------
_PRE_COMMON = r"""
#include <stddef.h>
#include <stdint.h>
#define EMBER_INLINE static inline __attribute__((always_inline))
EMBER_INLINE double ember_argd(const int64_t *a, int i) {
  double d; __builtin_memcpy(&d, a + i, 8); return d;
}
EMBER_INLINE float ember_bf2f(uint16_t h) {
  uint32_t u = (uint32_t)h << 16; float f; __builtin_memcpy(&f, &u, 4); return f;
}
EMBER_INLINE uint16_t ember_f2bf(float f) {
  uint32_t u; __builtin_memcpy(&u, &f, 4);
  uint32_t nan = ((u >> 16) & 0x8000u) | 0x7fc0u;
  uint32_t rnd = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rnd);
}
/* float selects by bit masks: GCC 12 does not if-convert a float select whose condition
   comes from values of another width (it keeps a branch, and the loop scalar) */
EMBER_INLINE float ember_self(uint8_t c, float a, float b) {
  uint32_t m = (uint32_t)0 - (uint32_t)c, ua, ub; float r;
  __builtin_memcpy(&ua, &a, 4); __builtin_memcpy(&ub, &b, 4);
  ua = (ua & m) | (ub & ~m); __builtin_memcpy(&r, &ua, 4); return r;
}
EMBER_INLINE double ember_seld(uint8_t c, double a, double b) {
  uint64_t m = (uint64_t)0 - (uint64_t)c, ua, ub; double r;
  __builtin_memcpy(&ua, &a, 8); __builtin_memcpy(&ub, &b, 8);
  ua = (ua & m) | (ub & ~m); __builtin_memcpy(&r, &ua, 8); return r;
}
/* float -> int64, truncating: NaN -> 0, saturating at the int64 limits (+-inf included).
   With AVX-512DQ the hardware conversion of the in-range value; otherwise integer arithmetic
   on the bits. No selects between types of different widths: GCC vectorizes both. */
#if defined(__AVX512DQ__) && defined(__AVX512VL__) && !defined(EMBER_NO_HW_CVT)
EMBER_INLINE int64_t ember_f2i64(float x) {
  uint32_t b; __builtin_memcpy(&b, &x, 4);
  uint32_t a = b & 0x7fffffffu;
  float y = ember_self((uint8_t)(a < 0x5f000000u), x, 0.0f);
  uint64_t r = (uint64_t)(int64_t)y;
  uint64_t sat = 0x7fffffffffffffffULL + (uint64_t)(b >> 31);
  uint64_t big = (uint64_t)0 - (uint64_t)(((a - 0x5f000000u) >> 31) ^ 1u);
  uint64_t nan = (uint64_t)0 - (uint64_t)((0x7f800000u - a) >> 31);
  return (int64_t)(((r & ~big) | (sat & big)) & ~nan);
}
EMBER_INLINE int64_t ember_d2i64(double x) {
  uint64_t b; __builtin_memcpy(&b, &x, 8);
  uint64_t a = b & 0x7fffffffffffffffULL;
  double y = ember_seld((uint8_t)(a < 0x43e0000000000000ULL), x, 0.0);
  uint64_t r = (uint64_t)(int64_t)y;
  uint64_t sat = 0x7fffffffffffffffULL + (b >> 63);
  uint64_t big = (uint64_t)0 - (((a - 0x43e0000000000000ULL) >> 63) ^ 1u);
  uint64_t nan = (uint64_t)0 - ((0x7ff0000000000000ULL - a) >> 63);
  return (int64_t)(((r & ~big) | (sat & big)) & ~nan);
}
#else
EMBER_INLINE int64_t ember_f2i64(float x) {
  uint32_t b; __builtin_memcpy(&b, &x, 4);
  uint32_t a = b & 0x7fffffffu;
  int32_t e = (int32_t)(a >> 23) - 150;                   /* |x| = m * 2^e */
  uint64_t m = (uint64_t)((b & 0x7fffffu) | 0x800000u);
  int32_t ls = e > 40 ? 40 : (e < 0 ? 0 : e);
  int32_t rs = e < -31 ? 31 : (e > 0 ? 0 : -e);
  uint64_t mag = (m << ls) >> rs;
  uint64_t neg = (uint64_t)0 - (uint64_t)(b >> 31);
  uint64_t r = (mag ^ neg) - neg;
  uint64_t sat = 0x7fffffffffffffffULL + (uint64_t)(b >> 31);
  uint64_t big = (uint64_t)0 - (uint64_t)(((a - 0x5f000000u) >> 31) ^ 1u);   /* |x| >= 2^63 */
  uint64_t nan = (uint64_t)0 - (uint64_t)((0x7f800000u - a) >> 31);          /* NaN */
  return (int64_t)(((r & ~big) | (sat & big)) & ~nan);
}
EMBER_INLINE int64_t ember_d2i64(double x) {
  uint64_t b; __builtin_memcpy(&b, &x, 8);
  uint64_t a = b & 0x7fffffffffffffffULL;
  int64_t e = (int64_t)(a >> 52) - 1075;                  /* |x| = m * 2^e */
  uint64_t m = (b & 0xfffffffffffffULL) | 0x10000000000000ULL;
  int64_t ls = e > 11 ? 11 : (e < 0 ? 0 : e);
  int64_t rs = e < -63 ? 63 : (e > 0 ? 0 : -e);
  uint64_t mag = (m << ls) >> rs;
  uint64_t neg = (uint64_t)0 - (b >> 63);
  uint64_t r = (mag ^ neg) - neg;
  uint64_t sat = 0x7fffffffffffffffULL + (b >> 63);
  uint64_t big = (uint64_t)0 - (((a - 0x43e0000000000000ULL) >> 63) ^ 1u);  /* |x| >= 2^63 */
  uint64_t nan = (uint64_t)0 - ((0x7ff0000000000000ULL - a) >> 63);         /* NaN */
  return (int64_t)(((r & ~big) | (sat & big)) & ~nan);
}
#endif
/* float -> int32 holding the low 32 bits of ember_f2i64(x), in 32-bit lanes */
EMBER_INLINE int32_t ember_f2i32w(float x) {
  uint32_t b; __builtin_memcpy(&b, &x, 4);
  uint32_t a = b & 0x7fffffffu;
  int32_t e = (int32_t)(a >> 23) - 150;
  uint32_t m = (b & 0x7fffffu) | 0x800000u;
  int32_t ls = e > 31 ? 31 : (e < 0 ? 0 : e);
  int32_t rs = e < -31 ? 31 : (e > 0 ? 0 : -e);
  uint32_t mag = e > 31 ? 0u : (m << ls) >> rs;            /* m * 2^e mod 2^32 */
  uint32_t neg = 0u - (b >> 31);
  uint32_t r = (mag ^ neg) - neg;
  uint32_t big = 0u - (((a - 0x5f000000u) >> 31) ^ 1u);  /* saturated: low bits of the limit */
  uint32_t nan = 0u - ((0x7f800000u - a) >> 31);
  return (int32_t)(((r & ~big) | (~neg & big)) & ~nan);
}
"""

_PRE_HALF_NATIVE = r"""
typedef _Float16 ember_half;
EMBER_INLINE float ember_h2f(ember_half h) { return (float)h; }
EMBER_INLINE ember_half ember_f2h(float f) { return (ember_half)f; }
EMBER_INLINE ember_half ember_d2h(double d) { return (ember_half)d; }
EMBER_INLINE uint16_t ember_hbits(ember_half h) {
  uint16_t u; __builtin_memcpy(&u, &h, 2); return u;
}
EMBER_INLINE ember_half ember_hfrom(uint16_t u) {
  ember_half h; __builtin_memcpy(&h, &u, 2); return h;
}
"""

_PRE_HALF_BITS = r"""
typedef uint16_t ember_half;
static inline float ember_h2f(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
  if (e == 0x1fu) u = sign | 0x7f800000u | (m << 13);
  else if (e != 0) u = sign | ((e + 112u) << 23) | (m << 13);
  else if (m == 0) u = sign;
  else { float f = (float)m * 0x1p-24f; return sign ? -f : f; }
  float f; __builtin_memcpy(&f, &u, 4); return f;
}
/* double -> half, rounding to nearest even (one rounding, also from float via double) */
static inline uint16_t ember_d2h(double d) {
  uint64_t u; __builtin_memcpy(&u, &d, 8);
  uint16_t sign = (uint16_t)((u >> 48) & 0x8000u);
  uint64_t a = u & 0x7fffffffffffffffULL;
  if (a >= 0x7ff0000000000000ULL) {
    if (a == 0x7ff0000000000000ULL) return (uint16_t)(sign | 0x7c00u);
    return (uint16_t)(sign | 0x7e00u | (uint16_t)((a >> 42) & 0x1ffu));
  }
  int e = (int)(a >> 52) - 1023;
  if (e < -25) return sign;
  uint64_t m = (a & 0xfffffffffffffULL) | 0x10000000000000ULL;
  int shift = e >= -14 ? 42 : 42 + (-14 - e);
  uint64_t q = m >> shift, rem = m & ((1ULL << shift) - 1), half = 1ULL << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) q++;
  uint64_t bits = e >= -14 ? ((uint64_t)(e + 14) << 10) + q : q;
  if (bits >= 0x7c00u) bits = 0x7c00u;
  return (uint16_t)(sign | (uint16_t)bits);
}
static inline uint16_t ember_f2h(float f) { return ember_d2h((double)f); }
EMBER_INLINE uint16_t ember_hbits(uint16_t h) { return h; }
EMBER_INLINE uint16_t ember_hfrom(uint16_t u) { return u; }
"""


def fits_idx32(kernel) -> bool:
    """Whether every flat index and element offset of ``kernel`` fits in int32."""
    lim = (1 << 31) - 1
    if prod(kernel.shape) > 1 << 30:    # margin: p + chunk must not overflow
        return False
    for v in kernel.inputs:
        lo = hi = int(v.offset)
        for s, n in zip(v.strides, kernel.shape):
            ext = int(s) * (max(int(n), 1) - 1)
            lo, hi = (lo + ext, hi) if ext < 0 else (lo, hi + ext)
        if lo < -(lim >> 1) or hi > (lim >> 1):
            return False
        # partial sums inside loops (base + k * stride) stay within [lo, hi]
    return True


# -- expressions ----------------------------------------------------------------------------
class _Gen:
    """Shared state of one rendering: temp names, bitcast helpers, options."""

    def __init__(self, opts: Options, n_args: int):
        self.opts = opts
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
            get = "b = ember_hbits(ember_f2h(x));"
        elif src is dt.bfloat16:
            get = "b = ember_f2bf(x);"
        elif src.is_float:
            get = f"__builtin_memcpy(&b, &x, {src.itemsize});"
        else:
            get = f"b = ({bits})x;"
        if dst is dt.float16:
            put = "return ember_h2f(ember_hfrom(b));"
        elif dst is dt.bfloat16:
            put = "return ember_bf2f(b);"
        elif dst.is_float:
            put = f"{C_TYPE[dst]} r; __builtin_memcpy(&r, &b, {dst.itemsize}); return r;"
        elif dst.is_bool:
            put = "return (uint8_t)(b != 0);"
        else:
            put = f"return ({C_TYPE[dst]})({UNSIGNED[dst]})b;"
        self.helpers[name] = (f"EMBER_INLINE {C_TYPE[_cd(dst)]} {name}({C_TYPE[_cd(src)]} x) "
                              f"{{ {bits} b; {get} {put} }}")
        return name





def _storage_c(d: dt.DType) -> str:
    if d is dt.float16:
        return "ember_half"
    if d is dt.bfloat16:
        return "uint16_t"
    return C_TYPE[d]


def _binary_code(op: str, a: str, b: str, d: dt.DType, masked: bool = False) -> str:
    """``d``: the operands' compute dtype. ``masked``: float max/min as bit-mask selects
    (see ember_self: chains of NaN-propagating clamps otherwise get branches)."""
    if masked and d.is_float and op in ("max", "min"):
        fn = "ember_self" if d is dt.float32 else "ember_seld"
        rel = ">" if op == "max" else "<"
        return f"{fn}((uint8_t)(({a} {rel} {b}) | ({a} != {a})), {a}, {b})"
    return _DIALECT.binary_code(op, a, b, d)


# value conversions: c_family's, with C's vectorizable f32 -> int32 shortcut
def _cast_code(x: str, src: dt.DType, dst: dt.DType) -> str:
    return cast_code(x, src, dst, "ember_f2i32w")


def _store_code(x: str, src: dt.DType, out: dt.DType) -> str:
    return store_code(x, src, out, "ember_f2i32w")


class _Scope(ScopeBase):
    """Emits C statements evaluating expressions at one loop position (see `ScopeBase`).
    Binary float max/min and float selects render as bit-mask selects."""

    dialect = _DIALECT
    load_code = staticmethod(_load_code)
    cast_code = staticmethod(_cast_code)

    def __init__(self, gen: _Gen, views, load, index, acc=None, acc_dtype=None):
        super().__init__(gen, views, load, index, acc, acc_dtype)
        self.widths: dict = {}   # id(bool node) -> widths of the values its truth comes from

    def binary_code(self, op: str, a: str, b: str, d: dt.DType) -> str:
        return _binary_code(op, a, b, d, masked=True)

    def select_code(self, e: ir.Select, cond: str, a: str, b: str) -> str:
        vd = _cd(e.dtype)
        if vd.is_float and (MASK_ALL_SELECTS or
                            _cond_widths(e.cond, self.widths) - {vd.itemsize}):
            fn = "ember_self" if vd is dt.float32 else "ember_seld"
            return f"{fn}({cond}, {a}, {b})"
        return super().select_code(e, cond, a, b)


def _cond_widths(e, memo: dict) -> frozenset:
    """The byte widths of the values a bool expression compares (loop-invariant leaves
    count for none): a float select on a condition of other widths needs a bit-mask select
    to vectorize."""
    stack = [(e, False)]
    while stack:
        n, done = stack.pop()
        if id(n) in memo:
            continue
        if not done:
            stack.append((n, True))
            stack.extend((c, False) for c in ir.children(n) if id(c) not in memo)
            continue
        w: frozenset = frozenset()
        if isinstance(n, ir.Binary):
            if n.op in CMP:
                ad = _cd(n.a.dtype)
                w = frozenset({ad.itemsize}) if not ad.is_bool else \
                    memo.get(id(n.a), frozenset()) | memo.get(id(n.b), frozenset())
            else:
                w = memo.get(id(n.a), frozenset()) | memo.get(id(n.b), frozenset())
        elif isinstance(n, ir.Unary):
            xd = _cd(n.x.dtype)
            w = memo.get(id(n.x), frozenset()) if xd.is_bool else frozenset({xd.itemsize})
        elif isinstance(n, ir.Cast):
            xd = _cd(n.x.dtype)
            w = memo.get(id(n.x), frozenset()) if xd.is_bool else frozenset({xd.itemsize})
        elif isinstance(n, (ir.Select, ir.Fma)):
            w = frozenset().union(*(memo.get(id(c), frozenset()) for c in ir.children(n)))
        elif isinstance(n, (ir.Load, ir.Bitcast)):
            w = frozenset({1})
        memo[id(n)] = w
    return memo[id(e)]


def _axis_variant(e, sa, axis) -> dict:
    """id(node) -> whether the node's value changes along the reduced axis (it reads an
    input with a nonzero stride there, or that axis's Index)."""
    memo: dict = {}
    stack = [(e, False)]
    while stack:
        n, done = stack.pop()
        if id(n) in memo:
            continue
        if not done:
            stack.append((n, True))
            stack.extend((c, False) for c in ir.children(n) if id(c) not in memo)
            continue
        if isinstance(n, ir.Load):
            v = sa[n.buffer] != 0
        elif isinstance(n, ir.Index):
            v = n.dim == axis
        else:
            v = any(memo[id(c)] for c in ir.children(n))
        memo[id(n)] = v
    return memo


_LEAVES = (ir.Const, ir.Arg, ir.Load, ir.Index, ir.Acc)


def _invariant_frontier(e, variant: dict) -> list:
    """The computed (non-leaf) nodes that do not change along the reduced axis but feed a
    node that does (or the root itself, if it does not change): what a broadcast sweep
    computes once per row instead of at every position."""
    out, seen = [], set()
    if not variant[id(e)]:
        return [] if isinstance(e, _LEAVES) else [e]
    for n in nodes([e]):
        if not variant[id(n)]:
            continue
        for c in ir.children(n):
            if not variant[id(c)] and not isinstance(c, _LEAVES) and id(c) not in seen:
                seen.add(id(c))
                out.append(c)
    return out


def _collapse(sizes, strides, merge: bool):
    """Drop size-1 dims and merge adjacent dims contiguous for every stride list
    (``strides[b][d]``). Returns (sizes, strides, dims) where ``dims[i]`` lists the original
    dims a collapsed dim covers."""
    dims = [[d] for d in range(len(sizes))]
    sizes = list(sizes)
    strides = [list(s) for s in strides]
    if not merge:
        return sizes, strides, dims
    keep = [i for i, n in enumerate(sizes) if n != 1]
    sizes = [sizes[i] for i in keep]
    strides = [[s[i] for i in keep] for s in strides]
    dims = [dims[i] for i in keep]
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


def _pragma_for(opts: Options) -> str:
    if not opts.openmp:
        return ""
    # dynamic: items are ~16K elements, and a core taken by another process must not stall
    # the whole team (static shares wait for the slowest thread)
    return ("#pragma omp parallel for num_threads((int)nthreads) if(nthreads > 1) "
            "schedule(dynamic, 1)")


def _pragma_simd(opts: Options) -> list:
    if opts.unroll:     # GCC takes no other pragma between omp simd and the loop
        return ["#pragma GCC ivdep", f"#pragma GCC unroll {int(opts.unroll)}"]
    return ["#pragma omp simd"] if opts.openmp else []


def _header(k, gen: _Gen, src: Src, I: str, out_dtypes):
    n_in = len(k.inputs)
    src.open("void ember_kernel(char **bufs, const int64_t *args, int64_t nthreads, "
             "int64_t chunk)")
    for b, v in enumerate(k.inputs):
        src(f"const {_storage_c(v.dtype)} *in{b} = (const {_storage_c(v.dtype)} *)bufs[{b}];")
    for i, od in enumerate(out_dtypes):
        src(f"{_storage_c(od)} *out{i} = ({_storage_c(od)} *)bufs[{n_in + i}];")
    for i, ad in enumerate(k.args):
        ad = _cd(ad)
        if ad.is_float:
            src(f"const {C_TYPE[ad]} arg{i} = ({C_TYPE[ad]})ember_argd(args, {i});")
        elif ad.is_bool:
            src(f"const uint8_t arg{i} = (uint8_t)(args[{i}] != 0);")
        else:
            src(f"const {C_TYPE[ad]} arg{i} = ({C_TYPE[ad]})({UNSIGNED[ad]})args[{i}];")
    src("(void)args; (void)nthreads; (void)chunk;")


def _odometer_decompose(src, I, pvar, sizes, strides, offs, nbufs, prefix="i"):
    """Declare index vars ``i{d}`` for the position ``pvar`` over ``sizes`` and per-buffer
    offsets ``o{b}``."""
    D = len(sizes)
    if D == 0:
        for b in range(nbufs):
            src(f"{I} o{b} = {offs[b]};")
        return
    src(f"{I} r_ = {pvar};")
    for d in range(D - 1, -1, -1):
        if d == 0:
            src(f"{I} {prefix}{d} = r_;")
        else:
            src(f"{I} {prefix}{d} = r_ % {sizes[d]}; r_ /= {sizes[d]};")
    src("(void)r_;")
    for b in range(nbufs):
        terms = [str(offs[b])] + [f"{prefix}{d} * {strides[b][d]}" for d in range(D)
                                  if strides[b][d] != 0]
        src(f"{I} o{b} = {' + '.join(terms)};")


def _odometer_advance(src, sizes, strides, nbufs, first: int, prefix="i"):
    """Advance the multi-index by one along dim ``first`` (carrying into earlier dims),
    keeping the per-buffer offsets ``o{b}`` in step."""
    def step(d):
        src(f"{prefix}{d}++;")
        for b in range(nbufs):
            if strides[b][d]:
                src(f"o{b} += {strides[b][d]};")
        if d == 0:
            return
        src.open(f"if ({prefix}{d} == {sizes[d]})")
        src(f"{prefix}{d} = 0;")
        for b in range(nbufs):
            if strides[b][d]:
                src(f"o{b} -= {sizes[d] * strides[b][d]};")
        step(d - 1)
        src.close()
    step(first)


# -- elementwise ----------------------------------------------------------------------------
def _render_elementwise(k: ir.Elementwise, gen: _Gen, I: str) -> tuple:
    opts = gen.opts
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
    use_index = uses_index(k.exprs)
    strides = [[int(s) for s in v.strides] for v in k.inputs]
    offs = [int(v.offset) for v in k.inputs]
    sizes, cstrides, dims = _collapse(shape, strides + [contig(shape)], merge=not use_index)
    cstrides = cstrides[:nb]
    if not sizes:        # a single element
        sizes, cstrides, dims = [1], [[0] for _ in range(nb)], [[]]
    D = len(sizes)
    last = D - 1
    src = Src()
    _header(k, gen, src, I, k.out_dtypes)
    src(f"const {I} N = {N};")
    if N == 0:
        src.close()
        return src.lines, "elementwise", 0, 0
    src(f"const {I} CH = chunk > 0 ? ({I})(chunk < N ? chunk : N) : ({I}){min(DEFAULT_CHUNK, N)};")
    src("const " + I + " items = (N + CH - 1) / CH;")
    pf = _pragma_for(opts)
    if pf:
        src(pf)
    src.open(f"for ({I} it = 0; it < items; it++)")
    src(f"{I} p = it * CH;")
    src(f"const {I} pend = p + CH < N ? p + CH : N;")
    _odometer_decompose(src, I, "p", sizes, cstrides, offs, nb)

    def index_of(dim):
        for cd, ds in enumerate(dims):
            if dim in ds:
                if len(ds) != 1:
                    raise AssertionError("render: Index of a merged dim")
                return f"(int64_t)(i{cd} + j)" if cd == last else f"(int64_t)i{cd}"
        if 0 <= dim < len(shape):
            return "(int64_t)0"
        raise ValueError(f"render: Index({dim}) in a {len(shape)}-d iteration space")

    src.open("while (p < pend)")
    src(f"{I} len = {sizes[last]} - i{last};")
    src("if (len > pend - p) len = pend - p;")
    for ln in _pragma_simd(opts):
        src(ln)
    src.open(f"for ({I} j = 0; j < len; j++)")
    scope = _Scope(gen, k.inputs, lambda b: f"in{b}[o{b} + j * {cstrides[b][last]}]"
                   if cstrides[b][last] else f"in{b}[o{b}]", index_of)
    vals = [scope.value(e) for e in k.exprs]
    src(*scope.lines)
    for i, (e, od, val) in enumerate(zip(k.exprs, k.out_dtypes, vals)):
        src(f"out{i}[p + j] = {_store_code(val, e.dtype, od)};")
    src.close()
    src("p += len;")
    if D > 1:
        src.open("if (p < pend)")
        src(f"i{last} = 0;")
        for b in range(nb):
            if cstrides[b][last]:
                # back to the row start, then step the next dim
                src(f"o{b} += (len - {sizes[last]}) * {cstrides[b][last]};")
        src(f"/* i{last} was {sizes[last]} - len before this row */")
        _odometer_advance(src, sizes, cstrides, nb, last - 1)
        src.close()
    src.close()   # while
    src.close()   # for items
    src.close()   # function
    items = (N + DEFAULT_CHUNK - 1) // DEFAULT_CHUNK
    return src.lines, "elementwise", N, items


# -- reductions -----------------------------------------------------------------------------
def _acc_ops(op: str, d: dt.DType):
    """(identity C literal, combine(a, b) -> C code) of a reduction in compute dtype d."""
    if d.is_bool:
        if op == "max":
            return "((uint8_t)0)", lambda a, b: f"(uint8_t)({a} | {b})"
        if op == "min":
            return "((uint8_t)1)", lambda a, b: f"(uint8_t)({a} & {b})"
        raise TypeError(f"render: reduce {op} of a bool prologue; cast it first")
    if op in ("sum", "prod") and d.is_int:
        # Unsigned accumulators: wrapping sums in them are plain modular arithmetic (and GCC
        # 12 -O3 miscompiles vectorized reductions into narrow *signed* accumulators).
        u, w = UNSIGNED[d], WIDE[d]
        sym = "+" if op == "sum" else "*"
        return (f"(({u}){0 if op == 'sum' else 1})",
                lambda a, b: f"(({u})(({w}){a} {sym} ({w}){b}))")
    if op == "sum":
        return _DIALECT.float_lit(-0.0, d), lambda a, b: _binary_code("add", a, b, d)
    if op == "prod":
        return _DIALECT.float_lit(1.0, d), lambda a, b: _binary_code("mul", a, b, d)
    if op == "max":
        return _DIALECT.minmax_lit(d, "min"), lambda a, b: _binary_code("max", a, b, d)
    if op == "min":
        return _DIALECT.minmax_lit(d, "max"), lambda a, b: _binary_code("min", a, b, d)
    raise ValueError(f"render: unknown reduce op {op!r}; valid: {sorted(ir.REDUCE_OPS)}")


def _render_reduce(k: ir.Reduce, gen: _Gen, I: str) -> tuple:
    opts = gen.opts
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
    ident, comb = _acc_ops(k.op, AD)
    # accumulator storage type: unsigned for int sums and products (see _acc_ops)
    ACC = UNSIGNED[AD] if AD.is_int and k.op in ("sum", "prod") else C_TYPE[AD]
    ACCV = C_TYPE[AD]     # the reduced value the epilogue sees
    pairwise = k.op == "sum" and AD.is_float
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
    bc = bool(getattr(k, "broadcast", False))
    # broadcast: the output has the full shape; its offset o{nb} walks with the inputs'
    full_cs = contig(shape)
    out_ks = [full_cs[d] for d in kept] if bc else contig(kshape)
    OSA = full_cs[a] if bc else 0
    sizes, cstrides, dims = _collapse(kshape, ks + [out_ks], merge=not use_index)
    nbo = nb + 1 if bc else nb          # buffers the odometer tracks (+ the output)
    offs_o = offs + [0]
    cstrides = cstrides[:nbo]
    D = len(sizes)
    cdims = [[kept[i] for i in ds] for ds in dims]   # collapsed dim -> original dims

    # mode
    mode = "row"
    if D and R > 1 and P > 1 and sizes[-1] >= 4:
        row_score = sum(1 for b in pro_loads if abs(sa[b]) == 1)
        col_score = sum(1 for b in pro_loads if abs(cstrides[b][-1]) == 1)
        if col_score > row_score:
            mode = "column"
    if mode == "row" and R >= 2 * SPLIT_SEG and P <= 16:
        mode = "split"

    src = Src()
    _header(k, gen, src, I, (k.out_dtype,))
    if P == 0 or (bc and R == 0):
        src.close()
        return src.lines, "row", 0, 0
    src(f"const {I} P = {P};")
    src(f"const {I} R = {R}; (void)R;")
    pf = _pragma_for(opts)

    def idx_fn(kvar, in_epi, inner_j=None):
        def f(dim):
            if not 0 <= dim < nd:
                raise ValueError(f"render: Index({dim}) in a {nd}-d iteration space")
            if dim == a:
                return "(int64_t)0" if in_epi and not bc else f"(int64_t)({kvar})"
            for cd, ds in enumerate(cdims):
                if dim in ds:
                    if len(ds) != 1:
                        raise AssertionError("render: Index of a merged dim")
                    if inner_j is not None and cd == D - 1:
                        return f"(int64_t)(i{cd} + {inner_j})"
                    return f"(int64_t)i{cd}"
            return "(int64_t)0"
        return f

    def pro_value(kexpr, jexpr=None):
        """Emit the prologue at reduction index kexpr (and column lane jexpr)."""
        def load(b):
            parts = [f"o{b}"]
            if sa[b]:
                parts.append(f"({kexpr}) * {sa[b]}")
            if jexpr is not None and cstrides[b][-1]:
                parts.append(f"{jexpr} * {cstrides[b][-1]}")
            return f"in{b}[{' + '.join(parts)}]"
        sc = _Scope(gen, k.inputs, load, idx_fn(kexpr, False, jexpr))
        val = sc.value(k.prologue)
        return sc.lines, val

    def epi_store(accv, outidx, jexpr=None):
        def load(b):
            if jexpr is not None and cstrides[b][-1]:
                return f"in{b}[o{b} + {jexpr} * {cstrides[b][-1]}]"
            return f"in{b}[o{b}]"
        sc = _Scope(gen, k.inputs, load, idx_fn("0", True, jexpr), acc=accv, acc_dtype=AD)
        val = sc.value(k.epilogue)
        src(*sc.lines)
        src(f"out0[{outidx}] = {_store_code(val, k.epilogue.dtype, k.out_dtype)};")

    def epi_sweep(accv, kb, ke):
        """Broadcast (row and split modes): the epilogue at every k in [kb, ke) of the row
        whose reduced value is ``accv``."""
        src.open("")
        src(f"const {ACCV} accb_ = {accv};")
        src(*_pragma_simd(opts))
        src.open(f"for ({I} kk = {kb}; kk < {ke}; kk++)")

        def load(b):
            parts = [f"o{b}"]
            if sa[b]:
                parts.append(f"kk * {sa[b]}")
            return f"in{b}[{' + '.join(parts)}]"
        sc = _Scope(gen, k.inputs, load, idx_fn("kk", True), acc="accb_", acc_dtype=AD)
        val = sc.value(k.epilogue)
        src(*sc.lines)
        src(f"out0[o{nb} + kk * {OSA}] = {_store_code(val, k.epilogue.dtype, k.out_dtype)};")
        src.close()
        src.close()

    def col_sweep(W):
        """Broadcast sweep of column mode: the epilogue at every (k, lane j). Its parts that
        do not depend on k (``rsqrt(var + eps)``, the mean: anything not reading an input
        along the reduced axis) are computed once per lane into arrays first. When the
        output is contiguous along the reduced axis rather than the lanes (a reduction over
        a swapped dim), blocks of lanes x rows are computed into a tile (contiguous reads)
        and written out transposed (contiguous writes) instead of storing with a stride."""
        variant = _axis_variant(k.epilogue, sa, a)
        front = _invariant_frontier(k.epilogue, variant)
        if len(front) > 32:         # per-lane arrays on the stack: keep them few
            front = []
        osj = cstrides[nb][-1]
        tiled = osj != 1 and OSA == 1 and R > 1

        def load(b, kexpr):
            parts = [f"o{b}"]
            if sa[b] and kexpr is not None:
                parts.append(f"{kexpr} * {sa[b]}")
            if cstrides[b][-1]:
                parts.append(f"j * {cstrides[b][-1]}")
            return f"in{b}[{' + '.join(parts)}]"

        src.open("")
        seeds = {}
        if front:
            for i, n in enumerate(front):
                src(f"{C_TYPE[_cd(n.dtype)]} h{i}_[{W}];")
            src(*_pragma_simd(opts))
            src.open(f"for ({I} j = 0; j < jn; j++)")
            sc = _Scope(gen, k.inputs, lambda b: load(b, None), idx_fn("0", True, "j"),
                        acc="acc[j]", acc_dtype=AD)
            vals = [sc.value(n) for n in front]
            src(*sc.lines)
            for i, v in enumerate(vals):
                src(f"h{i}_[j] = {v};")
            src.close()
            seeds = {id(n): f"h{i}_[j]" for i, n in enumerate(front)}

        def body(kexpr):
            sc = _Scope(gen, k.inputs, lambda b: load(b, kexpr), idx_fn(kexpr, True, "j"),
                        acc="acc[j]", acc_dtype=AD)
            for n in front:
                sc.memo[id(n)] = seeds[id(n)]
                sc.keep.append(n)
            val = sc.value(k.epilogue)
            return sc.lines, _store_code(val, k.epilogue.dtype, k.out_dtype)

        if tiled:
            # lanes in blocks of JB, rows in blocks of RB: a block is computed into the
            # tile row by row (reads contiguous along the lanes), then each lane's run of
            # RB outputs is written contiguously (the tile read down a column, in L1)
            isz = k.out_dtype.itemsize
            JB = 16
            RB = min(R, max(16, 16384 // (JB * isz)))
            st = _storage_c(k.out_dtype)
            src(f"{st} tile_[{RB}][{JB}];")
            src.open(f"for ({I} jb = 0; jb < jn; jb += {JB})")
            src(f"const {I} jm = jn - jb < {JB} ? jn - jb : {JB};")
            src.open(f"for ({I} kb = 0; kb < R; kb += {RB})")
            src(f"const {I} kn = R - kb < {RB} ? R - kb : {RB};")
            src.open(f"for ({I} k2 = 0; k2 < kn; k2++)")
            src(f"const {I} kk = kb + k2;")
            src(*_pragma_simd(opts))
            src.open(f"for ({I} jj = 0; jj < jm; jj++)")
            src(f"const {I} j = jb + jj;")
            lines, code = body("kk")
            src(*lines)
            src(f"tile_[k2][jj] = {code};")
            src.close()
            src.close()
            src.open(f"for ({I} jj = 0; jj < jm; jj++)")
            src(*_pragma_simd(opts))
            src.open(f"for ({I} k2 = 0; k2 < kn; k2++)")
            src(f"out0[o{nb} + (kb + k2) + (jb + jj) * {osj}] = tile_[k2][jj];")
            src.close()
            src.close()
            src.close()
            src.close()
        else:
            src.open(f"for ({I} kk = 0; kk < R; kk++)")
            src(*_pragma_simd(opts))
            src.open(f"for ({I} j = 0; j < jn; j++)")
            lines, code = body("kk")
            src(*lines)
            oidx = [f"o{nb}", f"kk * {OSA}"]
            if osj:
                oidx.append(f"j * {osj}")
            src(f"out0[{' + '.join(oidx)}] = {code};")
            src.close()
            src.close()
        src.close()

    def tree8(target_decl: str):
        """Combine a_[0..7] pairwise into ``target_decl`` (e.g. ``"float s_"``)."""
        src(f"const {ACC} c01_ = {comb('a_[0]', 'a_[1]')}, c23_ = {comb('a_[2]', 'a_[3]')};")
        src(f"const {ACC} c45_ = {comb('a_[4]', 'a_[5]')}, c67_ = {comb('a_[6]', 'a_[7]')};")
        src(f"const {ACC} c03_ = {comb('c01_', 'c23_')}, c47_ = {comb('c45_', 'c67_')};")
        src(f"{target_decl} = {comb('c03_', 'c47_')};")

    def row_reduce(target, kb: str, ke: str):
        """Emit code setting ``target`` (declared) to the reduction over k in [kb, ke)."""
        src.open("")
        if pairwise:
            src(f"{ACC} st_[64]; int top_ = 0; int64_t nblk_ = 0;")
            src.open(f"for ({I} k0 = {kb}; k0 < {ke}; k0 += {ROW_BLOCK})")
            src(f"const {I} kn = ({ke}) - k0 < {ROW_BLOCK} ? ({ke}) - k0 : {ROW_BLOCK};")
            src(f"{ACC} a_[8]; for (int u = 0; u < 8; u++) a_[u] = {ident};")
            src(f"{I} kk = 0;")
            src.open("for (; kk + 8 <= kn; kk += 8)")
            src("#pragma GCC unroll 8")
            src.open("for (int u = 0; u < 8; u++)")
            lines, val = pro_value("k0 + kk + u")
            src(*lines)
            src(f"a_[u] = {comb('a_[u]', val)};")
            src.close()
            src.close()
            tree8(f"{ACC} s_")
            src.open("for (; kk < kn; kk++)")
            lines, val = pro_value("k0 + kk")
            src(*lines)
            src(f"s_ = {comb('s_', val)};")
            src.close()
            src("nblk_++;")
            src(f"for (int64_t c_ = nblk_; (c_ & 1) == 0; c_ >>= 1) "
                f"s_ = {comb('st_[--top_]', 's_')};")
            src("st_[top_++] = s_;")
            src.close()
            src.open("if (top_ == 0)")
            src(f"{target} = {_DIALECT.float_lit(0.0, AD)};")
            src.close()
            src.open("else")
            src(f"{ACC} s_ = st_[--top_];")
            src(f"while (top_ > 0) {{ s_ = {comb('st_[top_ - 1]', 's_')}; top_--; }}")
            src(f"{target} = s_;")
            src.close()
        else:
            # LANES accumulators updated by an `omp simd` loop (GCC vectorizes this form of
            # NaN-propagating max/min; an unrolled 8-way with a combine tree stays scalar)
            L = ROW_LANES
            src(f"{ACC} a_[{L}]; for (int u = 0; u < {L}; u++) a_[u] = {ident};")
            src(f"{I} kk = {kb};")
            src.open(f"for (; kk + {L} <= {ke}; kk += {L})")
            if opts.openmp:
                src("#pragma omp simd")
            src.open(f"for (int u = 0; u < {L}; u++)")
            lines, val = pro_value("kk + u")
            src(*lines)
            src(f"a_[u] = {comb('a_[u]', val)};")
            src.close()
            src.close()
            src(f"{ACC} s_ = a_[0];")
            src(f"for (int u = 1; u < {L}; u++) s_ = {comb('s_', 'a_[u]')};")
            src.open(f"for (; kk < {ke}; kk++)")     # the tail, after the lanes combine
            lines, val = pro_value("kk")
            src(*lines)
            src(f"s_ = {comb('s_', val)};")
            src.close()
            src(f"{target} = s_;")
        src.close()

    if mode == "row":
        work = P * max(R, 1) * (2 if bc else 1)
        default_chp = max(1, DEFAULT_CHUNK // max(R, 1))
        rr = max(R, 1)
        src(f"const {I} CHP = chunk > 0 ? ({I})(chunk / {rr} > 0 ? chunk / {rr} : 1) "
            f": {default_chp};")
        src(f"const {I} items = (P + CHP - 1) / CHP;")
        if pf:
            src(pf)
        src.open(f"for ({I} it = 0; it < items; it++)")
        src(f"{I} p = it * CHP;")
        src(f"const {I} pend = p + CHP < P ? p + CHP : P;")
        _odometer_decompose(src, I, "p", sizes, cstrides, offs_o, nbo)
        src.open("for (;;)")
        src(f"{ACCV} acc;")
        row_reduce("acc", "0", "R")
        if bc:
            epi_sweep("acc", "0", "R")
        else:
            epi_store("acc", "p")
        src("p++;")
        src("if (p >= pend) break;")
        if D:
            _odometer_advance(src, sizes, cstrides, nbo, D - 1)
        src.close()
        src.close()
        items = (P + default_chp - 1) // default_chp
    elif mode == "split":
        work = P * R
        NS = (R + SPLIT_SEG - 1) // SPLIT_SEG
        src(f"const {I} NS = {NS};")
        src(f"{ACC} *part = ({ACC} *)__builtin_malloc(sizeof({ACC}) * (size_t)(P * NS));")
        src.open("if (part)")
        if pf:
            src(pf)
        src.open(f"for ({I} it = 0; it < P * NS; it++)")
        src(f"const {I} p = it / NS, sg = it % NS;")
        _odometer_decompose(src, I, "p", sizes, cstrides, offs, nb)
        src(f"const {I} kb = sg * {SPLIT_SEG};")
        src(f"const {I} ke = kb + {SPLIT_SEG} < R ? kb + {SPLIT_SEG} : R;")
        src(f"{ACC} v_;")
        row_reduce("v_", "kb", "ke")
        src("part[it] = v_;")
        src.close()
        src.close()   # if (part); without scratch memory the serial path below computes
        if bc:
            src(f"{ACCV} accs_[{P}];")
        src.open(f"for ({I} p = 0; p < P; p++)")
        _odometer_decompose(src, I, "p", sizes, cstrides, offs, nb)
        src(f"{ACCV} acc;")
        src.open("if (!part)")
        row_reduce("acc", "0", "R")
        src.close()
        src.open("else")
        if pairwise:
            src(f"{ACC} st_[64]; int top_ = 0;")
            src.open(f"for ({I} sg = 0; sg < NS; sg++)")
            src(f"{ACC} s_ = part[p * NS + sg];")
            src(f"for (int64_t c_ = (int64_t)sg + 1; (c_ & 1) == 0; c_ >>= 1) "
                f"s_ = {comb('st_[--top_]', 's_')};")
            src("st_[top_++] = s_;")
            src.close()
            src(f"{ACC} s_ = st_[--top_];")
            src(f"while (top_ > 0) {{ s_ = {comb('st_[top_ - 1]', 's_')}; top_--; }}")
            src("acc = s_;")
        else:
            src(f"{ACC} s_ = part[p * NS];")
            src(f"for ({I} sg = 1; sg < NS; sg++) s_ = {comb('s_', 'part[p * NS + sg]')};")
            src("acc = s_;")
        src.close()
        if bc:
            src("accs_[p] = acc;")
        else:
            epi_store("acc", "p")
        src.close()
        src("__builtin_free(part);")
        if bc:      # the broadcast sweep, in parallel over the same segments
            if pf:
                src(pf)
            src.open(f"for ({I} it = 0; it < P * NS; it++)")
            src(f"const {I} p = it / NS, sg = it % NS;")
            _odometer_decompose(src, I, "p", sizes, cstrides, offs_o, nbo)
            src(f"const {I} kb = sg * {SPLIT_SEG};")
            src(f"const {I} ke = kb + {SPLIT_SEG} < R ? kb + {SPLIT_SEG} : R;")
            epi_sweep("accs_[p]", "kb", "ke")
            src.close()
            work *= 2
        items = P * NS
    else:   # column
        work = P * R
        NV = sizes[-1]
        outer_sizes = sizes[:-1]
        PO = prod(outer_sizes)
        W = max(16, (opts.col_bytes or COL_BYTES) // SIZE[ACC])
        while W > 16 and NV <= W // 2:
            W //= 2
        # a long reduced axis under too few work items to share out: segments of it reduce
        # in parallel, each item keeping the full lanes (a sweep of whole cache lines), and
        # are combined in order (split); else fewer lanes make more items
        NS = 1
        if not bc and R >= 2 * COL_SPLIT_SEG and PO * ((NV + W - 1) // W) < 16:
            NS = (R + COL_SPLIT_SEG - 1) // COL_SPLIT_SEG
        while NS == 1 and W > 16 and PO * ((NV + W - 1) // W) < 16:
            W //= 2        # fewer lanes when the items would be too few to share out
        nvb = (NV + W - 1) // W
        simd = _pragma_simd(opts)

        def col_setup(q):
            """po, j0, jn and the offsets o{b} of work item ``q`` (outer position, lanes)."""
            src(f"const {I} po = {q} / NVB, j0 = ({q} % NVB) * {W};")
            src(f"const {I} jn = {NV} - j0 < {W} ? {NV} - j0 : {W};")
            # outer multi-index (dims 0..D-2) from po, then the lane dim from j0
            _odometer_decompose(src, I, "po", outer_sizes, [st[:-1] for st in cstrides],
                                offs_o, nbo)
            src(f"{I} i{D - 1} = j0; (void)i{D - 1};")
            for b in range(nbo):
                if cstrides[b][-1] != 0:
                    src(f"o{b} += i{D - 1} * {cstrides[b][-1]};")

        def stack_push(lanes, count):
            """Push the lane array ``lanes`` onto the binary-counter stack ``st_``, first
            combining it with the entries it completes (``count``: blocks so far, this one
            included)."""
            src.open(f"for (int64_t c_ = {count}; (c_ & 1) == 0; c_ >>= 1)")
            src("--top_;")
            src(f"for ({I} j = 0; j < {W}; j++) {lanes}[j] = "
                f"{comb('st_[top_][j]', lanes + '[j]')};")
            src.close()
            src(f"for ({I} j = 0; j < {W}; j++) st_[top_][j] = {lanes}[j];")
            src("top_++;")

        def stack_drain():
            """``acc``: the stack's entries (at least one) combined, oldest first."""
            src("--top_;")
            src(f"for ({I} j = 0; j < {W}; j++) acc[j] = st_[top_][j];")
            src.open("while (top_ > 0)")
            src("--top_;")
            src(f"for ({I} j = 0; j < {W}; j++) acc[j] = {comb('st_[top_][j]', 'acc[j]')};")
            src.close()

        def col_reduce(kb, ke, rows):
            """``acc[W]``: the lanes reduced over rows [kb, ke) (``rows`` at most): pairwise
            sums in blocks of ROW_BLOCK rows combined by a binary-counter stack (blocks
            aligned at kb, a multiple of ROW_BLOCK), other reductions in order."""
            if pairwise:
                nblocks = max(1, (rows + ROW_BLOCK - 1) // ROW_BLOCK)
                depth = max(1, math.ceil(math.log2(nblocks)) + 1) if nblocks > 1 else 1
                src(f"{ACC} st_[{depth}][{W}]; int top_ = 0; int64_t nblk_ = 0;")
                src.open(f"for ({I} k0 = {kb}; k0 < {ke}; k0 += {ROW_BLOCK})")
                src(f"const {I} kx = k0 + {ROW_BLOCK} < {ke} ? k0 + {ROW_BLOCK} : {ke};")
                src(f"{ACC} blk[{W}];")
                src(f"for ({I} j = 0; j < {W}; j++) blk[j] = {ident};")
                src.open(f"for ({I} kk = k0; kk < kx; kk++)")
                src(*simd)
                src.open(f"for ({I} j = 0; j < jn; j++)")
                lines, val = pro_value("kk", "j")
                src(*lines)
                src(f"blk[j] = {comb('blk[j]', val)};")
                src.close()
                src.close()
                src("nblk_++;")
                stack_push("blk", "nblk_")
                src.close()
                src.open("if (top_ == 0)")
                src(f"for ({I} j = 0; j < {W}; j++) acc[j] = {_DIALECT.float_lit(0.0, AD)};")
                src.close()
                src.open("else")
                stack_drain()
                src.close()
            else:
                src(f"for ({I} j = 0; j < {W}; j++) acc[j] = {ident};")
                src.open(f"for ({I} kk = {kb}; kk < {ke}; kk++)")
                src(*simd)
                src.open(f"for ({I} j = 0; j < jn; j++)")
                lines, val = pro_value("kk", "j")
                src(*lines)
                src(f"acc[j] = {comb('acc[j]', val)};")
                src.close()
                src.close()

        src(f"const {I} NVB = {nvb};")
        if NS > 1:
            # each (item, segment) reduces its rows into part; then each item combines its
            # segments' partials in order -- for sums, as the counter stack above would have
            # (a segment is a power of two number of blocks): the result does not depend on
            # splitting or on the thread count
            depth_s = max(1, math.ceil(math.log2(NS)) + 1)
            src(f"const {I} NS = {NS};")
            src(f"{ACC} *part = ({ACC} *)__builtin_malloc(sizeof({ACC}) * "
                f"(size_t)({PO} * NVB * NS * {W}));")
            src.open("if (part)")
            if pf:
                src(pf)
            src.open(f"for ({I} it = 0; it < {PO} * NVB * NS; it++)")
            src(f"const {I} q_ = it / NS, sg = it % NS;")
            col_setup("q_")
            src(f"const {I} kb = sg * {COL_SPLIT_SEG};")
            src(f"const {I} ke = kb + {COL_SPLIT_SEG} < R ? kb + {COL_SPLIT_SEG} : R;")
            src(f"{ACC} acc[{W}];")
            col_reduce("kb", "ke", COL_SPLIT_SEG)
            src(f"for ({I} j = 0; j < {W}; j++) part[it * {W} + j] = acc[j];")
            src.close()
            src.close()   # if (part); without scratch memory the serial path below computes
            if pf:
                src(pf)
            src.open(f"for ({I} q_ = 0; q_ < {PO} * NVB; q_++)")
            col_setup("q_")
            src(f"{ACC} acc[{W}];")
            src.open("if (!part)")
            col_reduce("0", "R", R)
            src.close()
            src.open("else")
            src(f"const {ACC} *pq_ = part + q_ * NS * {W};")
            if pairwise:
                src(f"{ACC} st_[{depth_s}][{W}]; int top_ = 0;")
                src.open(f"for ({I} sg = 0; sg < NS; sg++)")
                src(f"{ACC} s_[{W}];")
                src(f"for ({I} j = 0; j < {W}; j++) s_[j] = pq_[sg * {W} + j];")
                stack_push("s_", "(int64_t)sg + 1")
                src.close()
                stack_drain()
            else:
                src(f"for ({I} j = 0; j < {W}; j++) acc[j] = pq_[j];")
                src(f"for ({I} sg = 1; sg < NS; sg++) for ({I} j = 0; j < {W}; j++) "
                    f"acc[j] = {comb('acc[j]', 'pq_[sg * ' + str(W) + ' + j]')};")
            src.close()
            src.open(f"for ({I} j = 0; j < jn; j++)")
            epi_store("acc[j]", f"po * {NV} + j0 + j", "j")
            src.close()
            src.close()
            src("__builtin_free(part);")
            items = PO * nvb * NS
        else:
            src(f"const {I} items = {PO} * NVB;")
            if pf:
                src(pf)
            src.open(f"for ({I} it = 0; it < items; it++)")
            col_setup("it")
            src(f"{ACC} acc[{W}];")
            col_reduce("0", "R", R)
            if bc:
                col_sweep(W)
                work *= 2
            else:
                src.open(f"for ({I} j = 0; j < jn; j++)")
                epi_store("acc[j]", f"po * {NV} + j0 + j", "j")
                src.close()
            src.close()
            items = PO * nvb
    src.close()   # function
    return src.lines, mode, work, items


def render(kernel, options: Options = Options()) -> Rendered:
    """The C source of ``kernel`` (`ir.Elementwise` or `ir.Reduce`)."""
    if not isinstance(kernel, (ir.Elementwise, ir.Reduce)):
        raise TypeError(f"render: not a kernel: {type(kernel).__name__}")
    idx32 = bool(options.idx32) and fits_idx32(kernel)
    I = "int32_t" if idx32 else "int64_t"
    gen = _Gen(options, len(kernel.args))
    if isinstance(kernel, ir.Elementwise):
        body, mode, work, items = _render_elementwise(kernel, gen, I)
    else:
        body, mode, work, items = _render_reduce(kernel, gen, I)
    pre = [_PRE_WIDE] if options.wide else []
    pre += [_PRE_COMMON.strip("\n"),
            (_PRE_HALF_NATIVE if options.float16 else _PRE_HALF_BITS).strip("\n")]
    pre += list(gen.helpers.values())
    return Rendered(source="\n".join(pre + body) + "\n", mode=mode, work=work, items=items,
                    idx32=idx32)
