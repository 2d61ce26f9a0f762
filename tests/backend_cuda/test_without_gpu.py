"""What can be checked of the Cuda backend on any machine: it says why it cannot run, its
user-facing settings validate their input, and its streams' ordering logic (over a stand-in
for CuPy's runtime that records the calls)."""
from __future__ import annotations

import pytest

import ember as em
from ember.errors import BackendUnavailableError, ConfigError

no_gpu = pytest.mark.skipif(em.cuda.is_available(), reason="cuda: a GPU is present here")


@no_gpu
def test_device_says_why_cuda_is_unusable():
    why = em.cuda.why_unavailable()
    assert why and why.strip()
    with pytest.raises(BackendUnavailableError) as e:
        em.device("cuda")
    assert why in str(e.value)
    with pytest.raises(BackendUnavailableError):
        em.device("cuda:1", autodiff=True)


@no_gpu
def test_cuda_module_without_a_gpu():
    assert em.cuda.is_available() is False
    assert em.cuda.device_count() == 0
    for fn in (em.cuda.memory_stats, em.cuda.empty_cache, em.cuda.synchronize):
        with pytest.raises(BackendUnavailableError) as e:
            fn()
        assert em.cuda.why_unavailable() in str(e.value)


@no_gpu
def test_cuda_stacks_skip_with_the_reason():
    from ember.backend.stacks import STACKS
    for name in ("cuda", "autodiff(cuda)"):
        assert STACKS[name].availability() == em.cuda.why_unavailable()


def test_info_lists_cuda():
    from ember.backend.stacks import backend_info
    (b,) = [b for b in backend_info() if b.name == "cuda"]
    if b.reason is None:
        assert b.detail and "cuda:0" in b.detail and "compute" in b.detail
    else:
        assert b.reason == em.cuda.why_unavailable()


def test_matmul_precision_setting():
    assert em.get_matmul_precision() == "highest"
    try:
        for p in ("tf32", "high", "highest"):
            em.set_matmul_precision(p)
            assert em.get_matmul_precision() == p
        with pytest.raises(ConfigError) as e:
            em.set_matmul_precision("medium")
        assert "'highest'" in str(e.value) and "'tf32'" in str(e.value)
    finally:
        em.set_matmul_precision("highest")


def test_out_of_memory_error_is_an_ember_error_and_a_memory_error():
    assert issubclass(em.errors.OutOfMemoryError, em.errors.EmberError)
    assert issubclass(em.errors.OutOfMemoryError, MemoryError)


def test_test_stack_selector(monkeypatch):
    from tests.conformance.harness import selected_stacks
    monkeypatch.setenv("EMBER_TEST_STACKS", "cuda, autodiff(cuda)")
    assert [s.name for s in selected_stacks()] == ["cuda", "autodiff(cuda)"]
    monkeypatch.setenv("EMBER_TEST_STACKS", "*ndarray*")
    assert "cuda" not in [s.name for s in selected_stacks()]
    monkeypatch.setenv("EMBER_TEST_STACKS", "cuda,nope")
    with pytest.raises(ValueError, match="nope"):
        selected_stacks()


class _FakeCuda:
    """The few CuPy calls `StreamOrder` and `Scope` make, recorded."""

    def __init__(self):
        self.calls = []
        fake = self

        class Stream:
            def __init__(self, non_blocking=False):
                fake.calls.append(("Stream", non_blocking))
                self.ptr = 0x5000 + len(fake.calls)

        class Device:
            def __init__(self, index=0):
                pass

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

        class Event:
            def __init__(self, disable_timing=False):
                self.ptr = 0x7000

        class Runtime:
            @staticmethod
            def getDevice():
                return 0

            @staticmethod
            def setDevice(i):
                pass

            @staticmethod
            def eventRecord(ev, stream):
                fake.calls.append(("record", ev, stream))

            @staticmethod
            def streamWaitEvent(stream, ev, flags):
                fake.calls.append(("wait", stream, ev))

        self.cuda = type("cuda", (), {"Stream": Stream, "Device": Device, "Event": Event,
                                      "runtime": Runtime})
        self.ndarray = object


def test_streams_are_blocking_and_skip_the_event_for_the_legacy_stream():
    """ember's per-thread streams are blocking streams, so a reader on the legacy default
    stream (handle 0) is ordered by CUDA itself: no event; any other stream gets one."""
    from ember.backend.cuda.streams import StreamOrder
    cp = _FakeCuda()
    scope = StreamOrder(cp, 0).new_scope()
    assert cp.calls == [("Stream", False)]
    scope.order_stream(cp, 0)
    scope.order_stream(cp, scope.stream_ptr)
    assert cp.calls == [("Stream", False)]
    scope.order_stream(cp, 2)                          # the per-thread default stream
    assert cp.calls[1:] == [("record", 0x7000, scope.stream_ptr), ("wait", 2, 0x7000)]
