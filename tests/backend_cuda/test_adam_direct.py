"""adam_update on the Cuda backend launched directly (ember/backend/cuda/ops.py,
`_AdamDirect`): its sources compile without a GPU; on a GPU it gives the bits of the CuPy
ElementwiseKernel path (the same arithmetic) and of NdArray's reference."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.backend.cuda import ops as cuda_ops
from ember.kernel.cuda.compiler import CudaCompiler, default_arch


@pytest.mark.parametrize("ctype", ["float", "double"])
def test_direct_adam_sources_compile(tmp_path, ctype):
    compiler = CudaCompiler(cache_root=tmp_path)
    if not compiler.available:
        pytest.skip(f"NVRTC unavailable (compile-only checks skipped): {compiler.reason}")
    assert compiler.build(cuda_ops.adam_raw_source(ctype), default_arch()).binary


@pytest.mark.skipif(not em.cuda.is_available(), reason=f"cuda: {em.cuda.why_unavailable()}")
@pytest.mark.parametrize("d", ["f32", "f64"])
@pytest.mark.parametrize("first", [True, False])
def test_direct_adam_matches_the_elementwise_kernel_and_numpy(d, first):
    import cupy as cp
    rng = np.random.default_rng(7)
    npd = em.dtype.as_dtype(d).np
    host = [rng.normal(size=(33, 17)).astype(npd) for _ in range(4)]
    host[3] = np.abs(host[3])
    attrs = dict(beta1=0.9, beta2=0.999, k1=0.1, k2=0.001, step=1e-3, eps=1e-8, decay=0.99,
                 l2=0.01, first=first)
    op = em.ops.OPS["adam_update"]
    want = op.numpy(*host, **attrs)
    fn = cuda_ops.CUDA_IMPLS["adam_update"](cp, None)
    dev_in = [cp.asarray(h) for h in host]
    got = fn(*dev_in, **attrs)                               # contiguous: direct launch
    strided = [cp.asarray(np.asfortranarray(h)) for h in host]
    other = fn(*strided, **attrs)                            # F-ordered: ElementwiseKernel
    for g, o, w in zip(got, other, want):
        np.testing.assert_array_equal(cp.asnumpy(g), w)
        np.testing.assert_array_equal(cp.asnumpy(o), w)
