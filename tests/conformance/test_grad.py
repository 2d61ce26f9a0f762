"""Every differentiable case, gradient-checked in float64: ember's autodiff against central
finite differences of the independent NumPy reference."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

import ember as em
from tests.conformance.cases import CASES
from tests.conformance.harness import gen_array, stack_params, widen

STACKS = stack_params(autodiff_only=True)
EPS = 1e-6


def _loss_ref(case, arrays, weights):
    out = case.ref(*[widen(a) for a in arrays])
    out = out[0] if isinstance(out, (tuple, list)) else out
    return float(np.sum(np.asarray(out, dtype=np.float64) * weights))


_GRAD_CASES = [pytest.param(c, id=c.name) for c in CASES if c.grad]


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("case", _GRAD_CASES)
def test_grad(stack, case):
    device = stack.make_device()
    for shapes in case.shapes[:2]:
        rng = np.random.default_rng(zlib.crc32(repr((case.name, shapes)).encode()))
        arrays = [gen_array(rng, inp, s, "f64") for inp, s in zip(case.inputs, shapes)]
        diff = [i for i, (inp, a) in enumerate(zip(case.inputs, arrays))
                if inp.differentiable and a.dtype == np.float64]
        if not diff or any(a.size == 0 for a in arrays):
            continue
        tensors = []
        for i, a in enumerate(arrays):
            t = em.tensor(a, device=device)
            tensors.append(t.require_grad() if i in diff else t)
        out = case.fn(*tensors)
        out = out[0] if isinstance(out, (tuple, list)) else out
        weights = rng.normal(size=out.shape)
        loss = (out * em.tensor(weights, device=device)).sum()
        grads = loss.backward()
        for i in diff:
            analytic = tensors[i].grad(grads)
            assert analytic is not None, f"{case.name}: no gradient for input {i}"
            analytic = analytic.numpy()
            numeric = np.zeros_like(arrays[i])
            flat = arrays[i].reshape(-1)
            for k in range(flat.size):
                orig = flat[k]
                flat[k] = orig + EPS
                up = _loss_ref(case, arrays, weights)
                flat[k] = orig - EPS
                down = _loss_ref(case, arrays, weights)
                flat[k] = orig
                numeric.reshape(-1)[k] = (up - down) / (2 * EPS)
            np.testing.assert_allclose(analytic, numeric, atol=case.grad_tol * 10,
                                       rtol=1e-4, err_msg=f"{case.name}: d/d input {i}")
