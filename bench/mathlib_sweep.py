#!/usr/bin/env python
"""The f32 accuracy table of ember/kernel/mathlib.py, measured over every f32 input.

Each named function is compiled by the C renderer (bit-identical to the reference evaluator,
which the tests check) and run over all 2^32 bit patterns in chunks of 2^24; the result is
compared with a float64 reference (NumPy, SciPy's erf) in ulps of the f32 result, as
tests/kernel/test_mathlib.py measures them. Prints the running worst case and, at the end,
``{name: [max ulp, the input where it occurs]}`` as JSON. About 1 s per chunk for four
functions on one core: ~5 minutes per group.

    python bench/mathlib_sweep.py erf,exp,expm1,tanh
    python bench/mathlib_sweep.py exp2,log,log1p,sigmoid
"""
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "kernel"))

from ember import dtype as dt  # noqa: E402
from ember.kernel import ir, mathlib  # noqa: E402
from ember.kernel.c.runtime import CpuKernelRuntime  # noqa: E402
from test_mathlib import REF, ulp_error  # noqa: E402

CHUNK = 1 << 24


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    names = (argv[0] if argv else "erf,exp,expm1,tanh").split(",")
    refs = dict(REF)
    try:
        import scipy.special
        refs["erf"] = scipy.special.erf          # math.erf one element at a time is too slow
    except ImportError:
        pass
    rt = CpuKernelRuntime()
    if not rt.available():
        print(f"no C compiler: {rt.why_unavailable()}", file=sys.stderr)
        return 2
    a = ir.Load(0, dt.f32)
    k = ir.Elementwise((CHUNK,), (ir.BufferView(dt.f32, (1,)),),
                       tuple(getattr(mathlib, n)(a) for n in names), (dt.f32,) * len(names))
    prog = rt.compile(k)
    worst = {n: (0.0, None) for n in names}
    t0 = time.time()
    for c in range((1 << 32) // CHUNK):
        x = (np.arange(CHUNK, dtype=np.uint64) + c * CHUNK).astype(np.uint32).view(np.float32)
        xd = x.astype(np.float64)
        for n, got in zip(names, rt.launch(prog, [x])):
            with np.errstate(all="ignore"):
                ref = refs[n](xd)
                r32 = ref.astype(np.float32)
            # results equal to the correctly rounded reference are within 0.5 ulp
            idx = np.nonzero((got != r32) & ~(np.isnan(got) & np.isnan(r32)))[0]
            if idx.size:
                err = ulp_error(got[idx], ref[idx])
                i = int(np.argmax(err))
                if err[i] > worst[n][0]:
                    worst[n] = (float(err[i]), float(x[idx[i]]))
        if c % 32 == 31:
            print(f"{c + 1}/256", {n: round(w[0], 4) for n, w in worst.items()},
                  f"{time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    print(json.dumps(worst))
    return 0


if __name__ == "__main__":
    sys.exit(main())
