"""The Cuda backend's eager reductions (ember/backend/cuda/reduce.py).

Without a GPU: for inputs of many layouts (permuted, sliced, flipped, channels-last), dims
and dtypes, the `ir.Reduce` the path builds gives the registry reference's result when the
IR interpreter runs it (exactly for ints and max/min, within rounding for float sums), and
its CUDA source compiles (skipped by name without NVRTC). On a GPU: sum/prod/max/min on the
Cuda backend take the path where it applies and match NumPy float64."""
from __future__ import annotations

import concurrent.futures
import itertools
import os

import numpy as np
import pytest

import ember as em
from ember import dtype as dt
from ember.backend.cuda import reduce as R
from ember.kernel.cuda.compiler import default_arch
from ember.kernel.cuda.render import Options, render
from ember.kernel.interpret import evaluate
from ember.ops import OPS
from tests.kernel_cuda._util import nvrtc_or_skip

_DTYPES = (dt.float32, dt.float64, dt.float16, dt.int32, dt.int64, dt.uint8, dt.bool_)


_BASE = np.random.default_rng(3).normal(size=(4, 6, 5, 3))


def _views(lib):
    """name -> the layout made from a base array with ``lib``'s view ops (``lib``: "np" for
    NumPy arrays, "em" for ember tensors, which give the device arrays these strides)."""
    if lib == "np":
        return {
            "contiguous": lambda b: b,
            "permuted": lambda b: b.transpose(2, 0, 3, 1),
            "sliced": lambda b: b[:, ::2, 1:, :],
            "flipped": lambda b: b[::-1, :, ::-1],
            "matrix": lambda b: b.reshape(24, 15),
            "matrix_t": lambda b: b.reshape(24, 15).T,
            "vector": lambda b: b.reshape(-1),
        }
    return {
        "contiguous": lambda b: b,
        "permuted": lambda b: b.permute(2, 0, 3, 1),
        "sliced": lambda b: b[:, ::2, 1:, :],
        "flipped": lambda b: b.flip((0, 2)),
        "matrix": lambda b: b.reshape(24, 15),
        "matrix_t": lambda b: b.reshape(24, 15).transpose(),
        "vector": lambda b: b.reshape(-1),
    }


def _layouts():
    """(name, array) inputs of several memory layouts."""
    out = [(name, f(_BASE)) for name, f in _views("np").items()]
    # channels-last memory seen as [N, C, H, W]
    out.append(("channels_last",
                np.ascontiguousarray(_BASE.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)))
    return out


def _dims_sets(nd):
    out = [(d,) for d in range(nd)]
    out += [c for r in range(2, nd + 1) for c in itertools.combinations(range(nd), r)]
    return out


def _as(x, d):
    if d is dt.bool_:
        return x > 0
    if d.is_float:
        return x.astype(d.np)
    return (x * 50).astype(d.np)


def _cases():
    for name, x in _layouts():
        for dims in _dims_sets(x.ndim):
            yield name, x, dims


