"""Shared helpers of the fusion tests: Fusion devices per kernel runtime, the unfused
reference device, and kernel counting."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.backend import Fusion, NdArray

UNFUSED = NdArray().device(0)


#: the conformance stack each kernel runtime belongs to (EMBER_TEST_STACKS selects them)
STACK_OF = {"interpret": "fusion(ndarray)", "c": "fusion(ndarray)", "cuda": "fusion(cuda)"}


def _skip_unless_selected(runtime: str):
    """Skip when ``EMBER_TEST_STACKS`` names stacks, none of them this runtime's fusion stack
    or its autodiff: a GPU run tests Fusion(Cuda) only."""
    import os
    if not os.environ.get("EMBER_TEST_STACKS", "").strip():
        return
    from tests.conformance.harness import selected_stacks
    stack = STACK_OF[runtime]
    names = {s.name for s in selected_stacks()}
    if stack not in names and f"autodiff({stack})" not in names:
        pytest.skip(f"{stack}: not among EMBER_TEST_STACKS={os.environ['EMBER_TEST_STACKS']!r}")


def fusion_device(runtime: str):
    """A Fusion device on ``runtime`` -- "interpret" (the IR interpreter) or "c" (the
    generated-C runtime) over NdArray, "cuda" (generated CUDA kernels) over Cuda -- fusing
    every op however small (``min_numel=0``), or a pytest skip naming why it is absent."""
    _skip_unless_selected(runtime)
    if runtime == "cuda":
        from ember.backend.cuda import Cuda
        from ember.backend.fusion.registration import fusion_cuda_reason
        why = fusion_cuda_reason()
        if why:
            pytest.skip(f"fusion(cuda): {why}")
        return Fusion(Cuda(), "auto", 0).device(0)
    b = Fusion(NdArray(), runtime, 0)
    if b.runtime is None:
        why = getattr(NdArray(), "kernel_runtime_reason", None) or "no kernel runtime"
        pytest.skip(f"fusion runtime {runtime!r} unavailable: {why}")
    return b.device(0)


RUNTIMES = ("interpret", "c", "cuda")


class RecordingNdArray(NdArray):
    """NdArray noting the names of the ops it runs (below Fusion: what was not fused)."""

    def __init__(self):
        super().__init__()
        self.ran = []

    def execute(self, op, prims, attrs, meta, device):
        self.ran.append(op.name)
        return super().execute(op, prims, attrs, meta, device)


def counted(fn):
    """``fn()``'s result (read to the host) and the fusion counters of that call."""
    em.fusion.reset_stats()
    out = fn()
    outs = out if isinstance(out, (tuple, list)) else (out,)
    arrays = [o.numpy() for o in outs]
    return (arrays if isinstance(out, (tuple, list)) else arrays[0]), em.fusion.stats()


def assert_close(a, b, rtol=1e-5, atol=1e-6, what=""):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, f"{what}: shapes {a.shape} vs {b.shape}"
    np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol,
                               atol=atol, equal_nan=True, err_msg=what)


def has_broadcast_reduce(device) -> bool:
    return "broadcast_reduce" in getattr(device.backend.runtime, "features", ())
