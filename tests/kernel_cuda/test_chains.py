"""The kernels fusion plans emit, as CUDA C: random op chains (the fusion suite's Hypothesis
strategy) and the cases that broke Burn's fusion (layer norm after swap_dims, softmax on a
non-last dim, var/mean along a swapped dim, a reduction after a negative-step slice) are run
on an interpreted Fusion(NdArray) device whose runtime records every kernel it launches.
Each recorded kernel is rendered (always), compiled (with NVRTC) and run on the GPU against
the interpreter, on the same inputs and args."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import ember as em
from ember.kernel.cuda.render import render
from tests.fusion.test_chains import _run as run_chain
from tests.fusion.test_chains import programs
from tests.kernel_cuda._util import (compare_with_interpreter, compile_only, gpu_or_skip,
                                     nvrtc_or_skip, recording_fusion_device)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cuda-chains")


def describe(k) -> str:
    """A short description of a kernel (its repr walks shared expression DAGs as trees:
    exponential)."""
    from ember.kernel.cuda.render import render
    return f"{type(k).__name__} {tuple(k.shape)} {render(k).mode}"


def recorded(fn) -> list:
    """The kernels (with inputs and args) ``fn(device)`` launches on the recording device."""
    dev, rec, restore = recording_fusion_device()
    try:
        fn(dev)
    finally:
        restore()
    return rec.launched


def burn_cases(dev):
    rng = np.random.default_rng(0)
    a = em.tensor(rng.normal(size=(4, 16, 12)).astype(np.float32), device=dev)
    em.layer_norm(a.swap_dims(1, 2), 16).numpy()
    em.layer_norm((a * 1.5).reshape(4, 192).reshape(4, 16, 12).swap_dims(1, 2), 16).numpy()
    b = em.tensor(rng.normal(size=(5, 6, 7)).astype(np.float32) * 3, device=dev)
    for dim in (0, 1, -2):
        em.softmax(b, dim).numpy()
    em.log_softmax(b * 2.0, 0).numpy()
    b.swap_dims(0, 2).var(1).numpy()
    b.swap_dims(0, 2).mean(1).numpy()
    b[:, ::-2, :].sum(1).numpy()
    b[::-1].max(0).numpy()
    x = em.tensor(rng.normal(size=(1000,)).astype(np.float32), device=dev)
    (x * ((x / 2 ** 0.5).erf() + 1) / 2).numpy()
    h = em.tensor(rng.normal(size=(8, 40)).astype(np.float16), device=dev)
    em.softmax(h, 1).numpy()
    (h * 2.0 + 1.0).sum(0).numpy()


BURN = None


def _burn():
    global BURN
    if BURN is None:
        BURN = recorded(burn_cases)
    return BURN


def test_burn_cases_render():
    ks = _burn()
    assert len(ks) >= 10
    for k, _, _ in ks:
        rd = render(k)
        assert "ember_" in rd.source


def test_burn_cases_compile(cache):
    comp = nvrtc_or_skip(cache)
    for k, _, _ in _burn():
        compile_only(comp, k)


def test_burn_cases_gpu(cache):
    rt = gpu_or_skip(cache)
    for i, (k, inputs, args) in enumerate(_burn()):
        compare_with_interpreter(rt, k, inputs, args, f"burn kernel {i}: {describe(k)}")


def _chain_kernels(program):
    return recorded(lambda dev: run_chain(program, dev))


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck),
          derandomize=True)
@given(programs())
def test_chains_render(program):
    for k, _, _ in _chain_kernels(program):
        render(k)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck),
          derandomize=True)
@given(program=programs())
def test_chains_compile(cache, program):
    comp = nvrtc_or_skip(cache)
    for k, _, _ in _chain_kernels(program):
        compile_only(comp, k)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck),
          derandomize=True)
@given(program=programs())
def test_chains_gpu(cache, program):
    rt = gpu_or_skip(cache)
    with np.errstate(all="ignore"):
        for i, (k, inputs, args) in enumerate(_chain_kernels(program)):
            compare_with_interpreter(rt, k, inputs, args,
                                     f"kernel {i} ({describe(k)}) of {program}")
