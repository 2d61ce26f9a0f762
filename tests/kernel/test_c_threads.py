"""How the C runtime starts OpenMP: a short busy-wait for libgomp's idle threads, set only
around libgomp's load and only when the user set nothing."""
import os
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {root!r})
    from ember.kernel.c.runtime import CpuKernelRuntime
    rt = CpuKernelRuntime(cache_root={cache!r})
    maps = open("/proc/self/maps").read()
    print(os.environ.get("GOMP_SPINCOUNT", "unset"), "libgomp" in maps, rt.available())
""")


def _run(tmp_path, env_extra):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {k: v for k, v in os.environ.items()
           if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    env.update(env_extra)
    r = subprocess.run([sys.executable, "-c", CHILD.format(root=root, cache=str(tmp_path))],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc (Linux)")
def test_spin_count_is_set_only_around_libgomps_load(tmp_path):
    spin, loaded, available = _run(tmp_path, {})
    assert spin == "unset"                 # the environment is left as it was
    if available == "True":
        assert loaded == "True"            # libgomp is loaded, having read the short spin
    spin, _, _ = _run(tmp_path, {"GOMP_SPINCOUNT": "123"})
    assert spin == "123"                   # the user's value is kept
