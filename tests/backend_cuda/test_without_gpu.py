"""What can be checked of the Cuda backend on any machine: it says why it cannot run, and
its user-facing settings validate their input."""
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
