"""Buffers reused in place when nothing else holds them, and never while a view, a tensor or
a NumPy array still reads them."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
from tests.fusion._util import assert_close, fusion_device


@pytest.fixture
def dev():
    d = fusion_device("c")
    if getattr(d.backend.runtime, "launch_into", None) is None:
        pytest.skip("the runtime cannot write into given buffers")
    return d


def _mats(seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(6, 4)).astype(np.float32), rng.normal(size=(4, 5)).astype(np.float32)


def test_a_dead_matmul_output_is_overwritten_in_place(dev):
    a, b = _mats()
    x, w = em.tensor(a, device=dev), em.tensor(b, device=dev)
    em.fusion.reset_stats()
    y = ((x @ w) * 2.0 + 1.0).tanh()            # the matmul's array dies inside the stream
    got = y.numpy()
    assert em.fusion.stats()["buffers_reused"] == 1
    assert_close(got, np.tanh((a @ b) * 2.0 + 1.0), rtol=1e-5)


def test_no_reuse_while_a_view_still_reads_the_buffer(dev):
    a, b = _mats(1)
    x, w = em.tensor(a, device=dev), em.tensor(b, device=dev)
    m = x @ w
    before = m.numpy().copy()
    v = m.swap_dims(0, 1)                      # the inner backend's view of m's array
    y = m * 3.0
    del m
    em.fusion.reset_stats()
    got = y.numpy()
    assert em.fusion.stats()["buffers_reused"] == 0
    assert_close(v.numpy(), before.T, rtol=0, atol=0)
    assert_close(got, before * 3.0, rtol=1e-6)


def test_no_reuse_of_a_live_tensor_or_a_host_array(dev):
    a, b = _mats(2)
    x, w = em.tensor(a, device=dev), em.tensor(b, device=dev)
    m = x @ w
    host = m.numpy()                           # shares the array
    keep = host.copy()
    y = m + 1.0
    del m
    y.numpy()
    assert_close(host, keep, rtol=0, atol=0)
    m2 = x @ w
    y2 = m2 - 1.0
    y2.numpy()
    assert_close(m2.numpy(), keep, rtol=0, atol=0)   # m2 is alive: not overwritten


def test_no_reuse_when_a_later_kernel_of_the_plan_reads_it(dev):
    a, b = _mats(3)
    x, w = em.tensor(a, device=dev), em.tensor(b, device=dev)
    m = x @ w
    y = m * 2.0                                # same shape as m: could reuse it
    z = m.sum(0)                               # but the reduction also reads m
    del m
    gy, gz = y.numpy(), z.numpy()
    assert_close(gy, (a @ b) * 2.0, rtol=1e-5)
    assert_close(gz, (a @ b).sum(0), rtol=1e-5, atol=1e-5)
