"""The output arrays the Cuda backend's direct launches reuse (ember/backend/cuda/memory.py,
`Outputs`), on stand-ins for CuPy arrays (no GPU needed): an array is given out again only
once nothing refers to it, its memory pointer or its memory; sizes and totals are capped;
``empty_cache`` lets go of the arrays. On a GPU: outputs that are alive never share memory,
and results stay right while arrays are reused."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import ember as em
from ember.backend.cuda import memory


class _Mem:
    pass


class _Ptr:
    """A CuPy ``MemoryPointer``: it holds its memory."""

    def __init__(self, mem):
        self.mem = mem

    def __add__(self, k):              # a pointer into the memory at an offset
        return _Ptr(self.mem)


class _Arr:
    """A CuPy array: it holds its pointer; a view holds its base."""

    def __init__(self, shape, dtype, data=None, base=None):
        self.shape, self.dtype = shape, dtype
        self.data = data if data is not None else _Ptr(_Mem())
        self.base = base

    def view(self):
        return _Arr(self.shape, self.dtype, self.data + 0, self)


def _cache():
    made = []

    def new(shape, dtype):
        a = _Arr(shape, dtype)
        made.append(a)
        return a
    return memory.Outputs(new), made


F32 = np.dtype(np.float32)


def test_an_array_is_reused_once_dropped():
    c, made = _cache()
    a = c.take((4,), F32, 16)
    assert a is made[0]
    b = c.take((4,), F32, 16)
    assert b is not a                      # `a` is still referred to
    del a
    assert c.take((4,), F32, 16) is made[0]
    assert c.take((2, 2), F32, 16) is not made[0]     # another shape: another array
    assert len(made) == 3


@pytest.mark.parametrize("holder", ["view", "pointer", "memory"])
def test_anything_holding_the_memory_keeps_an_array_busy(holder):
    c, made = _cache()
    a = c.take((8,), F32, 32)
    keep = {"view": a.view, "pointer": lambda: a.data, "memory": lambda: a.data.mem}[holder]()
    del a
    b = c.take((8,), F32, 32)
    assert b is not made[0]
    del keep, b
    gc.collect()
    assert c.take((8,), F32, 32) in made


def test_sizes_and_totals_are_capped(monkeypatch):
    c, made = _cache()
    assert c.take((1,), F32, memory.OUTPUT_MAX_BYTES + 1) is None
    assert c.take((0,), F32, 0) is None
    held = [c.take((4,), F32, 16) for _ in range(memory.OUTPUTS_PER_KEY)]
    assert all(h is not None for h in held)
    assert c.take((4,), F32, 16) is None   # all busy: the pool's turn
    assert c.kept_bytes == memory.OUTPUTS_PER_KEY * 16
    monkeypatch.setattr(memory, "OUTPUTS_MAX_TOTAL", 200)
    x = c.take((100,), F32, 100)           # past the total: the cache starts over
    assert x is not None and c.kept_bytes == 100
    del held


def test_a_busy_oldest_array_moves_back():
    c, made = _cache()
    keep = c.take((4,), F32, 16)           # long-lived (a parameter, say)
    for _ in range(6):
        t = c.take((4,), F32, 16)
        assert t is not keep
        del t
    assert len(made) <= 3
    del keep


def test_empty_cache_lets_go():
    c, made = _cache()
    a = c.take((4,), F32, 16)
    del a
    for cache in list(memory._CACHES):
        cache.clear()
    assert c.kept_bytes == 0
    assert c.take((4,), F32, 16) is not made[0]


def test_the_cache_can_be_turned_off():
    assert memory.outputs_enabled({}) is True
    assert memory.outputs_enabled({"EMBER_CUDA_OUTPUT_CACHE": "0"}) is False


@pytest.mark.skipif(not em.cuda.is_available(), reason=f"cuda: {em.cuda.why_unavailable()}")
@pytest.mark.parametrize("fusion", [False, True], ids=["cuda", "fusion(cuda)"])
def test_live_outputs_never_share_memory(fusion):
    dev = em.device("cuda", fusion=fusion)
    a = em.tensor(np.arange(4, dtype=np.float32), device=dev)
    b = a + 1.0
    want = np.arange(4) * 2 + 1.0
    live = [a + b for _ in range(40)]
    assert len({t.primitive.data.ptr for t in live}) == 40
    for t in live:
        np.testing.assert_array_equal(t.numpy(), want)
    views = [t.primitive[1:] for t in live[:8]]        # views keep their arrays busy
    del live, t
    gc.collect()
    again = [a + b for _ in range(16)]
    taken = {v.data.mem.ptr for v in views}
    assert not taken & {t.primitive.data.mem.ptr for t in again}
    for t in again:
        np.testing.assert_array_equal(t.numpy(), want)
    c = a
    for _ in range(100):                               # a chain reusing its arrays
        c = c + b
    np.testing.assert_allclose(c.numpy(), np.arange(4) + 100 * (np.arange(4) + 1.0))
