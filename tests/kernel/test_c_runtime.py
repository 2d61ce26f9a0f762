"""The CPU kernel runtime: threads, fork safety, concurrency, in-place launches, big DAGs."""
import multiprocessing as mp
import threading
import time

import numpy as np
import pytest

from ember import dtype as dt
from ember.kernel import ir
from ember.kernel.autotune import Variant
from ember.kernel.c.runtime import default_num_threads


def _add1(n):
    return ir.Elementwise((n,), (ir.BufferView(dt.f32, (1,)),), (ir.Load(0, dt.f32) + 1.0,),
                          (dt.f32,))


def test_num_threads_env(monkeypatch):
    monkeypatch.setenv("EMBER_NUM_THREADS", "3")
    assert default_num_threads() == 3
    monkeypatch.setenv("EMBER_NUM_THREADS", "junk")
    assert default_num_threads() >= 1


def test_thread_choice(rt):
    big = rt.compile(_add1(1 << 22))
    small = rt.compile(_add1(100))
    assert rt._threads(small, Variant()) == 1
    rt.num_threads = 4
    try:
        assert rt._threads(big, Variant()) == 4
        assert rt._threads(big, Variant(threads=2)) == 2
        assert rt._threads(big, Variant(threads=64)) == 4     # capped by the setting
    finally:
        rt.num_threads = default_num_threads()


def _child(q, prog_args):
    rt, p, x = prog_args
    q.put(float(rt.launch(p, [x])[0][0]))


def test_fork_after_parallel_run_does_not_hang(rt):
    p = rt.compile(_add1(1 << 20), Variant(threads=2))
    x = np.ones(1 << 20, np.float32)
    assert rt.launch(p, [x])[0][0] == 2.0          # an OpenMP team ran in this process
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    proc = ctx.Process(target=_child, args=(q, (rt, p, x)))
    proc.start()
    proc.join(60)
    if proc.is_alive():
        proc.kill()
        pytest.fail("the forked child hung in its first kernel")
    assert proc.exitcode == 0 and q.get(timeout=5) == 2.0


def test_python_threads_launch_concurrently(rt):
    p = rt.compile(_add1(1 << 18))
    errors = []

    def work(seed):
        x = np.random.default_rng(seed).standard_normal(1 << 18).astype(np.float32)
        for _ in range(20):
            if not (rt.launch(p, [x])[0] == x + np.float32(1)).all():
                errors.append(seed)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors


def test_in_place_launch(rt):
    k = ir.Elementwise((1000,), (ir.BufferView(dt.f64, (1,)), ir.BufferView(dt.f64, (1,))),
                       (ir.Load(0, dt.f64) * ir.Load(1, dt.f64),), (dt.f64,))
    p = rt.compile(k)
    a = np.arange(1000.0)
    b = np.full(1000, 3.0)
    rt.launch_into(p, [a, b], [], [a])
    np.testing.assert_array_equal(a, np.arange(1000.0) * 3)
    with pytest.raises(Exception, match="C-contiguous"):
        rt.launch_into(p, [a, b], [], [np.empty(2000)[::2]])


def test_args_checked(rt):
    k = ir.Elementwise((4,), (), (ir.Arg(0, dt.f32) + ir.Arg(1, dt.f32),), (dt.f32,),
                       (dt.f32, dt.f32))
    p = rt.compile(k)
    np.testing.assert_array_equal(rt.launch(p, [], [1.5, 2.0])[0], np.full(4, 3.5, np.float32))
    with pytest.raises(Exception, match="2 scalar args"):
        rt.launch(p, [], [1.0])


def test_deep_shared_dag_renders_fast(rt):
    """A DAG whose tree form is exponential (each level uses the previous one 3 times)."""
    e = ir.Load(0, dt.f32)
    for _ in range(60):
        e = ir.select(ir.cmp("gt", e, 0.5), e * 1.25 + 0.25, e - 0.375)
    k = ir.Elementwise((50,), (ir.BufferView(dt.f32, (1,)),), (e,), (dt.f32,))
    t0 = time.perf_counter()
    p = rt.compile(k)
    assert time.perf_counter() - t0 < 10
    x = np.linspace(0, 1, 50).astype(np.float32)
    ref = x.copy()
    for _ in range(60):
        ref = np.where(ref > np.float32(0.5), ref * np.float32(1.25) + np.float32(0.25),
                       ref - np.float32(0.375))
    np.testing.assert_array_equal(rt.launch(p, [x])[0], ref)
    t0 = time.perf_counter()
    assert rt.compile(k) is p                   # the same kernel object: no re-rendering
    assert time.perf_counter() - t0 < 0.001


def test_stats(rt):
    s = rt.stats()
    assert s["programs"] >= 1 and "compiles" in s["compiler"] and "tunings" in s["autotune"]
