"""Every case on every backend stack, every supported dtype and every layout, against
independent NumPy float64 references."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

import ember as em
from tests.conformance.cases import CASES
from tests.conformance.harness import (LAYOUTS, compare, expanded_array, gen_array, make_tensor,
                                       stack_params, to_numpy_out, widen)

STACKS = stack_params()


def _rng(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _inputs(case, shapes, dtype, rng, layout="contiguous"):
    arrays = []
    for inp, shape in zip(case.inputs, shapes):
        if layout == "expanded":
            arrays.append(expanded_array(rng, inp, shape, dtype))
        else:
            arrays.append(gen_array(rng, inp, shape, dtype))
    return arrays


def _run(case, arrays, device, layout, dtype):
    tensors = [make_tensor(a, device, layout) for a in arrays]
    out = case.fn(*tensors)
    got = to_numpy_out(out)
    exp = case.ref(*[widen(a) for a in arrays])
    exp = list(exp) if isinstance(exp, (tuple, list)) else [exp]
    assert len(got) == len(exp), f"{case.name}: {len(got)} outputs vs {len(exp)} in reference"
    for i, (g, e) in enumerate(zip(got, exp)):
        out_dtype = str(out[i].dtype.short) if isinstance(out, (tuple, list)) else out.dtype.short
        tol_dtype = out_dtype if out_dtype in case.tol or np.asarray(e).dtype.kind in "iub" \
            else dtype
        compare(g, e, tol_dtype, case.tol, what=f"{case.name} output {i} [{dtype}, {layout}]")


_PARAMS = [pytest.param(c, d, id=f"{c.name}-{d}") for c in CASES for d in c.dtypes]


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("case,dtype", _PARAMS)
def test_op(stack, case, dtype):
    device = stack.make_device()
    for shapes in case.shapes:
        rng = _rng(case.name, dtype, shapes)
        arrays = _inputs(case, shapes, dtype, rng)
        _run(case, arrays, device, "contiguous", dtype)


_LAYOUT_CASES = [pytest.param(c, l, id=f"{c.name}-{l}") for c in CASES if c.layouts
                 for l in LAYOUTS[1:]]


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("case,layout", _LAYOUT_CASES)
def test_op_layout(stack, case, layout):
    device = stack.make_device()
    dtype = "f32" if "f32" in case.dtypes else case.dtypes[0]
    shapes = case.shapes[0]
    rng = _rng(case.name, layout, shapes)
    arrays = _inputs(case, shapes, dtype, rng, layout)
    _run(case, arrays, device, layout, dtype)


def test_every_op_has_a_case():
    """A registry op without a conformance case fails here: add one to a specs_*.py."""
    covered = {op for c in CASES for op in c.ops}
    missing = sorted(set(em.ops.OPS) - covered)
    assert not missing, f"ops without conformance cases: {missing}"
