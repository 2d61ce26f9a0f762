"""Shared helpers of the fusion tests: Fusion devices per kernel runtime, the unfused
reference device, and kernel counting."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.backend import Fusion, NdArray

UNFUSED = NdArray().device(0)


def fusion_device(runtime: str):
    """A Fusion(NdArray) device on ``runtime`` ("interpret": the IR interpreter; "c": the
    generated-C runtime), or a pytest skip naming why it is absent."""
    b = Fusion(NdArray(), runtime)
    if b.runtime is None:
        why = getattr(NdArray(), "kernel_runtime_reason", None) or "no kernel runtime"
        pytest.skip(f"fusion runtime {runtime!r} unavailable: {why}")
    return b.device(0)


RUNTIMES = ("interpret", "c")


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
