"""How the host passes a generated CUDA kernel's scalar args (`ir.Arg`): each in one 8-byte
parameter, typed by the arg's compute dtype.

* ``"f64"``: a double.
* ``"f32"``: the f32's bits in the low half of a 64-bit integer -- the kernel reads them as
  they are, where a double would take a conversion in every thread.
* ``"f32/"``: an f32 divisor (`render._const_divisor`): its bits in the low half and, in
  the high half, the bits of its reciprocal rounded to f32 when `divm_ok` serves it
  (else 0). The kernel multiplies by that reciprocal and corrects (`render._DIVM`); computed
  here once a launch, it is not an IEEE division in every thread.
* ``"int"``: a 64-bit integer (ints wrapped to int64).

f32 values round as the kernel's own conversion would (to nearest, beyond the range to
infinity); the reciprocal of an f32 ``c`` is ``1 / c`` in double then rounded to f32, which
is the f32 division's result (a quotient of f32 values rounded to double first and then to
f32 rounds the same: 53 >= 2 * 24 + 2).
"""
from __future__ import annotations

import math
import struct

from ... import dtype as dt
from .. import ir

_F32 = struct.Struct("<f")
_U32 = struct.Struct("<I")
#: the divisors the multiply-and-correct division (`render._DIVM`) serves
DIVM_RANGE = (2.0 ** -20, 2.0 ** 20)
#: ``struct`` format character of each kind's parameter
FMT = {"f64": "d", "f32": "Q", "f32/": "Q", "int": "q"}
#: the C type of each kind's parameter in the kernel's signature
C_PARAM = {"f64": "double", "f32": "unsigned long long", "f32/": "unsigned long long",
           "int": "long long"}

_cache: dict = {}


def kinds(args, divisors) -> tuple:
    """The kind of each arg: ``args`` their dtypes, ``divisors`` the indices of the f32
    divisors."""
    out = []
    for i, d in enumerate(args):
        cd = ir.compute_dtype(d)
        if cd is dt.float32:
            out.append("f32/" if i in divisors else "f32")
        elif cd.is_float:
            out.append("f64")
        else:
            out.append("int")
    return tuple(out)


def divm_ok(c: float) -> bool:
    """Whether the multiply-and-correct division serves the f32 divisor ``c`` (rounded to f32
    first): ``|c|`` in `DIVM_RANGE`."""
    return DIVM_RANGE[0] <= abs(f32_round(float(c))) <= DIVM_RANGE[1]


def f32_round(x: float) -> float:
    """``x`` rounded to f32 (to nearest; beyond the range, infinity)."""
    try:
        return _F32.unpack(_F32.pack(x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def _f32_bits(x: float) -> int:
    try:
        return _U32.unpack(_F32.pack(x))[0]
    except OverflowError:
        return 0xFF800000 if x < 0 else 0x7F800000


def f32_slot(x) -> int:
    """The parameter of an ``"f32"`` arg."""
    return _f32_bits(float(x))


def divisor_slot(x) -> int:
    """The parameter of an ``"f32/"`` arg (memoized: divisors repeat from step to step)."""
    x = float(x)
    s = _cache.get(x)
    if s is None:
        c = f32_round(x)
        lo = _f32_bits(c)
        y = 1.0 / c if divm_ok(c) else 0.0
        s = lo | (_f32_bits(y) << 32)
        if len(_cache) > 4096:
            _cache.clear()
        if x == x and x != 0.0:             # (NaN never hits; -0.0 would hit 0.0)
            _cache[x] = s
    return s


def _int64(x) -> int:
    return ((int(x) + (1 << 63)) % (1 << 64)) - (1 << 63)


#: the host value of each kind's parameter, from the arg's Python value
CONVERT = {"f64": float, "f32": f32_slot, "f32/": divisor_slot, "int": _int64}
