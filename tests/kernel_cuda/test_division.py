"""The CUDA renderer's f32 division by a kernel constant (`render._DIVM`: a multiply by the
reciprocal and Markstein's correction) gives the IEEE division's bits wherever its range
check lets it run. The helpers' own source text is checked, against the division itself:
on the CPU (compiled as C, the CPU's FMA) over a sample of every exponent and the specials,
on a GPU over all 2^32 x. The rendered kernels are compared with the interpreter in
test_kernels.py ("division by a constant")."""
from __future__ import annotations

import math
import subprocess

import numpy as np
import pytest

from ember.kernel.c.compiler import find_compiler
from ember.kernel.cuda import render as R
from tests.kernel_cuda._util import C_PRELUDE, gpu_or_skip, nvrtc_or_skip

# divisors in range (powers of two, all-ones mantissas, the range's ends, negative ones,
# GELU's sqrt(2)) and out of it (the division runs for every x)
DIVISORS = (math.sqrt(2.0), 3.0, 6.0, 7.0, 10.0, 0.1, 0.3, -2.5, 255.0, 1.0, 2.0 ** -20,
            2.0 ** 20, float.fromhex("0x1.fffffep0"), float.fromhex("0x1.fffffep19"),
            float.fromhex("0x1.000002p-20"), float.fromhex("0x1.800002p0"), 1e-6, 1e6,
            2.0 ** 21, 2.0 ** -21, 1e-30, -1e30, 0.0, math.inf, math.nan)

# counts the x (bit patterns lo..hi-1) where the helpers' quotient differs from x / c (the
# divisor's range check as the renderer's kernels do it, from render.DIVM_RANGE)
_CHECK = r"""
EMBER_CHECK long long ember_check(float c, unsigned long long lo, unsigned long long hi,
                                  unsigned long long step) {
  const float y = 1.0f / c;
  const bool ok = fabsf(c) >= LO && fabsf(c) <= HI;
  long long bad = 0;
  for (unsigned long long i = lo; i < hi; i += step) {
    const float x = __uint_as_float((uint32_t)i);
    const float q = ember_divm_redo(x, ok) ? x / c : ember_divm(x, c, y);
    const float d = x / c;
    if (__float_as_uint(q) != __float_as_uint(d) && !(q != q && d != d)) bad++;
  }
  return bad;
}
"""
_CHECK = _CHECK.replace("LO", f"{float.hex(R.DIVM_RANGE[0])}f").replace(
    "HI", f"{float.hex(R.DIVM_RANGE[1])}f")

_C_PRELUDE = C_PRELUDE + "#define EMBER_D static inline\n#define EMBER_CHECK\n"


def test_divisor_range():
    assert R.divm_ok(math.sqrt(2.0)) and R.divm_ok(-(2.0 ** 20)) and R.divm_ok(2.0 ** -20)
    for c in (2.0 ** 21, 2.0 ** -21, 0.0, math.inf, math.nan, 3e-39):
        assert not R.divm_ok(c), c


def test_helpers_give_the_division_on_the_cpu(tmp_path):
    """A strided sample of all 2^32 bit patterns (every exponent, both signs, the
    specials) per divisor, the helpers compiled as C with the CPU's FMA."""
    cc, why = find_compiler()
    if cc is None:
        pytest.skip(f"no C compiler: {why}")
    src = tmp_path / "check.c"
    src.write_text(_C_PRELUDE + R._DIVM + "\n" + _CHECK + r"""
int main(int argc, char **argv) {
  long long bad = 0;
  for (int a = 1; a < argc; a++) {
    const float c = strtof(argv[a], 0);
    /* 2^22 patterns per divisor, an odd stride so every low bit varies */
    long long b = ember_check(c, 0, 1ull << 32, 1021) + ember_check(c, 0, 70000, 1) +
                  ember_check(c, 0x7f7f0000ull, 0x80010000ull, 1) +
                  ember_check(c, 0xff7f0000ull, 1ull << 32, 1);
    if (b) printf("divisor %a: %lld wrong\n", c, b);
    bad += b;
  }
  return bad != 0;
}
""")
    exe = tmp_path / "check"
    flags = ["-O2", "-ffp-contract=off", "-fno-fast-math", "-std=c99"]
    subprocess.run(cc + flags + [str(src), "-o", str(exe), "-lm"], check=True,
                   capture_output=True)
    r = subprocess.run([str(exe)] + [float.hex(c) for c in DIVISORS], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def _gpu_source() -> str:
    pre = R._PRE.replace("#define EMBER_D", "#define EMBER_CHECK __device__\n#define EMBER_D", 1)
    return pre + R._DIVM + "\n" + _CHECK + r"""
extern "C" __global__ void ember_check_all(const float c, unsigned long long *bad) {
  const unsigned long long n = 1ull << 32, nth = (unsigned long long)gridDim.x * blockDim.x;
  const unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long b = ember_check(c, t, n, nth);
  if (b) atomicAdd(bad, (unsigned long long)b);
}
"""


def test_gpu_check_compiles(tmp_path):
    from ember.kernel.cuda.compiler import default_arch
    c = nvrtc_or_skip(tmp_path)
    assert c.build(_gpu_source(), default_arch()).binary


def test_helpers_give_the_division_on_the_gpu(tmp_path):
    """Every f32 x, each divisor (as the runtime compiles: no FMA contraction)."""
    gpu_or_skip(tmp_path)
    import cupy as cp
    from ember.kernel.cuda.compiler import BASE_OPTIONS
    fn = cp.RawModule(code=_gpu_source(), options=BASE_OPTIONS).get_function("ember_check_all")
    for c in DIVISORS:
        bad = cp.zeros(1, np.uint64)
        fn((1024,), (256,), (np.float32(c), bad))
        assert int(bad.get()[0]) == 0, f"divisor {c!r}: {int(bad.get()[0])} x wrong"
