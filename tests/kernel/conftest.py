"""Fixtures of the kernel tests."""
import pytest

from ember.kernel.c.runtime import CpuKernelRuntime


@pytest.fixture(scope="module")
def rt(tmp_path_factory):
    """A C kernel runtime of the test module's own (a fresh cache, no autotuning), or a
    skip naming why there is none."""
    r = CpuKernelRuntime(cache_root=tmp_path_factory.mktemp("ccache"), autotune=False)
    if not r.available():
        pytest.skip(f"no C compiler: {r.why_unavailable()}")
    return r
