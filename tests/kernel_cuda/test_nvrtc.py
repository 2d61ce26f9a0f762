"""NVRTC through ctypes and the CUDA binary cache: finding the library (and saying why not),
CUBIN for a supported architecture and PTX beyond it, the disk cache keyed by source,
architecture and NVRTC version (atomic files, shared across processes), compile errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ember import dtype as dt
from ember.kernel import ir
from ember.kernel.cuda import nvrtc as nv
from ember.kernel.cuda.compiler import CudaCompiler, default_arch
from ember.kernel.cuda.render import render
from ember.kernel.cuda.runtime import CudaKernelRuntime
from tests.kernel_cuda._util import nvrtc_or_skip

ROOT = Path(__file__).resolve().parents[2]

KERNEL = ir.Elementwise((1000,), (ir.BufferView(dt.f32, (1,)),),
                        (ir.Load(0, dt.f32) * 2.0 + 1.0,), (dt.f32,))


def test_missing_nvrtc_says_why(tmp_path):
    env = {"EMBER_NVRTC": str(tmp_path / "libnvrtc-nowhere.so"), "PATH": ""}
    lib, why = nv.find_nvrtc(env)
    if lib is not None:      # another candidate loaded: only the explicit one must be first
        assert nv.candidates(env)[0] == Path(env["EMBER_NVRTC"])
        return
    assert "EMBER_NVRTC" in why and "libnvrtc-nowhere" in why


def test_explicit_library_comes_first(tmp_path):
    env = {"EMBER_NVRTC": "/opt/x/libnvrtc.so.12", "CUDA_PATH": str(tmp_path)}
    c = nv.candidates(env)
    assert c[0] == Path("/opt/x/libnvrtc.so.12")


def test_wheel_folders_are_searched():
    for major, d in nv._wheel_dirs():
        assert d.is_dir() and major in (12, 13, 14)


def test_unavailable_runtime_has_a_reason(monkeypatch):
    rt = CudaKernelRuntime()
    if rt.available():
        pytest.skip("CUDA kernels are available here")
    assert rt.why_unavailable()
    assert "disabled" in rt.warning_text()
    from ember.errors import BackendUnavailableError
    with pytest.raises(BackendUnavailableError):
        rt.compile(KERNEL)


def test_default_arch(monkeypatch):
    assert default_arch({}) == 90
    assert default_arch({"EMBER_CUDA_ARCH": "sm_80"}) == 80
    assert default_arch({"EMBER_CUDA_ARCH": "8.6"}) == 86
    assert default_arch({"EMBER_CUDA_ARCH": "120"}) == 120


def test_cubin_and_ptx_targets(tmp_path):
    comp = nvrtc_or_skip(tmp_path)
    lib = comp.nvrtc
    assert lib.version[0] >= 11
    src = render(KERNEL).source
    c = lib.compile(src, 90, comp.options)
    if 90 in lib.archs:
        assert c.kind == "cubin" and c.binary[:4] == b"\x7fELF"
    # a capability newer than any this NVRTC knows: PTX for the newest it has
    future = max(lib.archs or [90]) + 1
    c2 = lib.compile(src, future, comp.options)
    assert c2.kind == "ptx" and b".entry ember_kernel" in c2.binary
    with pytest.raises(nv.NvrtcError):
        lib.target(10)


def test_compile_error_names_the_problem(tmp_path):
    comp = nvrtc_or_skip(tmp_path)
    with pytest.raises(nv.NvrtcError) as e:
        comp.build('extern "C" __global__ void k() { undeclared_thing(); }', 90)
    assert "undeclared_thing" in str(e.value)


def test_disk_cache(tmp_path):
    comp = nvrtc_or_skip(tmp_path)
    src = render(KERNEL).source
    c1 = comp.build(src, 90)
    assert comp.stats["compiles"] == 1
    key = comp.key(src, 90)
    kind = c1.kind
    path = comp.path_of(key, kind)
    assert path.is_file() and path.with_suffix(".cu").read_text() == src
    assert path.parent.name == key[:2] and path.parent.parent.name == "cuda"
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]   # no temp left
    comp.build(src, 90)
    assert comp.stats["memory_hits"] == 1 and comp.stats["compiles"] == 1
    fresh = CudaCompiler(cache_root=tmp_path)
    c2 = fresh.build(src, 90)
    assert fresh.stats["disk_hits"] == 1 and fresh.stats["compiles"] == 0
    assert c2.binary == c1.binary
    # the key covers the architecture and the source
    assert comp.key(src, 80) != key and comp.key(src + "\n", 90) != key
    comp.forget(src, 90)
    assert not path.exists()


SCRIPT = textwrap.dedent("""
    import json, sys, time
    from ember import dtype as dt
    from ember.kernel import ir
    from ember.kernel.cuda.compiler import CudaCompiler
    from ember.kernel.cuda.render import render
    start = float(sys.argv[2])
    comp = CudaCompiler(cache_root=sys.argv[1])
    k = ir.Elementwise((1000,), (ir.BufferView(dt.f32, (1,)),),
                       (ir.Load(0, dt.f32) * 3.5 + 1.0,), (dt.f32,))
    src = render(k).source
    while time.time() < start:
        pass
    c = comp.build(src, 90)
    print(json.dumps({"n": len(c.binary), **comp.stats}))
""")


def test_concurrent_processes_compile_once(tmp_path):
    nvrtc_or_skip(tmp_path)
    import time
    start = time.time() + 2.0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path), str(start)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=ROOT) for _ in range(3)]
    res = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        res.append(json.loads(out.strip().splitlines()[-1]))
    assert sum(r["compiles"] for r in res) == 1, res
    assert len({r["n"] for r in res}) == 1


def test_threads_build_different_sources_at_once_and_one_source_once(tmp_path):
    """One compiler shared by threads: a source asked for by several threads is compiled
    once (the others wait for it); different sources compile side by side, each correct."""
    import concurrent.futures
    import threading
    comp = nvrtc_or_skip(tmp_path)
    srcs = [render(KERNEL).source.replace("ember_kernel", f"ember_kernel_{i}")
            for i in range(4)]
    barrier = threading.Barrier(8)

    def build(i):
        barrier.wait(10)
        return comp.build(srcs[i % 4], default_arch())
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        got = list(pool.map(build, range(8)))
    assert comp.stats["compiles"] == 4, comp.stats
    assert all(c.binary for c in got)
    for i in range(4):              # the same source gave the same binary to both threads
        assert got[i] is got[i + 4]
    assert {comp.key(s_, default_arch()) for s_ in srcs} == set(comp._mem)


def test_options_are_part_of_the_key(tmp_path):
    comp = nvrtc_or_skip(tmp_path)
    src = render(KERNEL).source
    assert comp.key(src, 90) != comp.key(src, 90, ("--use_fast_math",))
    a = comp.build(src, 90)
    b = comp.build(src, 90, ("--use_fast_math",))
    assert comp.stats["compiles"] == 2 and a.binary and b.binary