def _check(name, x, dims, op, d, keepdim=False):
    """Build the kernel; when the path takes it, the interpreter's result against the
    registry reference. Returns the kernel (or None)."""
    xa = _as(x, d)
    o = OPS[op]
    want = o.numpy(xa, dims=dims, keepdim=keepdim)
    item = xa.itemsize
    strides = tuple(s // item for s in xa.strides)
    k = R.reduce_kernel(op, xa.shape, strides, d, dims, dt.from_numpy(want.dtype))
    if k is None:
        return None
    got = evaluate(k, [xa])[0].reshape(want.shape)
    _agrees(got, want, op, d, f"{name} {dims} {op} {d}")
    return k


def _agrees(got, want, op, d, what):
    """``got`` is the reference's ``want``: float sums and products within a tolerance of
    the dtype (their order of additions differs), everything else exactly."""
    assert got.dtype == want.dtype, what
    if d.is_float and op in ("sum", "prod"):
        tol = {dt.float16: 2e-3, dt.float32: 1e-5, dt.float64: 1e-12}[d]
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=tol, atol=tol, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


@pytest.mark.parametrize("op", sorted(R.OPS))
@pytest.mark.parametrize("d", _DTYPES, ids=lambda d: d.short)
def test_reduce_kernels_match_the_reference(op, d):
    taken = 0
    for name, x, dims in _cases():
        if d is dt.bool_ and op in ("max", "min"):
            xa = _as(x, d)
            assert R.reduce_kernel(op, xa.shape, (1,) * xa.ndim, d, dims, d) is None
            continue
        if _check(name, x, dims, op, d, keepdim=len(dims) % 2 == 0) is not None:
            taken += 1
    if not (d is dt.bool_ and op in ("max", "min")):
        assert taken > 40, f"the path took only {taken} cases"


def test_which_dims_merge():
    x = np.zeros((4, 6, 5, 3), np.float32)
    st = tuple(s // 4 for s in x.strides)
    assert R.reduce_kernel("sum", x.shape, st, dt.float32, (0,), dt.float32) is not None
    assert R.reduce_kernel("sum", x.shape, st, dt.float32, (1, 2), dt.float32) is not None
    # N, H, W of a channels-last [N, C, H, W] are one run of memory: one axis
    cl = np.zeros((4, 5, 3, 6), np.float32).transpose(0, 3, 1, 2)
    st = tuple(s // 4 for s in cl.strides)
    assert R.reduce_kernel("sum", cl.shape, st, dt.float32, (0, 2, 3), dt.float32) is not None
    # dims 0 and 2 of a contiguous tensor are not: CuPy's path
    assert R.reduce_kernel("sum", x.shape, tuple(s // 4 for s in x.strides), dt.float32,
                           (0, 2), dt.float32) is None
    # nothing to reduce, bf16: CuPy's path
    assert R.reduce_kernel("sum", (1, 3), (3, 1), dt.float32, (0,), dt.float32) is None
    assert R.reduce_kernel("sum", (2, 3), (3, 1), dt.bfloat16, (0,), dt.bfloat16) is None


def test_reduce_sources_compile(tmp_path):
    compiler = nvrtc_or_skip(tmp_path)
    sources = []
    for op in sorted(R.OPS):
        for d in _DTYPES:
            for name, x, dims in list(_cases())[::5]:
                xa = _as(x, d)
                want = OPS[op].numpy(xa, dims=dims, keepdim=False) if not (
                    d is dt.bool_ and op in ("max", "min")) else None
                if want is None:
                    continue
                k = R.reduce_kernel(op, xa.shape, tuple(s // xa.itemsize for s in xa.strides),
                                    d, dims, dt.from_numpy(want.dtype))
                if k is None:
                    continue
                sources.append(render(k, Options()).source)
    # (one compiler builds different sources at once: NVRTC runs outside the GIL)
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        built = sum(1 for c in pool.map(lambda s_: compiler.build(s_, default_arch()), sources)
                    if c.binary)
    assert built > 50


# -- on a GPU -------------------------------------------------------------------------------
gpu = pytest.mark.skipif(not em.cuda.is_available(),
                         reason=f"cuda: {em.cuda.why_unavailable()}")


@gpu
@pytest.mark.parametrize("op", sorted(R.OPS))
@pytest.mark.parametrize("d", ["f32", "f64", "f16", "i32", "i64", "bool"])
def test_reductions_on_the_device(op, d):
    dev = em.device("cuda", fusion=False)
    backend = dev.backend
    d_ = em.dtype.as_dtype(d)
    if d_ is dt.bool_ and op in ("max", "min"):
        pytest.skip("bool max/min take CuPy's path (not this one)")
    before = backend._reduce.launches if backend._reduce is not None else 0
    for name, x, dims in _cases():
        want = OPS[op].numpy(_as(x, d_), dims=dims, keepdim=True)
        v = _device_view(name, x, d_, dev)
        res = getattr(v, op)(list(dims), keepdim=True).numpy()
        _agrees(res, want, op, d_, f"{name} {dims}")
    if backend._reduce is not None:
        assert backend._reduce.launches > before, "the eager reduction path never ran"


def _device_view(name, x, d, dev):
    """The layout ``name`` of `_layouts` made on the device with ember's view ops (so the
    reduction sees a strided CuPy array)."""
    if name == "channels_last":
        cl = em.tensor(np.ascontiguousarray(_as(_BASE, d).transpose(0, 2, 3, 1)), device=dev)
        return cl.permute(0, 3, 1, 2)
    return _views("em")[name](em.tensor(_as(_BASE, d), device=dev))
