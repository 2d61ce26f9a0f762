"""Kernel launches through the `fastcall` extension (ember/kernel/c/fastcall.py): the same
results as the ctypes path, clear errors for bad buffers, and a ctypes fallback when it is
off or cannot be built."""
import os
import subprocess
import sys

import numpy as np
import pytest

from ember import dtype as dt
from ember.kernel import ir
from ember.kernel.c import fastcall
from ember.kernel.c.runtime import _address


def _fast_or_skip(rt):
    if rt._fast is None:
        pytest.skip(f"the fastcall extension is not in use here: {fastcall.reason()}")
    return rt._fast


def _kernel(n):
    """out = x * y + arg0 over n f32 (a contiguous elementwise kernel)."""
    v = ir.BufferView(dt.f32, (1,))
    e = ir.Load(0, dt.f32) * ir.Load(1, dt.f32) + ir.Arg(0, dt.f32)
    return ir.Elementwise((n,), (v, v), (e,), (dt.f32,), (dt.f32,))


def test_fast_and_ctypes_launches_agree(rt):
    _fast_or_skip(rt)
    rng = np.random.default_rng(0)
    for n in (1, 7, 1000, 1 << 16):
        x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
        p = rt.compile(_kernel(n))
        (fast,) = rt.launch(p, [x, y], [0.5])
        saved, rt._fast = rt._fast, None
        try:
            (slow,) = rt.launch(p, [x, y], [0.5])
        finally:
            rt._fast = saved
        np.testing.assert_array_equal(fast, slow)
        np.testing.assert_array_equal(fast, x * y + np.float32(0.5))
        run = rt.launcher(p)                      # the cached-plan path takes it too
        np.testing.assert_array_equal(run([x, y], [0.5])[0], fast)


def test_a_buffer_that_is_no_array_is_a_type_error(rt):
    launch = _fast_or_skip(rt)
    p = rt.compile(_kernel(4))
    x = np.ones(4, np.float32)
    with pytest.raises(TypeError, match="not a NumPy array"):
        launch(_address(p.fn), [x, [1.0, 2.0, 3.0, 4.0], np.empty(4, np.float32)], None, 1, 0)
    with pytest.raises(TypeError, match="list"):
        launch(_address(p.fn), (x, x, x), None, 1, 0)


def test_turned_off_by_env_falls_back_to_ctypes(tmp_path):
    code = ("from ember.kernel.c import fastcall; from ember.kernel.c.runtime import "
            "default_runtime; r = default_runtime(); "
            "print(fastcall.get() is None, r.fast_launch, fastcall.reason())")
    env = {**os.environ, "EMBER_C_FASTCALL": "0", "EMBER_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False", "EMBER_C_FASTCALL=0"]
