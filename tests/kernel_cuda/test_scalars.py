"""How generated CUDA kernels take their scalar args (ember/kernel/cuda/scalars.py): the
host's encoding against NumPy's f32 rounding and f32 division, and the kernel's decoding
(the rendered declarations, compiled as C) against the host's encoding, without a GPU."""
from __future__ import annotations

import math
import subprocess
import types

import numpy as np
import pytest

from ember import dtype as dt
from ember.errors import ShapeError
from ember.kernel import ir
from ember.kernel.c.compiler import find_compiler
from ember.kernel.cuda import render as R
from ember.kernel.cuda import scalars as S
from ember.kernel.cuda.runtime import CudaKernelRuntime
from tests.kernel_cuda._util import C_PRELUDE

RNG = np.random.default_rng(11)


def _values():
    """Normal, subnormal, huge (beyond f32), signed zeros, infinities, NaN; the divisor
    range's ends and their neighbours."""
    v = [0.0, -0.0, math.inf, -math.inf, math.nan, 1e-45, -1e-45, 3e-39, 1e-46, 3.4028235e38,
         3.4028236e38, 3.5e38, -1e39, 1e300, 1.0, math.sqrt(2.0), 0.1, -2.5, 2.0 ** -20,
         2.0 ** 20, -(2.0 ** 20), float.fromhex("0x1.fffffffp19"),
         float.fromhex("0x1.0000001p20"), float.fromhex("0x1.fffffffp-21"),
         float.fromhex("0x1.0000008p-20")]
    v += list(np.exp(RNG.uniform(-100, 100, 3000)) * RNG.choice([-1, 1], 3000))
    return [float(x) for x in v]


def _np_f32(x: float) -> np.float32:
    with np.errstate(over="ignore"):
        return np.float32(x)


def test_f32_slot_is_numpys_rounding_in_the_low_half():
    for x in _values():
        s = S.f32_slot(x)
        want = int(_np_f32(x).view(np.uint32))
        if math.isnan(x):
            low = np.uint32(s & 0xFFFFFFFF).view(np.float32)
            assert math.isnan(float(low)) and s >> 32 == 0
            continue
        assert s == want, (x, hex(s), hex(want))


def test_divisor_slot_carries_the_f32_division_of_one_by_it():
    """High half: NumPy's f32 ``1 / c`` (the kernel divided so before) where the
    multiply-and-correct division serves ``c``; 0 elsewhere."""
    for x in _values():
        s = S.divisor_slot(x)
        c = _np_f32(x)
        if math.isnan(x):
            assert s >> 32 == 0
            continue
        assert s & 0xFFFFFFFF == int(c.view(np.uint32)), x
        if S.DIVM_RANGE[0] <= abs(float(c)) <= S.DIVM_RANGE[1]:
            want = int((np.float32(1.0) / c).view(np.uint32))
        else:
            want = 0
        assert s >> 32 == want, (x, hex(s >> 32), hex(want))
        assert S.divisor_slot(x) == s                       # memoized alike


def test_kinds_by_compute_dtype_and_use():
    args = (dt.float32, dt.float64, dt.float16, dt.int64, dt.from_name("bool"), dt.float32)
    assert S.kinds(args, {0, 1}) == ("f32/", "f64", "f32", "int", "int", "f32")
    x = ir.Load(0, dt.float32)
    k = ir.Elementwise((8,), (ir.BufferView(dt.float32, (1,)),),
                       (x / ir.Arg(0, dt.float32) + x * ir.Arg(1, dt.float32),),
                       (dt.float32,), (dt.float32, dt.float32))
    assert R.arg_kinds(k) == ("f32/", "f32")


def test_arg_values_convert_each_kind_and_count_them():
    prog = types.SimpleNamespace(arg_convert=tuple(S.CONVERT[k] for k in
                                                   ("f64", "f32", "f32/", "int")))
    got = CudaKernelRuntime._arg_values(prog, [0.1, 0.1, 2.0, -1])
    assert got == [0.1, int(np.float32(0.1).view(np.uint32)),
                   int(np.float32(2).view(np.uint32)) | (int(np.float32(0.5).view(np.uint32))
                                                         << 32), -1]
    assert CudaKernelRuntime._arg_values(prog, [0.0, 0.0, 1.0, 2 ** 64 - 1])[3] == -1
    with pytest.raises(ShapeError, match="takes 4 scalar args, got 3"):
        CudaKernelRuntime._arg_values(prog, [1.0, 2.0, 3.0])


def test_the_kernels_declarations_decode_what_the_host_encodes(tmp_path):
    """The rendered declarations of an f32 divisor, an f32 and an f64 arg, compiled as C
    with the host's parameters: the values, the reciprocal and the range flag the kernel
    body reads."""
    cc, why = find_compiler()
    if cc is None:
        pytest.skip(f"no C compiler: {why}")
    x = ir.Load(0, dt.float32)
    k = ir.Elementwise((8,), (ir.BufferView(dt.float32, (1,)),),
                       (x / ir.Arg(0, dt.float32) + x * ir.Arg(1, dt.float32)
                        + ir.cast(ir.Arg(2, dt.float64), dt.float32),),
                       (dt.float32,), (dt.float32, dt.float32, dt.float64))
    decls = "\n  ".join(R._arg_decls(k))
    params = R._params(k, k.out_dtypes, False, False).split(", ")
    assert params[-3:] == ["const unsigned long long arg0_", "const unsigned long long arg1_",
                           "const double arg2_"]
    src = tmp_path / "decode.c"
    src.write_text(C_PRELUDE + r"""
static void decode(unsigned long long arg0_, unsigned long long arg1_, double arg2_) {
  """ + decls + r"""
  printf("%08x %08x %d %08x %.17g\n", __float_as_uint(arg0), __float_as_uint(argy0),
         (int)argok0, __float_as_uint(arg1), arg2);
}
int main(int argc, char **argv) {
  for (int a = 1; a + 2 < argc; a += 3)
    decode(strtoull(argv[a], 0, 10), strtoull(argv[a + 1], 0, 10), strtod(argv[a + 2], 0));
  return 0;
}
""")
    exe = tmp_path / "decode"
    flags = ["-O1", "-std=c99", "-Werror=implicit-function-declaration"]
    subprocess.run(cc + flags + [str(src), "-o", str(exe), "-lm"], check=True,
                   capture_output=True)
    vals = [v for v in _values()[:60] if not math.isnan(v)]
    argv = []
    for v in vals:
        argv += [str(S.divisor_slot(v)), str(S.f32_slot(-v)), repr(v)]
    out = subprocess.run([str(exe)] + argv, capture_output=True, text=True,
                         check=True).stdout.split("\n")
    for v, line in zip(vals, out):
        c_bits, y_bits, ok, m_bits, d = line.split()
        c = _np_f32(v)
        ok_want = S.DIVM_RANGE[0] <= abs(float(c)) <= S.DIVM_RANGE[1]
        assert int(c_bits, 16) == int(c.view(np.uint32)), v
        assert int(ok) == int(ok_want), v
        if ok_want:
            assert int(y_bits, 16) == int((np.float32(1) / c).view(np.uint32)), v
        assert int(m_bits, 16) == int(_np_f32(-v).view(np.uint32)), v
        assert float(d) == v
