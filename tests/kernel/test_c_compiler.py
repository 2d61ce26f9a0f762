"""The C compiler layer: cache directory, disk cache shared across processes (atomic, locked),
compile and load times, and the no-compiler path."""
import os
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from ember import dtype as dt
from ember.kernel import ir
from ember.kernel.c.compiler import CCompiler, find_compiler
from ember.kernel.c.runtime import CpuKernelRuntime
from ember.kernel.cache_dir import cache_dir, default_cache_root

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    import numpy as np
    from ember import dtype as dt
    from ember.kernel import ir
    from ember.kernel.c.runtime import CpuKernelRuntime
    start = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    rt = CpuKernelRuntime(autotune=False)
    k = ir.Elementwise((1000,), (ir.BufferView(dt.f32, (1,)),),
                       (ir.Load(0, dt.f32) * float(sys.argv[1]) + 1.0,), (dt.f32,))
    while time.time() < start:      # a common start line for concurrent runs
        pass
    t0 = time.perf_counter()
    p = rt.compile(k)
    t = time.perf_counter() - t0
    x = np.arange(1000, dtype=np.float32)
    (out,) = rt.launch(p, [x])
    ok = bool((out == x * np.float32(float(sys.argv[1])) + np.float32(1.0)).all())
    print(json.dumps({"ok": ok, "t": t, **rt.compiler.stats}))
""")


def _run(env, *args, background=False):
    cmd = [sys.executable, "-c", SCRIPT, *map(str, args)]
    e = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
    if background:
        return subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, cwd=ROOT)
    r = subprocess.run(cmd, env=e, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    import json
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture
def cc_or_skip():
    argv, why = find_compiler()
    if argv is None:
        pytest.skip(why)


def test_cache_dir_resolution(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "a"))
    assert default_cache_root() == tmp_path / "a"
    assert cache_dir("c") == tmp_path / "a" / "c" and (tmp_path / "a" / "c").is_dir()
    monkeypatch.delenv("EMBER_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert default_cache_root() == tmp_path / "x" / "ember"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_root() == Path.home() / ".cache" / "ember"


def test_disk_cache_hit_in_fresh_process(tmp_path, cc_or_skip):
    env = {"EMBER_CACHE_DIR": str(tmp_path)}
    first = _run(env, 1.75)
    assert first["ok"] and first["compiles"] == 1 and first["disk_hits"] == 0
    second = _run(env, 1.75)
    assert second["ok"] and second["compiles"] == 0 and second["disk_hits"] == 1
    assert second["probe_cached"]
    # a cached library loads in milliseconds (render + hash + dlopen); generous bound for CI
    assert second["t"] < 0.05, second
    print(f"first compile {first['t'] * 1e3:.1f} ms, from disk {second['t'] * 1e3:.2f} ms")


def test_concurrent_compiles_share_one_build(tmp_path, cc_or_skip):
    env = {"EMBER_CACHE_DIR": str(tmp_path)}
    _run(env, 0.5)                     # probe once, so both racers start compiling together
    start = time.time() + 2.0
    procs = [_run(env, 2.25, start, background=True) for _ in range(2)]
    import json
    outs = []
    for p in procs:
        so, se = p.communicate(timeout=120)
        assert p.returncode == 0, se
        outs.append(json.loads(so.strip().splitlines()[-1]))
    assert all(o["ok"] for o in outs)
    assert sum(o["compiles"] for o in outs) == 1, outs      # the lock: one build, one hit
    assert sum(o["disk_hits"] for o in outs) == 1, outs
    leftovers = [p for p in (tmp_path / "c").rglob(".*") if p.is_file()]
    assert not leftovers, leftovers                          # temp files renamed or removed


def test_first_compile_is_fast(tmp_path, cc_or_skip):
    rt = CpuKernelRuntime(cache_root=tmp_path, autotune=False)
    k = ir.Elementwise((64, 64), (ir.BufferView(dt.f32, (64, 1)),),
                       (ir.maximum(ir.Load(0, dt.f32), 0.0),), (dt.f32,))
    t0 = time.perf_counter()
    p = rt.compile(k)
    t = time.perf_counter() - t0
    assert rt.compiler.stats["compiles"] == 1
    print(f"small kernel: first compile {t * 1e3:.0f} ms")
    assert t < 2.0          # the target is <= 0.3 s; this bound only catches pathologies
    t0 = time.perf_counter()
    assert rt.compile(k) is p
    assert time.perf_counter() - t0 < 0.05


def test_no_compiler_is_reported(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CC", "/nonexistent/cc")
    rt = CpuKernelRuntime(cache_root=tmp_path, autotune=False)
    assert not rt.available()
    why = rt.why_unavailable()
    assert "EMBER_CC" in why and "/nonexistent/cc" in why
    text = rt.warning_text()
    assert "unfused" in text and "identical results" in text
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert rt.warn_once()
        assert not rt.warn_once()
    assert len(w) == 1 and "EMBER_CC" in str(w[0].message)
    from ember.errors import BackendUnavailableError
    k = ir.Elementwise((2,), (), (ir.Const(1.0, dt.f32),), (dt.f32,))
    with pytest.raises(BackendUnavailableError, match="EMBER_CC"):
        rt.compile(k)


def test_broken_compiler_is_reported(tmp_path):
    c = CCompiler(cc="false", cache_root=tmp_path)
    assert not c.available
    assert "false" in c.why_unavailable()


def test_no_compiler_on_path(tmp_path):
    argv, why = find_compiler({"PATH": str(tmp_path)})
    assert argv is None and "cc, gcc, clang" in why


def test_key_covers_flags(tmp_path, cc_or_skip):
    a = CCompiler(cache_root=tmp_path, extra_flags=())
    b = CCompiler(cache_root=tmp_path, extra_flags=("-DEMBER_X=1",))
    assert a.available and b.available
    assert a.key("x") != b.key("x") and a.key("x") != a.key("y")
    assert a.cpu and a.version


def test_damaged_library_is_rebuilt(tmp_path, cc_or_skip):
    rt = CpuKernelRuntime(cache_root=tmp_path, autotune=False)
    k = ir.Elementwise((3,), (ir.BufferView(dt.f64, (1,)),), (ir.Load(0, dt.f64) + 4.0,),
                       (dt.f64,))
    src = __import__("ember.kernel.c.render", fromlist=["render"]).render(
        k, rt._options()).source
    so = rt.compiler.path_of(rt.compiler.key(src))
    so.parent.mkdir(parents=True, exist_ok=True)
    so.write_bytes(b"not a library")
    p = rt.compile(k)
    np.testing.assert_array_equal(rt.launch(p, [np.ones(3)])[0], np.full(3, 5.0))
