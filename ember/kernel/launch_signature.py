"""What a compiled program checks and allocates at launch besides its code, shared by the C
and the CUDA kernel runtimes.

One rendered source can serve kernels that launch differently: shapes that collapse alike
(``[20]`` and ``[20, 1]`` over the same strides render the same loop), an input the code never
reads. A runtime keys its programs by the source *and* `launch_signature`, so each program's
output shapes, input views and scalar args are those of the kernels it serves, and
`input_ranges` gives the element span each input view reads, which the launch checks
against the array it is given.
"""
from __future__ import annotations

from . import ir
from .c_family import loads_of


def launch_signature(kernel) -> tuple:
    """The input views (dtypes, strides, offsets), the iteration shape, the outputs' dtypes
    and count, the scalar args' dtypes and, for a reduction, its axis and form."""
    if isinstance(kernel, ir.Elementwise):
        return ("e", tuple(kernel.shape), kernel.inputs, tuple(kernel.out_dtypes),
                len(kernel.exprs), tuple(kernel.args))
    return ("r", tuple(kernel.shape), kernel.inputs, kernel.out_dtype, tuple(kernel.args),
            kernel.axis, bool(getattr(kernel, "broadcast", False)))


def input_ranges(kernel) -> list:
    """Per input: ``(lo, hi)`` element offsets its view reads, or None if it reads none."""
    shape = [int(s) for s in kernel.shape]
    if isinstance(kernel, ir.Elementwise):
        spaces = [(loads_of(kernel.exprs), shape)]
    else:
        eshape = list(shape)
        if not getattr(kernel, "broadcast", False):
            eshape[kernel.axis] = 1
        kept_empty = any(n == 0 for i, n in enumerate(shape) if i != kernel.axis)
        spaces = [(loads_of([kernel.prologue]), shape),
                  (loads_of([kernel.epilogue]), [0] if kept_empty else eshape)]
    out = []
    for b, v in enumerate(kernel.inputs):
        lo = hi = None
        for used, sh in spaces:
            if b not in used or any(n == 0 for n in sh):
                continue
            lo_ = hi_ = int(v.offset)
            for s, n in zip(v.strides, sh):
                ext = int(s) * (n - 1)
                if ext < 0:
                    lo_ += ext
                else:
                    hi_ += ext
            lo = lo_ if lo is None else min(lo, lo_)
            hi = hi_ if hi is None else max(hi, hi_)
        out.append(None if lo is None else (lo, hi))
    return out
