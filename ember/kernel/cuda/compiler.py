"""CUDA C -> CUBIN (or PTX) through NVRTC, cached on disk.

* **Options**: ``--fmad=false`` (no contraction of a multiply and an add into an FMA, so
  f32/f64 arithmetic rounds as NumPy's and the C kernels'), IEEE division and square root
  and no flush-to-zero (NVRTC's defaults), ``-w``; plus ``EMBER_NVRTC_FLAGS``.
* **Cache**: ``<cache>/cuda/<key[:2]>/<key>.cubin`` (``.ptx`` when NVRTC cannot make a CUBIN
  for the device), the ``.cu`` source beside it for reading. The key hashes the source, the
  target (kind and architecture), NVRTC's version and the options. Writes are atomic and a
  lock makes concurrent processes compile each kernel once (`ember.kernel.cache_files`).
  Compiled kernels are kept in memory too.
"""
from __future__ import annotations

import hashlib
import os
import shlex
import threading
import time
from pathlib import Path

from ..cache_dir import cache_dir
from ..cache_files import atomic_write, build_lock
from .nvrtc import Compiled, NvrtcError, get_nvrtc

__all__ = ["CudaCompiler", "get_compiler", "BASE_OPTIONS", "DEFAULT_ARCH", "NvrtcError"]

BASE_OPTIONS = ("--fmad=false", "-w")
DEFAULT_ARCH = 90          # compile-only (no GPU): sm_90 unless EMBER_CUDA_ARCH says otherwise


def default_arch(env=None) -> int:
    """``EMBER_CUDA_ARCH`` (``90``, ``sm_90`` or ``9.0``), else 90."""
    env = os.environ if env is None else env
    s = (env.get("EMBER_CUDA_ARCH") or "").strip().lower()
    if not s:
        return DEFAULT_ARCH
    s = s.removeprefix("sm_").removeprefix("compute_")
    try:
        return int(round(float(s) * 10)) if "." in s else int(s)
    except ValueError:
        return DEFAULT_ARCH


class CudaCompiler:
    """NVRTC with its options and disk cache. ``available`` / ``reason`` say whether NVRTC
    was found; `build` returns the `Compiled` binary of a source for an architecture."""

    def __init__(self, cache_root=None, prefer_major: int | None = None, extra_options=None,
                 env=None):
        env = os.environ if env is None else env
        self.cache_root = cache_root
        if extra_options is None:
            extra_options = shlex.split(env.get("EMBER_NVRTC_FLAGS", ""))
        self.options = BASE_OPTIONS + tuple(extra_options)
        self.stats = {"compiles": 0, "disk_hits": 0, "memory_hits": 0, "compile_s": 0.0,
                      "last_compile_s": 0.0}
        self._mem: dict = {}
        self._lock = threading.RLock()
        self._building: dict = {}     # key -> the lock of its build (while one runs)
        self._dir = None
        self.nvrtc, self.reason = get_nvrtc(prefer_major)
        self.available = self.nvrtc is not None
        if self.available:
            try:
                self._dir = cache_dir("cuda", root=cache_root)
            except OSError as e:
                self.available = False
                self.reason = f"the kernel cache directory cannot be created ({e})"

    @property
    def version(self) -> str:
        return self.nvrtc.version_text if self.nvrtc else ""

    def why_unavailable(self) -> str:
        return "" if self.available else self.reason

    def key(self, source: str, arch: int, options=()) -> str:
        kind, tarch = self.nvrtc.target(arch)
        h = hashlib.sha256()
        for part in (source, f"{kind}_{tarch}", self.version, self.nvrtc.path.rsplit("/", 1)[-1],
                     " ".join(self.options + tuple(options))):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()[:40]

    def path_of(self, key: str, kind: str) -> Path:
        return self._dir / key[:2] / f"{key}.{kind}"

    def build(self, source: str, arch: int, options=()) -> Compiled:
        """The compiled ``source`` for compute capability ``arch`` (from memory, from disk,
        or compiled now); ``options``: NVRTC options beyond the compiler's."""
        if not self.available:
            raise NvrtcError(f"CUDA kernels cannot be compiled: {self.reason}")
        options = tuple(options)
        key = self.key(source, arch, options)
        hit = self._mem.get(key)
        if hit is not None:
            self.stats["memory_hits"] += 1
            return hit
        # one build per key at a time (threads asking for one source wait for its build);
        # builds of different sources run at once (NVRTC works outside the GIL)
        with self._lock:
            lock = self._building.get(key)
            if lock is None:
                lock = self._building[key] = threading.Lock()
        with lock:
            hit = self._mem.get(key)
            if hit is not None:
                with self._lock:
                    self.stats["memory_hits"] += 1
                return hit
            kind, tarch = self.nvrtc.target(arch)
            path = self.path_of(key, kind)
            c = self._read(path, kind, tarch)
            if c is None:
                path.parent.mkdir(parents=True, exist_ok=True)
                with build_lock(self._dir, key):
                    c = self._read(path, kind, tarch)
                    if c is None:
                        t0 = time.perf_counter()
                        c = self.nvrtc.compile(source, arch, self.options + options)
                        dt_ = time.perf_counter() - t0
                        with self._lock:
                            self.stats["compiles"] += 1
                            self.stats["compile_s"] += dt_
                            self.stats["last_compile_s"] = dt_
                        try:
                            atomic_write(path.with_suffix(".cu"), source.encode())
                            atomic_write(path, c.binary)
                        except OSError:
                            pass         # a read-only cache: the kernel still runs
            with self._lock:
                self._mem[key] = c
                self._building.pop(key, None)
            return c

    def _read(self, path: Path, kind: str, arch: int):
        try:
            data = path.read_bytes()
        except OSError:
            return None
        if not data:
            return None
        with self._lock:
            self.stats["disk_hits"] += 1
        return Compiled(data, kind, arch, "")

    def forget(self, source: str, arch: int, options=()) -> None:
        """Drop a cached binary (one the driver refused to load) so the next build compiles."""
        key = self.key(source, arch, tuple(options))
        self._mem.pop(key, None)
        kind, _ = self.nvrtc.target(arch)
        try:
            os.unlink(self.path_of(key, kind))
        except OSError:
            pass


_COMPILERS: dict = {}
_COMPILERS_LOCK = threading.Lock()


def get_compiler(cache_root=None, prefer_major: int | None = None) -> CudaCompiler:
    """The process's compiler for the current cache dir, NVRTC and ``EMBER_NVRTC_FLAGS``."""
    k = (str(cache_root) if cache_root is not None else os.environ.get("EMBER_CACHE_DIR"),
         os.environ.get("XDG_CACHE_HOME"), os.environ.get("EMBER_NVRTC"),
         os.environ.get("EMBER_NVRTC_FLAGS", ""), prefer_major)
    c = _COMPILERS.get(k)
    if c is None:
        with _COMPILERS_LOCK:
            c = _COMPILERS.get(k)
            if c is None:
                c = _COMPILERS[k] = CudaCompiler(cache_root=cache_root,
                                                 prefer_major=prefer_major)
    return c
