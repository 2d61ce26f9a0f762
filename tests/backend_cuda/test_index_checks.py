"""Index checks on the device (ember/backend/cuda/checks.py): an out-of-range index raises
`ember.errors.IndexError` at the next read or sync on that thread, with the op's message,
and the op path never reads the index range back. The check kernels' source compiles with
NVRTC wherever it is found, and the host logic runs over NumPy with the kernel re-enacted;
the rest runs on a GPU and is skipped by name elsewhere."""
from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.backend.cuda import checks
from ember.errors import IndexError_
from ember.kernel.cuda.compiler import default_arch
from ember.ops import _xp
from tests.kernel_cuda._util import nvrtc_or_skip

gpu = pytest.mark.skipif(not em.cuda.is_available(),
                         reason=f"cuda: {em.cuda.why_unavailable()}")
STACKS = {"cuda": dict(fusion=False), "fusion(cuda)": dict(fusion=True)}


# -- without a GPU ------------------------------------------------------------------------
def test_check_source_compiles(tmp_path):
    c = nvrtc_or_skip(tmp_path).build(checks.CHECK_SOURCE, default_arch())
    missing = [n for n in checks.check_kernel_names() if n.encode() not in c.binary]
    assert not missing, f"entry points the host code launches but the binary lacks: {missing}"


def test_check_indices_defers_to_a_namespace_that_checks_on_its_device():
    queued = []

    class Deferring:        # a device namespace: value_range must not be asked
        stack = staticmethod(np.stack)

        @staticmethod
        def defer_index_check(a, size, message, ignore=None):
            queued.append((a.tolist(), size, message(7)) + ((ignore,) if ignore else ()))

    _xp.check_indices(np.array([0, 7]), 5, lambda bad: f"op: index {bad}", Deferring)
    assert queued == [([0, 7], 5, "op: index 7")]
    # a value let through (cross-entropy's ignore_index) goes with the check
    _xp.check_indices(np.array([0, -100]), 5, lambda bad: f"op: index {bad}", Deferring,
                      ignore=-100)
    assert queued[-1] == ([0, -100], 5, "op: index 7", -100)
    _xp.check_indices(np.array([4, -100, 0]), 5, lambda bad: "never", np, ignore=-100)
    with pytest.raises(IndexError_, match="op: index 5"):
        _xp.check_indices(np.array([-100, 5]), 5, lambda bad: f"op: index {bad}", np,
                          ignore=-100)
    # an empty dim: every value is out of range, raised at once (one read)
    with pytest.raises(IndexError_, match="op: index 0"):
        _xp.check_indices(np.array([0]), 0, lambda bad: f"op: index {bad}", Deferring)
    with pytest.raises(IndexError_, match="op: index -1"):
        _xp.check_indices(np.array([3, -1]), 5, lambda bad: f"op: index {bad}", np)
    _xp.check_indices(np.array([], np.int64), 0, lambda bad: "never", np)


# -- without a GPU: the host logic over NumPy, the check kernel re-enacted -------------------
class _Word(np.ndarray):
    """A uint64[2] device word on the host: CuPy's ``get`` and ``fill``."""

    def get(self):
        _Reads.count += 1
        return np.array(self)


class _Reads:
    count = 0


class _FakeKernels:
    """`ops._Kernels` running ``ember_check_range_*`` as NumPy: the first out-of-range value
    (not the ignored one) goes into the word unless it holds a code already."""

    def __init__(self, cp, source):
        assert "ember_check_range" in source

    def launch(self, name, grid, block, arrays, i64s=(), i32s=(), smem=0):
        idx, word = arrays
        n, size, code, ignore, has_ignore = i64s
        assert name == "ember_check_range_" + checks._NAMES[idx.dtype] and n == idx.size
        v = idx.reshape(-1).astype(np.int64)
        bad = (v < 0) | (v >= size)
        if has_ignore:
            bad &= v != ignore
        if bad.any() and word[0] == 0:
            word[0] = code
            word[1] = np.int64(v[bad][0]).view(np.uint64)


@pytest.fixture
def host_checks(monkeypatch):
    import types
    monkeypatch.setattr(checks, "_Kernels", _FakeKernels)
    cp = types.SimpleNamespace(
        zeros=lambda n, dtype: np.zeros(n, dtype).view(_Word),
        ascontiguousarray=np.ascontiguousarray,
        cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(getDevice=lambda: 0)))
    _Reads.count = 0
    return checks.DeferredChecks(cp)


def test_host_logic_raises_the_first_error_once(host_checks):
    c = host_checks
    c(np.array([0, 3], np.int64), 4, lambda v: f"a: index {v}")         # fine
    assert c.pending(0) and not c.pending(1)
    c.raise_found(0)                                                    # nothing found
    assert not c.pending(0) and _Reads.count == 1
    c.raise_found(0)                                                    # nothing pending:
    assert _Reads.count == 1                                            # no read
    c(np.array([[1, -3]], np.int32), 4, lambda v: f"b: index {v}")      # first bad: -3
    c(np.array([9], np.uint8), 4, lambda v: f"c: index {v}")
    with pytest.raises(IndexError_, match=r"^b: index -3 \(found on cuda:0"):
        c.raise_found(0)
    assert not c.pending(0)
    c(np.array([2], np.int16), 4, lambda v: "never")                    # the word was reset
    c.raise_found(0)


