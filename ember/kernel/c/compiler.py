"""The system C compiler: finding it, probing it, compiling kernels to cached shared libraries.

* **Finding.** ``EMBER_CC`` (a command, may carry flags: ``"clang -g"``), else the first of
  ``cc``, ``gcc``, ``clang`` on ``PATH``. None -> `why_unavailable` says why, and
  `unavailable_warning` is the one-time text the fusion layer shows before running unfused.
* **Probing**, once per compiler binary: its ``--version`` text, whether ``-march=native``,
  OpenMP (``-fopenmp``, else ``-fopenmp-simd``) and ``_Float16`` work (a probe library is
  built, loaded and called). The result is kept in the cache dir keyed by the compiler's
  path, size and mtime, so a fresh process starts without running the compiler at all.
* **Flags**: ``-O3 -march=native -std=gnu11 -fPIC -shared -fno-math-errno -ffp-contract=off
  -fno-fast-math -fno-trapping-math -fopenmp`` (+ ``EMBER_CFLAGS``). No fast-math and no FMA
  contraction, so exactly rounded operations match NumPy bit for bit; ``-fno-trapping-math``
  only says no one reads the FP exception flags (values are unchanged) and lets GCC vectorize
  floor/ceil/trunc. ``-march=native`` makes a library
  specific to this CPU: the cache key includes the CPU model and feature flags.
* **Cache**: ``<cache>/c/<key[:2]>/<key>.so`` (and the ``.c`` beside it, for reading), key =
  sha256 of source, compiler version text, flags and CPU. Writes go to a temporary file and
  are renamed into place (atomic); a ``fcntl`` lock (one of 256 stripes) makes concurrent
  processes build each library once. Loaded libraries are kept in memory.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
import warnings
from pathlib import Path

from ...errors import EmberError
from ..cache_dir import cache_dir
from ..cache_files import atomic_write, build_lock

__all__ = ["KernelCompileError", "CCompiler", "find_compiler", "get_compiler", "cpu_id"]

PROBE_VERSION = 3
# -fno-fast-math first: placed after -fno-math-errno it turns math errno back on, and every
# sqrt then keeps a branch that stops its loop from vectorizing
BASE_FLAGS = ("-O3", "-std=gnu11", "-fPIC", "-shared", "-fno-fast-math", "-fno-math-errno",
              "-ffp-contract=off", "-fno-trapping-math")

_PROBE_SRC = r"""
#include <stdint.h>
#ifdef EMBER_PROBE_F16
typedef _Float16 h_t;
float ember_probe_h(float x) { volatile h_t h = (h_t)x; return (float)h; }
#endif
int ember_probe_omp(int n) {
  int s = 0;
#pragma omp parallel for reduction(+:s) num_threads(2)
  for (int i = 0; i < n; i++) s += i;
#ifdef _OPENMP
  return s + 1000000;
#else
  return s;
#endif
}
"""


class KernelCompileError(EmberError, RuntimeError):
    """The C compiler rejected a generated kernel (a renderer bug: please report it)."""


_CPU: str | None = None


def cpu_id() -> str:
    """The CPU model and feature flags (a ``-march=native`` library runs only there)."""
    global _CPU
    if _CPU is None:
        model, flags = "", ""
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                for line in f:
                    k, _, v = line.partition(":")
                    k = k.strip()
                    if k in ("model name", "Processor", "cpu model") and not model:
                        model = v.strip()
                    elif k in ("flags", "Features") and not flags:
                        flags = v.strip()
                    if model and flags:
                        break
        except OSError:
            pass
        if not model:
            model = platform.processor() or "unknown"
        fh = hashlib.sha256(flags.encode()).hexdigest()[:12] if flags else "-"
        _CPU = f"{platform.machine()}|{model}|{fh}"
    return _CPU


def find_compiler(env=None) -> tuple:
    """``(argv, reason)``: the compiler command as a list, or ``None`` and why not."""
    env = os.environ if env is None else env
    spec = env.get("EMBER_CC")
    if spec:
        try:
            argv = shlex.split(spec)
        except ValueError as e:
            return None, f"EMBER_CC={spec!r} cannot be parsed ({e})"
        if not argv:
            return None, "EMBER_CC is set but empty"
        exe = shutil.which(argv[0], path=env.get("PATH"))
        if exe is None:
            return None, (f"EMBER_CC={spec!r}: {argv[0]!r} is not an executable file "
                          f"(nor a command on PATH)")
        return [exe] + argv[1:], ""
    for name in ("cc", "gcc", "clang"):
        exe = shutil.which(name, path=env.get("PATH"))
        if exe:
            return [exe], ""
    return None, "no C compiler found: EMBER_CC is not set and none of cc, gcc, clang is on PATH"


_atomic_write = atomic_write      # shared with the CUDA compiler (ember.kernel.cache_files)


class CCompiler:
    """One compiler with its flags and cache. ``available`` / ``reason`` tell whether it
    works; `load` returns the ``ember_kernel`` function of a source (compiling on a miss)."""

    def __init__(self, cc=None, cache_root=None, extra_flags=None, env=None):
        env = os.environ if env is None else env
        self.env_cc = cc if cc is not None else env.get("EMBER_CC")
        self.cache_root = cache_root
        if extra_flags is None:
            extra_flags = shlex.split(env.get("EMBER_CFLAGS", ""))
        self.extra_flags = tuple(extra_flags)
        self.argv = None
        self.version = ""
        self.flags: tuple = ()
        self.openmp = False
        self.openmp_simd = False
        self.float16 = False
        self.available = False
        self.reason = ""
        self.cpu = cpu_id()
        self.stats = {"compiles": 0, "disk_hits": 0, "memory_hits": 0, "compile_s": 0.0,
                      "last_compile_s": 0.0, "load_s": 0.0, "probe_s": 0.0,
                      "probe_cached": False}
        self._lock = threading.RLock()
        self._mem: dict = {}
        self._dir = None
        e = dict(env)
        if cc is not None:
            e["EMBER_CC"] = cc
        argv, why = find_compiler(e)
        if argv is None:
            self.reason = why
            return
        self.argv = argv
        try:
            self._dir = cache_dir("c", root=cache_root)
        except OSError as err:
            self.reason = f"the kernel cache directory cannot be created ({err})"
            return
        t0 = time.perf_counter()
        try:
            self._probe()
        except Exception as err:      # a broken compiler must not break ember
            self.reason = f"the C compiler {self.argv[0]} does not work: {err}"
            self.available = False
        self.stats["probe_s"] = time.perf_counter() - t0

    # -- probing ----------------------------------------------------------------------------
    def _probe(self):
        exe = self.argv[0]
        st = os.stat(exe)
        ident = json.dumps([PROBE_VERSION, BASE_FLAGS, os.path.realpath(exe), st.st_size,
                            st.st_mtime_ns,
                            self.argv[1:], self.extra_flags, self.cpu])
        pfile = self._dir / f"probe-{hashlib.sha256(ident.encode()).hexdigest()[:24]}.json"
        try:
            info = json.loads(pfile.read_text())
            if info.get("ident") == ident:
                self._apply(info)
                self.stats["probe_cached"] = True
                return
        except (OSError, ValueError):
            pass
        info = self._run_probe()
        info["ident"] = ident
        self._apply(info)
        if info["ok"]:
            try:
                _atomic_write(pfile, json.dumps(info).encode())
            except OSError:
                pass

    def _apply(self, info):
        self.version = info["version"]
        self.flags = tuple(info["flags"])
        self.openmp = info["openmp"]
        self.openmp_simd = info["openmp_simd"]
        self.float16 = info["float16"]
        self.available = info["ok"]
        self.reason = info.get("reason", "")

    def _run_probe(self) -> dict:
        try:
            r = subprocess.run(self.argv + ["--version"], capture_output=True, text=True,
                               timeout=60)
            version = (r.stdout or r.stderr).strip()
        except (OSError, subprocess.SubprocessError) as e:
            return {"ok": False, "reason": f"{self.argv[0]} --version failed: {e}",
                    "version": "", "flags": [], "openmp": False, "openmp_simd": False,
                    "float16": False}
        with tempfile.TemporaryDirectory(prefix="ember-probe-") as td:
            src = Path(td) / "probe.c"
            src.write_text(_PROBE_SRC)

            def attempt(flags, f16):
                so = Path(td) / f"p{len(os.listdir(td))}.so"
                cmd = self.argv + list(flags) + (["-DEMBER_PROBE_F16"] if f16 else []) + \
                    list(self.extra_flags) + ["-o", str(so), str(src), "-lm"]
                try:
                    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
                except (OSError, subprocess.SubprocessError) as e:
                    return None, str(e)
                if r.returncode != 0:
                    return None, r.stderr.strip()[-2000:]
                try:
                    lib = ctypes.CDLL(str(so))
                    fn = lib.ember_probe_omp
                    fn.restype = ctypes.c_int
                    fn.argtypes = [ctypes.c_int]
                    omp = fn(10) == 1000045
                    if f16:
                        h = lib.ember_probe_h
                        h.restype = ctypes.c_float
                        h.argtypes = [ctypes.c_float]
                        if abs(h(1.0009765625 + 2 ** -12) - 1.0009765625) > 0:
                            return None, "_Float16 conversions are wrong"
                except OSError as e:
                    return None, f"the probe library does not load: {e}"
                return omp, ""

            base = list(BASE_FLAGS)
            arch = []
            for a in (["-march=native"], ["-mcpu=native"], []):
                ok, err = attempt(base + a, False)
                if ok is not None:
                    arch = a
                    break
            else:
                return {"ok": False, "reason": f"{self.argv[0]} cannot build a shared "
                        f"library: {err}", "version": version, "flags": [],
                        "openmp": False, "openmp_simd": False, "float16": False}
            flags = base + arch
            openmp = simd = False
            ok, _ = attempt(flags + ["-fopenmp"], False)
            if ok:
                openmp = True
                flags.append("-fopenmp")
            else:
                ok, _ = attempt(flags + ["-fopenmp-simd"], False)
                if ok is not None:
                    simd = True
                    flags.append("-fopenmp-simd")
            f16_ok, _ = attempt(flags, True)
            return {"ok": True, "reason": "", "version": version, "flags": flags,
                    "openmp": openmp, "openmp_simd": simd, "float16": f16_ok is not None}

    # -- compiling --------------------------------------------------------------------------
    @property
    def all_flags(self) -> tuple:
        return tuple(self.argv[1:]) + self.flags + self.extra_flags

    def key(self, source: str) -> str:
        h = hashlib.sha256()
        for part in (source, self.version, " ".join(self.all_flags), self.cpu):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()[:40]

    def path_of(self, key: str) -> Path:
        return self._dir / key[:2] / f"{key}.so"

    def _file_lock(self, key):
        return build_lock(self._dir, key)

    def build(self, source: str, key: str | None = None) -> Path:
        """The shared library of ``source`` on disk (compiled if missing)."""
        if not self.available:
            raise KernelCompileError(f"no usable C compiler: {self.reason}")
        key = key or self.key(source)
        so = self.path_of(key)
        if so.exists():
            self.stats["disk_hits"] += 1
            return so
        so.parent.mkdir(parents=True, exist_ok=True)
        with self._file_lock(key):
            if so.exists():
                self.stats["disk_hits"] += 1
                return so
            c = so.with_suffix(".c")
            _atomic_write(c, source.encode())
            fd, tmp = tempfile.mkstemp(dir=so.parent, prefix=f".{key}.", suffix=".so")
            os.close(fd)
            cmd = self.argv + list(self.flags) + list(self.extra_flags) + \
                ["-o", tmp, str(c), "-lm"]
            t0 = time.perf_counter()
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
                if r.returncode < 0 or "Killed signal" in r.stderr:
                    # killed (the OOM killer under memory pressure): once more
                    time.sleep(0.5)
                    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
                if r.returncode != 0:
                    raise KernelCompileError(
                        f"the C compiler failed on a generated kernel ({c}):\n"
                        f"{' '.join(cmd)}\n{r.stderr.strip()[-4000:]}")
                os.replace(tmp, so)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            dt_ = time.perf_counter() - t0
            self.stats["compiles"] += 1
            self.stats["compile_s"] += dt_
            self.stats["last_compile_s"] = dt_
        return so

    def load(self, source: str):
        """``(key, fn)``: the ``ember_kernel`` ctypes function of ``source``."""
        key = self.key(source)
        hit = self._mem.get(key)
        if hit is not None:
            self.stats["memory_hits"] += 1
            return key, hit[1]
        with self._lock:
            hit = self._mem.get(key)
            if hit is not None:
                self.stats["memory_hits"] += 1
                return key, hit[1]
            so = self.build(source, key)
            t0 = time.perf_counter()
            try:
                lib = ctypes.CDLL(str(so))
            except OSError:
                # a library that does not load (another machine's, a damaged file): rebuild
                try:
                    os.unlink(so)
                except OSError:
                    pass
                so = self.build(source, key)
                lib = ctypes.CDLL(str(so))
            fn = lib.ember_kernel
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
            fn.restype = None
            self.stats["load_s"] += time.perf_counter() - t0
            self._mem[key] = (lib, fn)
            return key, fn

    def why_unavailable(self) -> str:
        return "" if self.available else self.reason

    def unavailable_warning(self) -> str:
        return (f"ember: generated C kernels are disabled ({self.reason}); fused ops run "
                f"unfused, with identical results. Install gcc or clang, or set EMBER_CC "
                f"to a C compiler, to enable them.")


_COMPILERS: dict = {}
_COMPILERS_LOCK = threading.Lock()
_WARNED = set()


def get_compiler(cache_root=None) -> CCompiler:
    """The process's compiler for the current ``EMBER_CC`` / ``EMBER_CFLAGS`` / cache dir."""
    k = (os.environ.get("EMBER_CC"), os.environ.get("EMBER_CFLAGS", ""),
         str(cache_root) if cache_root is not None else os.environ.get("EMBER_CACHE_DIR"),
         os.environ.get("XDG_CACHE_HOME"))
    c = _COMPILERS.get(k)
    if c is None:
        with _COMPILERS_LOCK:
            c = _COMPILERS.get(k)
            if c is None:
                c = _COMPILERS[k] = CCompiler(cache_root=cache_root)
    return c


def warn_unavailable_once(compiler: CCompiler) -> bool:
    """Emit the no-compiler warning once per reason per process; True if emitted now."""
    if compiler.available or compiler.reason in _WARNED:
        return False
    _WARNED.add(compiler.reason)
    warnings.warn(compiler.unavailable_warning(), RuntimeWarning, stacklevel=3)
    return True
