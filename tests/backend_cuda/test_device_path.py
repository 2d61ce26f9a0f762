"""The Cuda backend's op path, checked without a GPU: every registry op resolves to an
implementation, and every conformance case runs through the same path on `StrictXp` (NumPy
posing as a device namespace that refuses host leaks, like CuPy), against the references."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

import ember as em
from ember.backend.autodiff import Autodiff
from ember.backend.cuda import ops as cuda_ops
from tests.backend_cuda.strict_xp import StrictXp
from tests.conformance.cases import CASES
from tests.conformance.harness import gen_array
from tests.conformance.test_ops import _inputs, _run


def test_every_op_has_a_cuda_implementation():
    missing = [op.name for op in em.ops.OPS.values() if cuda_ops.how(op) == "none"]
    assert not missing, (f"ops the Cuda backend cannot run (give the reference an 'xp' "
                         f"keyword or add a CUDA_IMPLS entry): {missing}")


def test_ufunc_references_exist_in_cupy():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    names = {op.name: cuda_ops.ufunc_of(op.numpy).__name__ for op in em.ops.OPS.values()
             if cuda_ops.how(op) == "ufunc"}
    absent = sorted(f"{op} (numpy.{u})" for op, u in names.items() if not hasattr(cupy, u))
    assert not absent, f"CuPy lacks these ufuncs: {absent}"


def test_strict_namespace_catches_a_leak():
    """The stand-in refuses what CuPy refuses, so the conformance run below can fail."""
    from tests.backend_cuda.strict_xp import STRICT, LeakError
    d = STRICT.zeros((3,))
    with pytest.raises(LeakError):
        np.where(d > 0, d, 0.0)
    with pytest.raises(LeakError):
        d + np.arange(3.0)
    with pytest.raises(LeakError):
        d.take(np.array([0, 1]))
    assert type(STRICT.where(d > 0, d, 0.0)).__name__ == "DevArray"


_PARAMS = [pytest.param(c, d, id=f"{c.name}-{d}") for c in CASES for d in c.dtypes]


@pytest.mark.parametrize("case,dtype", _PARAMS)
def test_op_on_device_path(case, dtype):
    device = StrictXp().device(0)
    for shapes in case.shapes:
        rng = np.random.default_rng(zlib.crc32(repr((case.name, dtype, shapes)).encode()))
        _run(case, _inputs(case, shapes, dtype, rng), device, "contiguous", dtype)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES if c.grad])
def test_grad_runs_on_device_path(case):
    """Backward passes use ops (and op attributes) forward passes may not: run each one."""
    device = Autodiff(StrictXp()).device(0)
    shapes = case.shapes[0]
    rng = np.random.default_rng(zlib.crc32(repr((case.name, shapes)).encode()))
    arrays = [gen_array(rng, inp, s, "f64") for inp, s in zip(case.inputs, shapes)]
    if any(a.size == 0 for a in arrays):
        pytest.skip("empty input")
    ts = [em.tensor(a, device=device) for a in arrays]
    ts = [t.require_grad() if inp.differentiable and a.dtype == np.float64 else t
          for t, a, inp in zip(ts, arrays, case.inputs)]
    out = case.fn(*ts)
    out = out[0] if isinstance(out, (tuple, list)) else out
    grads = (out * em.tensor(rng.normal(size=out.shape), device=device)).sum().backward()
    for t in ts:
        if t.is_require_grad():
            g = t.grad(grads)
            assert g is not None and g.shape == t.shape


class _Contig(np.ndarray):
    """NumPy posing as a CuPy array for the view paths (CuPy's ``_c_contiguous``)."""

    @property
    def _c_contiguous(self):
        return self.flags.c_contiguous


def test_view_direct_paths_are_the_references():
    """The Cuda backend runs reshape, permute, expand and slice without its stream switch
    (`ops._ViewDirect`): the same views as the op references; a reshape of an array that is
    not C-contiguous is left to the op path (it may copy)."""
    import types
    ns = types.SimpleNamespace(broadcast_to=np.broadcast_to)
    x = np.arange(24.0).reshape(2, 3, 4).view(_Contig)
    ops = em.ops.OPS
    cases = [("reshape", x, {"shape": (4, 6)}), ("permute", x, {"dims": (2, 0, 1)}),
             ("expand", x[:, :1], {"shape": (2, 5, 4)}),
             ("slice", x, {"slices": ((1, 2, 1), (2, -1, -1), (0, 4, 2))})]
    for name, a, attrs in cases:
        run = cuda_ops.direct_path(name, ns)
        got = run((a,), attrs, None, None, 0)
        want = ops[name].numpy(np.asarray(a), **attrs, xp=np) if name != "slice" else \
            ops[name].numpy(np.asarray(a), **attrs)
        assert got.shape == want.shape and np.shares_memory(got, x), name
        np.testing.assert_array_equal(got, want, err_msg=name)
    assert cuda_ops.direct_path("reshape", ns)((x.transpose(1, 0, 2),), {"shape": (24,)},
                                                None, None, 0) is None
