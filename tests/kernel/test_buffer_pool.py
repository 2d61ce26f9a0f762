"""The output buffer pool (ember/kernel/buffer_pool.py): large arrays reuse the memory of
dead ones, never memory that an array, view, memoryview or capsule still reaches."""
import threading

import numpy as np
import pytest

from ember.kernel.buffer_pool import BufferPool, default_pool

KB = 1024


def _addr(a):
    return a.__array_interface__["data"][0]


def test_reuses_dead_blocks_only():
    p = BufferPool(min_bytes=4 * KB, max_idle_bytes=1 << 24)
    a = p.empty((2000,), np.float32)
    b = p.empty((2000,), np.float32)
    assert _addr(a) != _addr(b) and p.stats["misses"] == 2
    ad = _addr(a)
    del a
    c = p.empty((40, 50), np.float32)            # same bytes, another shape: same block
    assert _addr(c) == ad and c.shape == (40, 50) and p.stats["hits"] == 1
    c[...] = 7
    keep = c[::3, 1:]                              # a view keeps the block busy
    cd = _addr(c)
    del c
    d = p.empty((2000,), np.float32)
    assert _addr(d) not in (cd, _addr(b))
    assert np.all(keep == 7)                       # nobody wrote into the viewed memory
    m = memoryview(d)                              # so does a memoryview
    dd = _addr(d)
    del d
    e = p.empty((2000,), np.float32)
    assert _addr(e) != dd
    del m, keep, e, b
    assert p.held_bytes()[0] == 0


def test_alignment_dtypes_and_flags():
    p = BufferPool(min_bytes=KB)
    for dtype in (np.float32, np.float64, np.int8, np.float16, np.complex64):
        a = p.empty((3, 2570), dtype)
        assert a.dtype == dtype and a.shape == (3, 2570)
        assert a.flags.c_contiguous and a.flags.writeable
        assert _addr(a) % 64 == 0


def test_small_arrays_and_disabled_pool_are_plain():
    p = BufferPool(min_bytes=64 * KB)
    a = p.empty((10,), np.float32)
    assert a.flags.owndata and p.stats["misses"] == 0
    off = BufferPool(min_bytes=0, enabled=False)
    b = off.empty((100000,), np.float32)
    assert b.flags.owndata and off.stats["misses"] == 0


def test_idle_memory_is_bounded_and_trimmed():
    p = BufferPool(min_bytes=KB, max_idle_bytes=64 * KB)
    for n in range(1, 30):                         # 29 sizes, each dead at once
        p.empty((n * 1024,), np.uint8)
    used, idle = p.held_bytes()
    assert used == 0 and idle <= 64 * KB + 30 * 4 * KB
    assert p.stats["released"] > 0
    p.trim()
    assert p.held_bytes() == (0, 0)


def test_per_size_limit_falls_back_to_numpy():
    p = BufferPool(min_bytes=KB)
    live = [p.empty((4096,), np.uint8) for _ in range(p.MAX_PER_SIZE + 3)]
    assert p.stats["unpooled"] == 3
    assert len({_addr(a) for a in live}) == len(live)


def test_exclusive_ownership():
    p = BufferPool(min_bytes=KB)
    a = p.empty((4096,), np.float32)
    assert p.owns_exclusively(a)
    v = a.reshape(64, 64)                          # another view of the block
    assert not p.owns_exclusively(a)
    del v
    assert p.owns_exclusively(a)
    assert not p.owns_exclusively(np.empty(4096, np.float32))   # not the pool's
    assert not p.owns_exclusively(np.empty(4096, np.float32)[1:])


def test_threads_never_share_a_live_block():
    p = BufferPool(min_bytes=KB)
    errors = []

    def work(tag):
        for i in range(300):
            a = p.empty((1024,), np.float32)
            a[...] = tag
            if not np.all(a == tag):
                errors.append((tag, i))
    ts = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors


def test_fusion_reuses_a_dead_pooled_output_but_not_a_viewed_one():
    em = pytest.importorskip("ember")
    if not default_pool().enabled:
        pytest.skip("EMBER_POOL=0")
    dev = em.device("cpu", fusion=True)
    if not dev.backend.fusing:
        pytest.skip("no kernel runtime")
    x = em.tensor(np.linspace(-1, 1, 1 << 19, dtype=np.float32), device=dev)   # 2 MiB
    y = (x * 2 + 1).exp()
    y.numpy()
    em.fusion.reset_stats()
    z = (y * 3 - 1).tanh()
    del y
    z.numpy()
    assert em.fusion.stats()["buffers_reused"] == 1
    a = (x * 2 + 1).exp()
    view = a.numpy()[::2]
    expect = view.copy()
    b = a * 3 - 1
    del a
    got = b.numpy()
    assert em.fusion.stats()["buffers_reused"] == 1       # not again: the view lives
    np.testing.assert_array_equal(view, expect)
    ref = np.exp(x.numpy().astype(np.float64) * 2 + 1) * 3 - 1
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