def test_host_logic_ignore_and_bounded_pending(host_checks, monkeypatch):
    c = host_checks
    c(np.array([-100, 2, -100], np.int64), 3, lambda v: "never", ignore=-100)
    c.raise_found(0)
    c(np.array([-100, 7], np.int64), 3, lambda v: f"t: class {v}", ignore=-100)
    with pytest.raises(IndexError_, match="t: class 7"):
        c.raise_found(0)
    monkeypatch.setattr(checks, "MAX_PENDING", 2)
    c(np.array([5], np.int64), 3, lambda v: f"u: {v}")
    c(np.array([0], np.int64), 3, lambda v: "never")
    with pytest.raises(IndexError_, match="u: 5"):                      # the third check
        c(np.array([0], np.int64), 3, lambda v: "never")               # reads the word
    with pytest.raises(TypeError, match="not an int dtype"):
        c(np.array([0.5]), 3, lambda v: "never")
    c(np.array([], np.int64), 3, lambda v: "never")                     # empty: nothing
    assert not c.pending(0)


# -- on a GPU -------------------------------------------------------------------------------
@pytest.fixture
def no_range_reads(monkeypatch):
    """The op path must not read an index range back (a synchronization)."""
    def refuse(a, xp=np):
        if xp is not np:
            raise AssertionError("an index range was read back from the device")
        return int(a.min()), int(a.max())
    monkeypatch.setattr(_xp, "value_range", refuse)


def _cases(dev):
    w = em.tensor(np.arange(12, dtype=np.float32).reshape(4, 3), device=dev)
    x = em.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device=dev)
    logits = em.tensor(np.zeros((2, 4), np.float32), device=dev)
    return {
        "embedding": (lambda i: em.embedding(w, i), [[0, 9]], np.int64,
                      "embedding: index 9 is out of range for 4 embeddings; valid: 0..3"),
        "index_select": (lambda i: x.index_select(1, i), [2, -1], np.int32,
                         "index_select: index -1 is out of range for dim 1 of size 3"),
        "gather": (lambda i: x.gather(1, i), [[0, 1], [3, 0]], np.int64,
                   "gather: index 3 is out of range for dim 1 of size 3"),
        "one_hot": (lambda i: em.one_hot(i, 3), [1, 200], np.uint8,
                    "one_hot: class 200 is out of range for num_classes=3"),
        "cross_entropy": (lambda i: nn.functional.cross_entropy(logits, i), [-100, 4],
                          np.int64, "cross_entropy: target class 4 is out of range for 4 "
                                    "classes; valid: 0 .. 3, or ignore_index -100"),
    }


@gpu
@pytest.mark.parametrize("stack", list(STACKS))
@pytest.mark.parametrize("op", ["embedding", "index_select", "gather", "one_hot",
                                "cross_entropy"])
def test_bad_index_raises_at_the_next_read(stack, op, no_range_reads):
    dev = em.device("cuda", **STACKS[stack])
    fn, bad, dtype, msg = _cases(dev)[op]
    out = fn(em.tensor(np.array(bad, dtype), device=dev))      # queued: no raise, no read
    with pytest.raises(IndexError_) as info:
        out.numpy()
    text = str(info.value)
    assert msg in text and "found on cuda:" in text, text
    # raised once: the device goes on, and good indices read fine
    good = [[0, 1]] if op in ("embedding",) else [[0, 1], [2, 0]] if op == "gather" else \
        [-100, 3] if op == "cross_entropy" else [1, 2]
    got = fn(em.tensor(np.array(good, dtype), device=dev)).numpy()
    cpu = em.device("cpu")
    want = _cases(cpu)[op][0](em.tensor(np.array(good, dtype), device=cpu)).numpy()
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-6)


@gpu
def test_sync_raises_what_the_checks_found(no_range_reads):
    dev = em.device("cuda")
    w = em.tensor(np.ones((4, 2), np.float32), device=dev)
    em.embedding(w, em.tensor(np.array([4]), device=dev))
    with pytest.raises(IndexError_, match="index 4 is out of range for 4 embeddings"):
        em.sync(dev)
    em.sync(dev)                                           # reported once


@gpu
def test_first_error_wins_and_pending_checks_are_bounded(monkeypatch, no_range_reads):
    dev = em.device("cuda", fusion=False)
    w = em.tensor(np.ones((4, 2), np.float32), device=dev)
    monkeypatch.setattr(checks, "MAX_PENDING", 3)
    for _ in range(10):                                    # good: read every 3 checks
        em.embedding(w, em.tensor(np.array([0, 3]), device=dev))
    em.embedding(w, em.tensor(np.array([5]), device=dev))
    em.embedding(w, em.tensor(np.array([6]), device=dev))
    with pytest.raises(IndexError_, match="index 5 is out of range"):
        em.sync(dev)


@gpu
def test_training_through_an_embedding_reads_nothing_back(no_range_reads):
    dev = em.device("cuda").autodiff()
    dev.seed(0)
    emb = nn.Embedding(16, 8, device=dev)
    idx = em.tensor(np.array([[1, 2, 15], [0, 3, 3]]), device=dev)
    loss = (emb(idx) ** 2).sum()
    grads = loss.backward()
    g = emb.weight.grad(grads).numpy()
    want = np.zeros((16, 8), np.float32)
    w = emb.weight.numpy()
    for i in (1, 2, 15, 0, 3, 3):
        want[i] += 2 * w[i]
    np.testing.assert_allclose(g, want, rtol=1e-6)
